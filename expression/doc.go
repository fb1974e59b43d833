// Package expression compiles the expressions of job specs (map fields, filter conditions,
// key-by keys, reduce fields) with expr-lang/expr against a typed record environment.
//
// Compile type-checks an expression against a schema, so a typo or a type error is a submit
// error. At run time each task takes its own Evaluator (not safe for concurrent use). Common
// expressions (fields, literals, arithmetic, comparisons, logic, ternaries, string
// concatenation) run as native Go closures that allocate nothing; everything else runs on a
// reused expr VM with identical semantics.
package expression
