package config

import (
	"os"
	"strings"
	"testing"
)

// TestREADMEDocumentsEveryKey keeps the README's configuration table true.
func TestREADMEDocumentsEveryKey(t *testing.T) {
	data, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	for _, o := range options {
		row := "| `" + o.Key + "` |"
		if !strings.Contains(readme, row) {
			t.Errorf("README.md has no table row for %s", o.Key)
		}
	}
}
