package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeParts writes a file sink's output: the running sums of 1..n by parity, split over two
// part files, each written copies times (as old part files of earlier runs would add up).
func writeParts(t *testing.T, n, copies int) string {
	t.Helper()
	dir := t.TempDir()
	for c := range copies {
		var odd, even bytes.Buffer
		sums := map[string]int{}
		for v := 1; v <= n; v++ {
			p, buf := "odd", &odd
			if v%2 == 0 {
				p, buf = "even", &even
			}
			sums[p] += v
			fmt.Fprintf(buf, "{\"parity\":%q,\"value\":%d}\n", p, sums[p])
		}
		for i, buf := range []*bytes.Buffer{&odd, &even} {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("part-%d-%04d-00000000.jsonl", i, c)), buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

func TestRecordCount(t *testing.T) {
	args := func(dir string) []string {
		return []string{"-key", "parity", "-value", "value", "-expect", "odd=900,even=930", "-records", "60", dir}
	}
	var stdout, stderr bytes.Buffer
	dir := writeParts(t, 60, 1)
	if code := run(args(dir), &stdout, &stderr); code != 0 {
		t.Errorf("summarize of 60 records = exit %d, want 0; output:\n%s%s", code, stdout.String(), stderr.String())
	}
	if want := "60 records in " + dir + " (expected 60: ok); final value per parity:\n"; !strings.HasPrefix(stdout.String(), want) {
		t.Errorf("output = %q, want it to start with %q", stdout.String(), want)
	}

	// The right final sums in too many records (old part files in the directory) fail.
	stdout.Reset()
	dir = writeParts(t, 60, 22)
	if code := run(args(dir), &stdout, &stderr); code != 1 {
		t.Errorf("summarize of 1,320 records expecting 60 = exit %d, want 1; output:\n%s", code, stdout.String())
	}
	if want := "1320 records in " + dir + " (expected 60: WRONG)"; !strings.Contains(stdout.String(), want) {
		t.Errorf("output = %q, want it to contain %q", stdout.String(), want)
	}
	if !strings.Contains(stdout.String(), "odd      900  (expected 900: ok)") {
		t.Errorf("output = %q, want the final sums checked as well", stdout.String())
	}

	// Without -records the count is not checked.
	stdout.Reset()
	if code := run([]string{"-key", "parity", "-value", "value", dir}, &stdout, &stderr); code != 0 {
		t.Errorf("summarize without -records = exit %d, want 0; output:\n%s", code, stdout.String())
	}
	if code := run([]string{"-records", "x", dir}, &stdout, &stderr); code != 2 {
		t.Errorf("summarize -records x = exit %d, want 2", code)
	}
}
