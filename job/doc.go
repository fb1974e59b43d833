// Package job turns a YAML job spec into a validated JobGraph: it parses the spec keeping line
// numbers, resolves inputs, propagates record schemas, type-checks every expression, merges the
// configuration layers, derives partitioners and chains forward-connected operators.
//
// Build reports every problem it finds at once as a *SpecError, each with the line, the path
// of the field and the reason. A broken operator does not hide the problems of its readers:
// they are checked against what is known of its output, and only for what is wrong whatever
// the unknown parts turn out to be, so nothing that merely follows from the broken operator is
// reported. A spec that fails builds nothing.
package job
