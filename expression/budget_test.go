package expression

import (
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/expr-lang/expr"

	"github.com/goflink/goflink/record"
)

// budgetSchema has a short string, a string of 1 MiB and a bytes field of 2000 bytes.
var budgetSchema = record.MustSchema(
	record.Field{Name: "value", Type: record.Int64},
	record.Field{Name: "s", Type: record.String},
	record.Field{Name: "big", Type: record.String},
	record.Field{Name: "b", Type: record.Bytes},
)

func budgetRow() record.Row {
	return record.Row{record.IntValue(7), record.StringValue("ab,c"), record.StringValue(strings.Repeat("x", 1<<20)),
		record.BytesValue(make([]byte, 2000))}
}

// An expression that would build more than MaxBuiltBytes, or whose loops would run more than
// MaxSteps nodes, fails its evaluation with an error naming the limit, before it allocates:
// the builtins that allocate in proportion to an argument, string concatenation (in loops and
// variables too), expr's ranges and nested loops (security review F8: repeat(repeat("a",
// 999999), 1000000) asked for 1 TB and killed the TaskManager). Nothing runs at compile time.
func TestEvaluationBudget(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"repeat of a repeat", `repeat(repeat("a", 999999), 1000000)`, "repeat() would build more than 16777216 bytes, beyond the 16777216 bytes an evaluation may build"},
		{"repeats of a field", `len(repeat(big, 10)) + len(repeat(big, 10))`, "repeat() would build 10485760 bytes, beyond the 16777216 bytes"},
		{"repeat beyond int", `repeat(s, 9223372036854775807)`, "repeat() would build more than 16777216 bytes"},
		{"a doubling reduce", `len(reduce(1..64, #acc + #acc, "a"))`, "a concatenation would build"},
		{"doubling variables", `let v1 = big; let v2 = v1 + v1; let v3 = v2 + v2; let v4 = v3 + v3; let v5 = v4 + v4; let v6 = v5 + v5; v6`, "a concatenation would build"},
		{"concatenation in a map", `len(map(1..100, big + s))`, "a concatenation would build"},
		{"native concatenation", `big + big + big + big + big + big + big + big + big + big + big + big + big + big + big + big + big`, "a concatenation would build"},
		{"replace of the empty string", `replace(big, "", big)`, "replace() would build more than 16777216 bytes"},
		{"join of a split", `join(split(big, ""), big)`, "would build"},
		{"toJSON of toJSON", strings.Repeat("toJSON(", 5) + `replace(big, "x", "\\")` + strings.Repeat(")", 5), "toJSON() would build"},
		{"string of a big array", `string(map(1..1000, big))`, "string() would build"},
		{"upper in a loop", `len(map(1..100, upper(big)))`, "upper() would build"},
		{"fromJSON of a big string", `len(fromJSON(big))`, "fromJSON() would build"},
		{"toBase64 in a loop", `len(map(1..100, toBase64(big)))`, "toBase64() would build"},
		{"a huge range", `len(1..1000000000000)`, "memory budget exceeded"},
		{"nested loops", `let a = 1..1000; all(a, all(a, true))`, "loops evaluated more than 1000000 expression nodes"},
		{"nested loops over a field", `all(b, all(b, # == 0))`, "loops evaluated more than 1000000 expression nodes"},
		{"long counts", `count(b, true) + count(b, true) + count(1..999999, # > 0)`, "loops evaluated more than 1000000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Compile(tc.src, budgetSchema, Options{})
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			v, err := p.NewEvaluator().Eval(budgetRow(), nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Eval = %.60v, %v; want an error containing %q", v.Format(p.Type()), err, tc.want)
			}
		})
	}
}

