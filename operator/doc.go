// Package operator implements goflink's built-in operators and the operator SDK: the
// interfaces a task drives (Source, Operator), the Context it hands them, and a Registry for
// custom Go operators.
//
// Operators run inside one task's event loop and are never called concurrently. Rows passed
// to Process and Emit are borrowed for the duration of the call: keep a copy (Row.Clone,
// Value.Clone) if you need one later.
//
// The Registry's mutex is listed, with every lock of the project and its order, in LOCKORDER.md
// at the repository root.
package operator
