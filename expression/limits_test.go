package expression

import (
	"fmt"
	"strings"
	"testing"

	"github.com/goflink/goflink/record"
)

// Expressions beyond the length or nesting limit are refused before expr parses them, with the
// limit in the message (security review F6: 1.5 million nested parentheses overflowed the
// JobManager's stack, which is fatal). Brackets in string literals do not count.
func TestSizeLimits(t *testing.T) {
	nest := func(n int, open, closing string) string {
		return strings.Repeat(open, n) + "value" + strings.Repeat(closing, n)
	}
	for _, tc := range []struct {
		name string
		src  string
		want string // "" = compiles
	}{
		{"1.5 million parentheses", nest(1_500_000, "(", ")"), "expression is 3000005 bytes long; the limit is 65536 bytes"},
		{"one byte too long", "value" + strings.Repeat(" ", MaxLength-4), "expression is 65537 bytes long; the limit is 65536 bytes"},
		{"at the length limit", "value" + strings.Repeat(" ", MaxLength-5), ""},
		{"257 parentheses", nest(MaxNesting+1, "(", ")"), "brackets nest more than 256 deep (column 257)"},
		{"256 parentheses", nest(MaxNesting, "(", ")"), ""},
		{"257 lists", strings.Repeat("[", MaxNesting+1) + strings.Repeat("]", MaxNesting+1) + " != nil", "brackets nest more than 256 deep"},
		{"mixed brackets", "len(" + nest(MaxNesting, "[", "]") + ")", "brackets nest more than 256 deep (column 260)"},
		{"in a string literal", "len('" + strings.Repeat("(", 1000) + "') + value", ""},
		{"balanced deep but sequential", strings.Repeat("(value) + ", 1000) + "value", ""},
		{"unbalanced closing", "value))))", "unexpected token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Compile(tc.src, testSchema, Options{})
			_, checkErr := Check(tc.src, fieldList(testSchema.Fields()), false, Options{})
			for what, err := range map[string]error{"Compile": err, "Check": checkErr} {
				switch {
				case tc.want == "" && err != nil:
					t.Errorf("%s: %v", what, err)
				case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
					t.Errorf("%s = %v, want an error containing %q", what, err, tc.want)
				}
			}
		})
	}
}

// Within the length limit, the deepest shapes other than brackets (chains of prefix and
// right-associative operators, nested ternaries) recurse at most once per couple of bytes:
// they compile, or fail with expr's node limit, and never crash.
func TestDeepShapesWithinLength(t *testing.T) {
	fill := func(unit, tail string) string {
		return strings.Repeat(unit, (MaxLength-len(tail))/len(unit)) + tail
	}
	for name, src := range map[string]string{
		"unary minus":  fill("-", "value"),
		"negations":    fill("!", "ok"),
		"not":          fill("not ", "ok"),
		"power chain":  fill("2**", "2"),
		"ternaries":    fill("ok ? 1 : ", "2"),
		"coalescing":   fill("value ?? ", "1"),
		"lets":         fill("let a = 1; ", "a"),
		"member chain": fill("parity.", "x"),
	} {
		t.Run(name, func(t *testing.T) {
			if len(src) > MaxLength {
				t.Fatalf("test expression is %d bytes", len(src))
			}
			if _, err := Compile(src, testSchema, Options{}); err != nil && !strings.Contains(err.Error(), "maximum allowed nodes") {
				t.Errorf("Compile(%s) = %v, want success or expr's node limit", Quote(src), err)
			}
		})
	}
}

// Quote shows a long expression's start and its length, on a rune boundary.
func TestQuote(t *testing.T) {
	if got := Quote("value + 1"); got != `"value + 1"` {
		t.Errorf("Quote(short) = %s", got)
	}
	long := strings.Repeat("é", 1000)
	got := Quote(long)
	if want := `"` + strings.Repeat("é", maxQuoted/2) + `"… (2000 bytes)`; got != want {
		t.Errorf("Quote(long) = %s, want %s", got, want)
	}
}

// An unknown name is reported with the first fields only, however wide the record: a problem
// of a spec stays one line.
func TestUnknownNameListsFewFields(t *testing.T) {
	fields := make([]record.Field, 50)
	for i := range fields {
		fields[i] = record.Field{Name: fmt.Sprintf("f%d", i), Type: record.Int64}
	}
	_, err := Compile("nope + 1", record.MustSchema(fields...), Options{})
	want := "unknown name nope (fields: f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15, f16, f17, f18, f19, … (50 in all)) (column 1)"
	if err == nil || err.Error() != want {
		t.Errorf("Compile = %v, want %q", err, want)
	}
}