// Within the budgets expressions work as before, evaluation after evaluation (each has its own
// budget), and bounding changes no expression's type.
func TestBudgetKeepsExpressions(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{`repeat("ab", 3)`, "ababab"},
		{`upper(s) + "!"`, "AB,C!"},
		{`join(split(s, ","), "-")`, "ab-c"},
		{`replace(s, ",", "_")`, "ab_c"},
		{`toJSON({"a": value})`, "{\n  \"a\": 7\n}"},
		{`len(toJSON(toJSON(toJSON(big))))`, "1048590"},
		{`string(value)`, "7"},
		{`int(reduce(1..10, #acc + #, 0))`, "55"},
		{`sum(1..100)`, "5050"},
		{`count(1..10, # % 2 == 0)`, "5"},
		{`len(filter(1..5, # > 2))`, "3"},
		{`count(b, # == 0)`, "2000"},
		{`sum(map(split(s, ","), len(#)))`, "3"},
		{`len(big + "y")`, "1048577"},
		{`let a = s + s; a + a`, "ab,cab,cab,cab,c"},
		{`int(fromJSON("{\"k\": 1}").k)`, "1"},
		{`len(repeat(s, 1000000))`, "4000000"},
	} {
		p, err := Compile(tc.src, budgetSchema, Options{})
		if err != nil {
			t.Errorf("Compile(%q): %v", tc.src, err)
			continue
		}
		e := p.NewEvaluator()
		for i := range 3 {
			v, err := e.Eval(budgetRow(), nil)
			if err != nil || v.Format(p.Type()) != tc.want {
				t.Errorf("Eval(%q) #%d = %q, %v; want %q", tc.src, i, v.Format(p.Type()), err, tc.want)
				break
			}
		}
	}
	// The same types as expr without the bounds.
	env := reflect.New(reflect.StructOf(structFields(budgetSchema.Fields(), false, false))).Interface()
	for _, src := range []string{
		`s + s`, `s + fromJSON(s)`, `fromJSON(s) + s`, `fromJSON(s) + 1`, `value + 1`, `big + "x" + s`,
		`map(1..3, # + 1)[0]`, `sum(1..3)`, `sum(b)`, `count([true, false])`, `reduce(split(s, ","), #acc + #, "")`, `reduce(1..3, #acc + #acc, "a")`,
		`filter(split(s, ","), # != "")`, `sortBy(split(s, ","), #)`, `groupBy(1..3, # % 2)`, `let x = s + s; x`,
		`upper(s)`, `repeat(s, 2)`, `toJSON(s)`, `string(b)`, `keys({"a": 1})`, `uniq([1, 1])`, `all(b, # > 0)`,
		`find(1..3, # > 1)`, `findIndex(1..3, # > 1)`, `one(1..3, # == 2)`, `map(1..2, [#, #])`,
	} {
		plain, err := expr.Compile(src, expr.Env(env))
		if err != nil {
			t.Errorf("expr.Compile(%q): %v", src, err)
			continue
		}
		bound, err := compileVM(src, env, new(budget))
		if err != nil {
			t.Errorf("compileVM(%q): %v", src, err)
			continue
		}
		if a, b := plain.Node().Type(), bound.Node().Type(); a != b {
			t.Errorf("%q: type %v, with the bounds %v", src, a, b)
		}
	}
}

// Compiling evaluates nothing that could be large: expr folds literal arithmetic and literal
// strings only (bounded by the text's length), and builtins, ranges and loops run at
// evaluation, within its budgets.
func TestCompileBuildsNothing(t *testing.T) {
	for _, src := range []string{
		`repeat(repeat("a", 999999), 1000000)`, `len(1..1000000000000)`, `sum(1..1000000000)`,
		`replace(repeat("ab", 1000000), "", repeat("ab", 1000000))`, `2 ** 1000000 > 1.0`,
		`"` + strings.Repeat("a", 30000) + `" + "` + strings.Repeat("b", 30000) + `"`,
		`len(reduce(1..64, #acc + #acc, "a"))`,
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		if _, err := Compile(src, budgetSchema, Options{}); err != nil {
			t.Errorf("Compile(%s): %v", Quote(src), err)
			continue
		}
		runtime.ReadMemStats(&after)
		if n := after.TotalAlloc - before.TotalAlloc; n > 8<<20 {
			t.Errorf("Compile(%s) allocated %d bytes, want at most 8 MiB", Quote(src), n)
		}
	}
}
