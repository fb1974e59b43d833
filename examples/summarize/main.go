// Command summarize prints the last value per key found in a file sink's JSON-lines output —
// for a running aggregate that is the final result — and optionally checks it.
//
//	go run ./examples/summarize -key parity -value value [-expect odd=250000,even=250500] out/odd-even
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	key := flag.String("key", "key", "field holding the key")
	value := flag.String("value", "value", "field holding the running value")
	expect := flag.String("expect", "", "expected final values, key=value[,key=value...]")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: summarize [-key F] [-value F] [-expect k=v,...] DIR")
		os.Exit(2)
	}
	final, lines, err := lastByKey(flag.Arg(0), *key, *value)
	if err != nil {
		fmt.Fprintln(os.Stderr, "summarize:", err)
		os.Exit(1)
	}
	keys := make([]string, 0, len(final))
	for k := range final {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Printf("%d records in %s; final %s per %s:\n", lines, flag.Arg(0), *value, *key)
	want := map[string]string{}
	for _, kv := range strings.Split(*expect, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			want[k] = v
		}
	}
	ok := true
	for _, k := range keys {
		mark := ""
		if w, has := want[k]; has {
			if w == final[k] {
				mark = "  (expected " + w + ": ok)"
			} else {
				mark = "  (expected " + w + ": WRONG)"
				ok = false
			}
		}
		fmt.Printf("  %-8s %s%s\n", k, final[k], mark)
	}
	for k := range want {
		if _, has := final[k]; !has {
			fmt.Printf("  %-8s missing (expected %s)\n", k, want[k])
			ok = false
		}
	}
	if !ok {
		os.Exit(1)
	}
}

// lastByKey reads every part file; within a part file the last record of a key is its latest.
// A key's records all go to one sink subtask, so one part file holds all of them.
func lastByKey(dir, key, value string) (map[string]string, int, error) {
	files, err := filepath.Glob(filepath.Join(dir, "part-*"))
	if err != nil {
		return nil, 0, err
	}
	if len(files) == 0 {
		return nil, 0, fmt.Errorf("no part files in %s", dir)
	}
	final := map[string]string{}
	lines := 0
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return nil, 0, err
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			var rec map[string]json.RawMessage
			if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
				fh.Close()
				return nil, 0, fmt.Errorf("%s: %w", f, err)
			}
			k, v := strings.Trim(string(rec[key]), `"`), string(rec[value])
			final[k] = v
			lines++
		}
		fh.Close()
		if err := sc.Err(); err != nil {
			return nil, 0, err
		}
	}
	return final, lines, nil
}
