package job

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goflink/goflink/connector/kafka/kafkaspec"
	"github.com/goflink/goflink/connector/nexmark"
	"github.com/goflink/goflink/operator"
)

// FuzzBuild builds arbitrary job spec text, as a JobManager does with every submitted job,
// with the operator types a JobManager plans with (the built-in ones and the connectors'). It
// must never panic; a spec is either built into a graph or refused with a SpecError that lists
// at least one problem, each on a line of the spec (or the one after it). The seeds are the
// design's example and every spec under examples/.
func FuzzBuild(f *testing.F) {
	f.Add([]byte(designExample))
	err := filepath.WalkDir(filepath.Join("..", "examples"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		b, err := os.ReadFile(path)
		if err == nil {
			f.Add(b)
		}
		return err
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(""))
	f.Add([]byte("name: x\noperators: &a [*a]\n"))
	env := Env{Operators: operator.MustRegistry(kafkaspec.Type, nexmark.Type)}

	f.Fuzz(func(t *testing.T, src []byte) {
		g, err := Build(Request{Spec: src, SpecName: "fuzz.yaml"}, env)
		if (g == nil) == (err == nil) {
			t.Fatalf("Build = %v, %v; want a graph or an error", g, err)
		}
		if err == nil {
			return
		}
		var se *SpecError
		if !errors.As(err, &se) || !errors.Is(err, ErrInvalidSpec) || len(se.Problems) == 0 {
			t.Fatalf("Build error %v (%T) is not a SpecError with problems", err, err)
		}
		// YAML reports a value missing at the end of the text ("---" alone) on the line after it.
		lines := maxLines(string(src)) + 1
		for _, p := range se.Problems {
			if p.Line < 0 || p.Line > lines {
				t.Fatalf("problem %q on line %d of a spec of at most %d lines", p, p.Line, lines)
			}
		}
	})
}

// maxLines bounds the lines YAML sees in src: it breaks lines at CR, LF, CR LF, NEL, LS and PS.
func maxLines(src string) int {
	n := 1
	for _, brk := range []string{"\n", "\r", "\u0085", "\u2028", "\u2029"} {
		n += strings.Count(src, brk)
	}
	return n
}
