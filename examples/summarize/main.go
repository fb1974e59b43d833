// Command summarize prints the last value per key found in a file sink's JSON-lines output —
// for a running aggregate that is the final result — and optionally checks it, and the number
// of records (with exactly-once output, as many as the source produced).
//
//	go run ./examples/summarize -key parity -value value [-expect odd=250000,even=250500] [-records 60] out/odd-even
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run runs summarize with args and returns its exit code: 0 when every check holds, 1 when one
// does not (or the output cannot be read), 2 for bad arguments.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("summarize", flag.ContinueOnError)
	fs.SetOutput(stderr)
	key := fs.String("key", "key", "field holding the key")
	value := fs.String("value", "value", "field holding the running value")
	expect := fs.String("expect", "", "expected final values, key=value[,key=value...]")
	records := fs.Int("records", -1, "expected number of records (-1: not checked)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: summarize [-key F] [-value F] [-expect k=v,...] [-records N] DIR")
		return 2
	}
	dir := fs.Arg(0)
	final, lines, err := lastByKey(dir, *key, *value)
	if err != nil {
		fmt.Fprintln(stderr, "summarize:", err)
		return 1
	}
	ok := true
	// expected is " (expected want: ok)", or with WRONG, clearing ok, when got differs.
	expected := func(want, got string) string {
		if got != want {
			ok = false
			return " (expected " + want + ": WRONG)"
		}
		return " (expected " + want + ": ok)"
	}
	count := fmt.Sprintf("%d records in %s", lines, dir)
	if *records >= 0 {
		count += expected(fmt.Sprint(*records), fmt.Sprint(lines))
	}
	fmt.Fprintf(stdout, "%s; final %s per %s:\n", count, *value, *key)
	want := map[string]string{}
	for kv := range strings.SplitSeq(*expect, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			want[k] = v
		}
	}
	for _, k := range slices.Sorted(maps.Keys(final)) {
		mark := ""
		if w, has := want[k]; has {
			mark = " " + expected(w, final[k])
		}
		fmt.Fprintf(stdout, "  %-8s %s%s\n", k, final[k], mark)
	}
	for k := range want {
		if _, has := final[k]; !has {
			fmt.Fprintf(stdout, "  %-8s missing (expected %s)\n", k, want[k])
			ok = false
		}
	}
	if !ok {
		return 1
	}
	return 0
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
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, 0, err
		}
		for line := range bytes.Lines(data) {
			var rec map[string]json.RawMessage
			if err := json.Unmarshal(line, &rec); err != nil {
				return nil, 0, fmt.Errorf("%s: %w", f, err)
			}
			final[strings.Trim(string(rec[key]), `"`)] = string(rec[value])
			lines++
		}
	}
	return final, lines, nil
}
