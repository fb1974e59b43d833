// Package job turns a YAML job spec into a validated JobGraph: it parses the spec keeping line
// numbers, resolves inputs, propagates record schemas, type-checks every expression, merges the
// configuration layers, derives partitioners and chains forward-connected operators.
//
// Build reports every problem it finds at once as a *SpecError, each with the line, the path
// of the field and the reason. A spec that fails builds nothing.
package job
