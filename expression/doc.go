// Package expression compiles the expressions of job specs (map fields, filter conditions,
// key-by keys, reduce fields) with expr-lang/expr against a typed record environment.
//
// Compile type-checks an expression against a schema, so a typo or a type error is a submit
// error. At run time each task takes its own Evaluator (not safe for concurrent use). Common
// expressions (fields, literals, arithmetic, comparisons, logic, ternaries, string
// concatenation) run as native Go closures that allocate nothing; everything else runs on a
// reused expr VM with identical semantics.
//
// Nothing an expression says can crash or hang its process: its text is bounded (MaxLength,
// MaxNesting) before expr parses it, and each evaluation has a budget (budget.go) that the
// builtins which allocate in proportion to an argument, string concatenation and loops charge
// before they work (MaxBuiltBytes, MaxSteps), besides expr's own bound on ranges and arrays.
package expression
