package operator

import (
	"fmt"
	"strings"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/expression"
	"github.com/goflink/goflink/internal/suggest"
	"github.com/goflink/goflink/job/spec"
	"github.com/goflink/goflink/record"
)

// Planner is what an operator type's Plan sees of one operator of a job spec: its
// type-specific fields, what is known of its input, and the job. Plan reports every problem
// it finds through the Planner (or the spec values it reads) and goes on, so that a spec's
// problems are reported in one go.
type Planner struct {
	// Job is the job's name and Name the operator's.
	Job, Name string
	// Config is the job's configuration: the cluster's defaults, the spec's config, flinkctl
	// run -D.
	Config *config.Config
	// In is what is known of the records the operator reads (nil for a source). Behind an
	// operator with problems it is only partly known (see Shape); a Plan checks what it can
	// and reports a problem only when it holds whatever the unknown parts are.
	In *Shape
	// Ins is what is known of each input of a type that tells its inputs apart (Type.Inputs);
	// In is then unknown.
	Ins []*Shape
	// Timed says the input's records carry event timestamps, and its watermarks come from a
	// watermark strategy upstream (a source's watermark field or a watermark operator).
	Timed bool
	// KeyExpr and KeyType are the key of a keyed operator's key-by input ("" when it has
	// none, record.Invalid when the type is unknown).
	KeyExpr string
	KeyType record.Type

	typ    string
	op     spec.Value // the operator, for problems of it as a whole
	fields *spec.Map  // its type-specific fields
}

// NewPlanner returns the Planner of an operator: op is its spec (a map), fields its
// type-specific fields. The job builder calls it.
func NewPlanner(job, name, typ string, cfg *config.Config, in *Shape, op spec.Value, fields *spec.Map) *Planner {
	return &Planner{Job: job, Name: name, Config: cfg, In: in, typ: typ, op: op, fields: fields}
}

// Fields returns the operator's type-specific fields.
func (p *Planner) Fields() *spec.Map { return p.fields }

// Field returns an optional field.
func (p *Planner) Field(key string) (spec.Entry, bool) { return p.fields.Get(key) }

// Require returns a field the type needs, reporting it when it is missing.
func (p *Planner) Require(key string) (spec.Entry, bool) {
	e, ok := p.fields.Get(key)
	if !ok {
		p.Problemf("%s needs the field %q", p.typ, key)
	}
	return e, ok
}

// At returns the value of a field, or, when it is absent, a value that reports problems at
// the operator's line under the field's path (for a problem with a default value).
func (p *Planner) At(key string) spec.Value {
	if e, ok := p.fields.Get(key); ok {
		return e.Value
	}
	return p.op.At(p.op.Path() + "." + key)
}

// Choice reads an optional field that must be one of choices; def when it is absent. ok is
// false after a problem: what the field was meant to be is unknown then.
func (p *Planner) Choice(key, def string, choices ...string) (v string, ok bool) {
	e, has := p.fields.Get(key)
	if !has {
		return def, true
	}
	return e.Choice(strings.ReplaceAll(key, "-", " "), choices...)
}

// Problemf reports a problem of the operator as a whole.
func (p *Planner) Problemf(format string, args ...any) { p.op.Problemf(format, args...) }

// Expr reads an expression over the input records and type-checks it against what is known
// of them. It returns the expression, its result type (record.Invalid when that depends on
// what is unknown of the input) and, when the input is fully known, the compiled program; ok
// is false after a problem.
func (p *Planner) Expr(v spec.Value, opts expression.Options) (src string, typ record.Type, prog *expression.Program, ok bool) {
	src, ok = v.String()
	if !ok || v.Full() { // with as many problems as are reported, the spec is refused anyway
		return src, record.Invalid, nil, false
	}
	in := p.In
	if in == nil {
		in = UnknownShape()
	}
	var err error
	if in.Schema != nil {
		if prog, err = expression.Compile(src, in.Schema, opts); err == nil {
			typ = prog.Type()
		}
	} else {
		typ, err = expression.Check(src, in, in.Open, opts)
	}
	if err != nil {
		v.Problemf("expression %s: %v", expression.Quote(src), err)
		return src, record.Invalid, nil, false
	}
	return src, typ, prog, true
}

// FieldNamed looks a field of the input up for a field of the spec that names it (v): it
// reports a name the input certainly lacks, with a "did you mean". found is false when the
// input has no such field or it is unknown.
func (p *Planner) FieldNamed(v spec.Value, name string) (f record.Field, found bool) {
	in := p.In
	if in == nil {
		in = UnknownShape()
	}
	f, found = in.Field(name)
	if in.Lacks(name) && !v.Full() {
		msg := fmt.Sprintf("no field %q in the input %v", name, in)
		if s := suggest.Closest(name, in.Names()); s != "" {
			msg += fmt.Sprintf("; did you mean %q?", s)
		}
		v.Problemf("%s", msg)
	}
	return f, found
}
