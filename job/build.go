package job

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/expression"
	"github.com/goflink/goflink/internal/suggest"
	"github.com/goflink/goflink/job/spec"
	"github.com/goflink/goflink/operator"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
	"github.com/goflink/goflink/state"
)

// Request is what a client submits.
type Request struct {
	// Spec is the YAML text; SpecName names it in messages.
	Spec     []byte
	SpecName string
	// Overrides win over the spec's config (flinkctl run -D).
	Overrides map[string]string
	// Parallelism, when not 0, overrides the spec's default parallelism (flinkctl run -p); it
	// must be between 1 and state.UpperBoundMaxParallelism.
	Parallelism int
}

// Env is what the cluster contributes.
type Env struct {
	// Defaults are the job-scope keys of the cluster config (may be nil).
	Defaults *config.Config
	// Operators holds the operator types specs may use (nil: the built-in ones).
	Operators *operator.Registry
}

// Limits on what a submission may ask of the job builder, checked before the work they bound.
const (
	// MaxSpecBytes bounds a spec's YAML text. The largest real specs are a few hundred lines;
	// 1 MiB holds ten thousand operators and stays below gRPC's 4 MiB message limit.
	MaxSpecBytes = 1 << 20
	// MaxOperators bounds the operators of a spec. Each becomes a task in every slot that
	// runs its vertex; Flink jobs have tens, rarely hundreds.
	MaxOperators = 10000
	// maxSpecNameLen bounds the name a submission gives its spec, which every message repeats.
	maxSpecNameLen = 256
	// maxNameLen bounds the name of a job or an operator, which messages, logs and task names
	// repeat (the same bound as a uid's).
	maxNameLen = maxUIDLen
	// maxFields bounds the fields the operators of a job read and emit, summed over its
	// operators: checking an operator costs the width of its records, and the JobGraph holds
	// each operator's schemas. 256 Ki fields is a thousand operators of a hundred-field record.
	maxFields = 1 << 18
	// MaxGraphBytes bounds the encoded JobGraph: every SubmitTask carries it, and it must
	// leave room for the rest of the deployment in a TaskManager's 9 MiB messages.
	MaxGraphBytes = 4 << 20
)

// commonFields are the fields of every operator; the others belong to its type.
var commonFields = []string{"name", "uid", "type", "inputs", "parallelism"}

// specOp is one parsed operator of the spec.
type specOp struct {
	index       int
	line        int
	path        string
	name, typ   string
	t           *operator.Type // nil when the type is missing or unknown
	value       spec.Value     // the operator's map
	fields      *spec.Map      // its type-specific fields
	inputNames  []spec.Value
	explicitIn  bool
	badInputs   bool // the inputs field could not be read
	parallelism int
	parLine     int
	// uid names the operator's state in snapshots: the spec's uid, default its name.
	uid string

	// resolved
	inputs     []*specOp
	unresolved bool                // an input could not be resolved (reported)
	out        *operator.Shape     // what it emits; nil for a sink
	keyType    record.Type         // key-by only; record.Invalid when unknown
	keyExp     *expression.Program // key-by only; nil when its input is not fully known
	pbOp       *pb.Operator
	// watermark is a source's watermark field, planned into wmOp: a watermark operator
	// chained right after the source.
	watermark *spec.Entry
	wmOp      *pb.Operator
	// timed: its records carry event timestamps and its watermarks come from a watermark
	// strategy (a source's watermark field or a watermark operator upstream).
	timed bool
	// A side output ("<name>.late") is a specOp of its own that readers name: base is the
	// operator that emits it, side its name. It is planned with base: it emits base's input.
	base  *specOp
	side  string
	sides map[string]*specOp // of a base: its side outputs that are read
}

// is reports whether the operator's type is known and has role r.
func (op *specOp) is(r operator.Role) bool { return op.t != nil && op.t.Role == r }

// Build validates a spec and returns its JobGraph.
func Build(req Request, env Env) (*pb.JobGraph, error) {
	if env.Operators == nil {
		env.Operators = operator.MustRegistry()
	}
	if len(req.SpecName) > maxSpecNameLen {
		req.SpecName = strings.ToValidUTF8(req.SpecName[:maxSpecNameLen], "") + "…"
	}
	b := &builder{req: req, env: env, ps: &spec.Problems{}}
	g := b.build()
	if b.ps.Len() > 0 {
		return nil, &SpecError{Spec: req.SpecName, Problems: b.ps.Sorted(), Truncated: b.ps.Full()}
	}
	return g, nil
}

type builder struct {
	req Request
	env Env
	ps  *spec.Problems
	cfg *config.Config
	// jobCfg holds the keys the spec and the overrides set (JobGraph.job_config).
	jobCfg map[string]string
	par    int
	ops    []*specOp
	name   string // the job's name
	// unsureReaders is set when an input could not be resolved: any operator may be the one
	// meant, so none is reported as unread.
	unsureReaders bool
	// declared holds the first operator of each name, for the message of an input that names
	// an operator declared after its reader.
	declared map[string]*specOp
	// fields counts the fields of the records planned operators read and emit (maxFields).
	fields int
}

func (b *builder) build() *pb.JobGraph {
	if len(b.req.Spec) > MaxSpecBytes {
		b.ps.Add(0, "", "the spec is %d bytes; the limit is %d bytes (1 MiB)", len(b.req.Spec), MaxSpecBytes)
		return nil
	}
	root, ok := spec.Parse(b.req.Spec, b.ps)
	if !ok {
		return nil
	}
	top, ok := root.At("spec").Map()
	if !ok {
		return nil
	}
	top = top.At("")
	top.CheckKeys([]string{"name", "parallelism", "config", "operators"}, "at the top level")

	name, nameOK := "", true
	if e, ok := top.Get("name"); ok {
		if name, nameOK = e.String(); nameOK && len(name) > maxNameLen {
			e.Problemf("a name of %d bytes; the limit is %d", len(name), maxNameLen)
			name, nameOK = "", false
		}
	}
	if nameOK && strings.TrimSpace(name) == "" {
		root.At("name").Problemf("a job needs a name")
	}
	b.name = name
	b.buildConfig(top)
	b.resolveParallelism(top)
	e, ok := top.Get("operators")
	if !ok {
		root.At("operators").Problemf("a job needs a list of operators")
		return nil
	}
	list, ok := e.List()
	if !ok || len(list) == 0 {
		if ok {
			e.Problemf("want a non-empty list of operators, got %s", e.Kind())
		}
		return nil
	}
	if len(list) > MaxOperators {
		e.Problemf("%d operators; the limit is %d", len(list), MaxOperators)
		return nil
	}
	b.parseOperators(list)
	b.resolveInputs()
	for _, op := range b.ops {
		if b.ps.Full() || b.fields > maxFields {
			return nil // refused anyway: looking for more problems is wasted work
		}
		b.plan(op)
	}
	b.checkSinks()
	vertices, edges := b.chain()
	if b.ps.Len() > 0 {
		return nil
	}
	for _, op := range b.ops {
		// Only a problem leaves part of a schema unknown; make sure rather than panic below.
		if !op.is(operator.RoleSink) && (op.out == nil || op.out.Schema == nil) {
			if op.out != nil && !op.out.Open {
				if _, err := record.NewSchema(op.out.Fields...); err != nil {
					op.value.Problemf("its output schema could not be derived: %v", err)
					return nil
				}
			}
			op.value.Problemf("its output schema could not be derived")
			return nil
		}
	}
	g := b.graph(name, vertices, edges)
	if n := proto.Size(g); n > MaxGraphBytes {
		b.ps.Add(0, "operators", "the job graph would be %d bytes; the limit is %d bytes (4 MiB): split the job, or narrow its records", n, MaxGraphBytes)
		return nil
	}
	return g
}

// buildConfig merges cluster defaults < spec config < overrides.
func (b *builder) buildConfig(top *spec.Map) {
	b.cfg, b.jobCfg = config.New(), map[string]string{}
	if b.env.Defaults != nil {
		b.cfg.Merge(b.env.Defaults)
	}
	set := func(k, v string) error {
		if err := config.ValidateJob(map[string]string{k: v}); err != nil {
			return err
		}
		_ = b.cfg.Set(k, v)
		b.jobCfg[k] = v
		return nil
	}
	if e, ok := top.Get("config"); ok {
		if m, ok := e.Map(); ok {
			for _, ce := range m.Entries() {
				if v, ok := ce.String(); ok {
					if err := set(ce.Key, v); err != nil {
						ce.Value.At("config").Problemf("%v", err)
					}
				}
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(b.req.Overrides)) {
		if err := set(k, b.req.Overrides[k]); err != nil {
			b.ps.Add(0, "-D "+k, "%v", err)
		}
	}
}

// parallelism reads a parallelism field.
func parallelism(v spec.Value) (int, bool) {
	n, ok := v.Int()
	if ok && (n < 1 || n > state.UpperBoundMaxParallelism) {
		v.Problemf("must be between 1 and %d, got %d", state.UpperBoundMaxParallelism, n)
		ok = false
	}
	return int(n), ok
}

func (b *builder) resolveParallelism(top *spec.Map) {
	b.par = b.cfg.Int(config.ParallelismDefault)
	if e, ok := top.Get("parallelism"); ok {
		if p, ok := parallelism(e.Value); ok {
			b.par = p
		}
	}
	switch p := b.req.Parallelism; {
	case p == 0: // not requested
	case p < 1 || p > state.UpperBoundMaxParallelism:
		b.ps.Add(0, "-p", "the job's parallelism must be between 1 and %d, got %d", state.UpperBoundMaxParallelism, p)
	default:
		b.par = p
	}
}

// parseOperators reads each operator's common fields. An operator with problems is kept: what
// does not depend on them is still checked, and its readers are checked against what is known.
func (b *builder) parseOperators(list []spec.Value) {
	names := map[string]*specOp{}
	b.declared = names
	uids := map[string]*specOp{}
	for i, v := range list {
		op := &specOp{index: i, line: v.Line(), path: v.Path(), value: v}
		b.ops = append(b.ops, op)
		m, ok := v.Map()
		if !ok {
			op.fields = &spec.Map{Value: v}
			continue
		}
		nameOK := true
		if e, ok := m.Get("name"); ok {
			if op.name, nameOK = e.String(); nameOK && len(op.name) > maxNameLen {
				e.Problemf("a name of %d bytes; the limit is %d", len(op.name), maxNameLen)
				op.name, nameOK = "", false
			}
		}
		if op.name == "" {
			if nameOK {
				v.Problemf("an operator needs a name")
			}
		} else {
			op.path = fmt.Sprintf("operators[%d] %q", i, op.name)
			op.value, m = v.At(op.path), m.At(op.path)
			if prev, dup := names[op.name]; dup {
				op.value.Problemf("duplicate operator name (first used on line %d)", prev.line)
			} else {
				names[op.name] = op
			}
		}
		b.parseType(op, m)
		if e, ok := m.Get("inputs"); ok {
			op.explicitIn = true
			op.inputNames, ok = e.Names()
			op.badInputs = !ok
		}
		if op.t != nil && op.t.WithInputs != nil {
			switch {
			case op.badInputs:
				op.t = nil // a source or a sink: unknown
			case op.readsInputs():
				op.t = op.t.WithInputs
			}
		}
		if e, ok := m.Get("parallelism"); ok {
			op.parLine = e.Line()
			op.parallelism, _ = parallelism(e.Value)
		}
		b.parseUID(op, m, uids)
		if op.t != nil && op.t.Fields != nil {
			allowed := append(slices.Clone(commonFields), op.t.Fields...)
			if op.is(operator.RoleSource) {
				allowed = append(allowed, "watermark")
			}
			m.CheckKeys(allowed, "for type "+op.typ)
		}
		op.fields = m.Without(commonFields...)
		if e, ok := op.fields.Get("watermark"); ok && op.is(operator.RoleSource) {
			op.watermark = &e
			op.fields = op.fields.Without("watermark")
		}
	}
}

// parseUID reads an operator's uid (default: its name) and checks that no two operators share
// one: a snapshot's state is matched to operators by uid.
func (b *builder) parseUID(op *specOp, m *spec.Map, uids map[string]*specOp) {
	op.uid = op.name
	e, ok := m.Get("uid")
	if ok {
		u, ok := e.String()
		switch {
		case !ok:
			return
		case strings.TrimSpace(u) == "" || strings.ContainsAny(u, "\n\r\t") || len(u) > maxUIDLen:
			e.Problemf("must be a non-empty name of at most %d characters on one line, got %q", maxUIDLen, u)
			return
		}
		op.uid = u
	}
	if op.uid == "" {
		return
	}
	if prev, dup := uids[op.uid]; dup {
		if !ok && prev.name == op.name {
			return // a duplicate name, reported as such
		}
		where := m.Value
		if ok {
			where = e.Value
		}
		where.Problemf("uid %q is also the uid of operator %q (line %d): each operator's state needs its own", op.uid, prev.name, prev.line)
		return
	}
	uids[op.uid] = op
}

// maxUIDLen bounds an operator's uid.
const maxUIDLen = 256

// parseType looks the operator's type up.
func (b *builder) parseType(op *specOp, m *spec.Map) {
	e, ok := m.Get("type")
	if ok {
		if op.typ, ok = e.String(); !ok {
			return
		}
	}
	if t, found := b.env.Operators.Lookup(op.typ); found { // never "": a type needs a name
		op.t = &t
		return
	}
	names := b.env.Operators.Names()
	if op.typ == "" {
		op.value.Problemf("an operator needs a type (one of %s)", strings.Join(names, ", "))
		return
	}
	msg := fmt.Sprintf("unknown operator type %q", op.typ)
	if s := suggest.Closest(op.typ, names); s != "" {
		msg += fmt.Sprintf("; did you mean %q?", s)
	}
	e.Problemf("%s (known: %s)", msg, strings.Join(names, ", "))
}

// readsInputs reports whether op reads inputs: it names some, or it is not the first operator
// and names none (so it reads the previous one). An explicit empty list means none.
func (op *specOp) readsInputs() bool {
	if op.explicitIn {
		return len(op.inputNames) > 0
	}
	return op.index > 0
}

// resolveInputs links each operator to the operators it reads. An operator of unknown type
// reads what its inputs field names, or the operator above it: whatever its type was meant to
// be, it is not reported for missing inputs, and what it may read is not reported as unread.
func (b *builder) resolveInputs() {
	byName := map[string]*specOp{}
	for _, op := range b.ops {
		known := op.t != nil
		inputs := op.value.At(op.path + ".inputs")
		switch {
		case op.is(operator.RoleSource):
			if op.explicitIn && len(op.inputNames) > 0 {
				inputs.Problemf("a %s source reads no inputs", op.typ)
				b.unsureReaders = true
			}
		case op.badInputs:
			op.unresolved = true
			b.unsureReaders = true
		case !op.explicitIn && op.index == 0:
			if known {
				op.value.Problemf("missing input: the first operator must be a source, or name its inputs")
				op.unresolved = true
			}
		case !op.explicitIn:
			op.inputs = []*specOp{b.ops[op.index-1]}
		case len(op.inputNames) == 0:
			if known {
				inputs.Problemf("missing input: the list is empty")
				op.unresolved = true
				b.unsureReaders = true
			}
		default:
			for _, nv := range op.inputNames {
				in := nv.Text()
				at := nv.At(inputs.Path())
				src, ok := byName[in]
				if !ok {
					src, ok = b.sideOutput(byName, in, at)
				}
				if !ok && src != nil { // a side output that does not exist: reported
					op.unresolved = true
					b.unsureReaders = true
					continue
				}
				if !ok {
					msg := fmt.Sprintf("missing input: no operator %q", in)
					if later, found := b.declared[in]; found {
						msg = fmt.Sprintf("input %q must be declared before this operator (it is on line %d)", in, later.line)
					} else if !b.ps.Full() {
						if s := suggest.Closest(in, slices.Collect(maps.Keys(byName))); s != "" {
							msg += fmt.Sprintf("; did you mean %q?", s)
						}
					}
					at.Problemf("%s", msg)
					op.unresolved = true
					b.unsureReaders = true
					continue
				}
				if slices.Contains(op.inputs, src) {
					at.Problemf("input %q is listed twice", in)
					continue
				}
				op.inputs = append(op.inputs, src)
			}
		}
		if op.name != "" {
			if _, dup := byName[op.name]; !dup {
				byName[op.name] = op
			}
		}
	}
}

// sideOutput resolves the input name "<operator>.<side>": a side output of an operator
// declared before. ok is false when it is none; src is then non-nil when the operator exists
// but has no such side output (reported at at).
func (b *builder) sideOutput(byName map[string]*specOp, name string, at spec.Value) (src *specOp, ok bool) {
	i := strings.LastIndexByte(name, '.')
	if i < 0 {
		return nil, false
	}
	base, found := byName[name[:i]]
	if !found || base.t == nil {
		return nil, false
	}
	side := name[i+1:]
	if !slices.Contains(base.t.SideOutputs, side) {
		if len(base.t.SideOutputs) == 0 {
			at.Problemf("operator %q (%s) has no side outputs", base.name, base.typ)
		} else {
			at.Problemf("operator %q has no side output %q (it has: %s)", base.name, side, strings.Join(base.t.SideOutputs, ", "))
		}
		return base, false
	}
	if so := base.sides[side]; so != nil {
		return so, true
	}
	so := &specOp{index: base.index, line: base.line, path: base.path, name: name, typ: base.typ, value: base.value,
		t: &operator.Type{Name: base.typ, Role: operator.RoleTransform}, base: base, side: side, out: operator.UnknownShape()}
	if base.sides == nil {
		base.sides = map[string]*specOp{}
	}
	base.sides[side] = so
	return so, true
}

// plan checks op against what is known of its inputs and derives what it emits. An operator
// with problems still derives its output as far as it can (a filter emits what it reads, a
// map the fields it names), so its readers are checked too.
func (b *builder) plan(op *specOp) {
	if op.t == nil {
		op.out = operator.UnknownShape()
		return
	}
	switch {
	case op.t.Role == operator.RoleKeyBy && op.parallelism > 0:
		b.ps.Add(op.parLine, op.path+".parallelism", "key-by only routes records and has no parallelism of its own")
	case op.t.Global && op.parallelism > 1:
		b.ps.Add(op.parLine, op.path+".parallelism", "%s runs in one subtask: its parallelism is 1, got %d", op.typ, op.parallelism)
	}
	op.pbOp = &pb.Operator{Name: op.name, Uid: op.uid, Type: op.typ, Line: int32(op.line)}
	var in *operator.Shape
	var ins []*operator.Shape
	switch {
	case op.t.Role == operator.RoleSource:
	case op.t.Inputs > 0:
		ins = b.inputShapes(op)
		in = operator.UnknownShape()
		b.checkKeyed(op)
	default:
		in = b.inputShape(op)
		b.checkKeyed(op)
		if in.Schema != nil {
			op.pbOp.InputSchema = in.Schema.Proto()
		}
	}
	p := operator.NewPlanner(b.name, op.name, op.typ, b.cfg, in, op.value, op.fields)
	p.Ins = ins
	p.Timed = len(op.inputs) > 0
	for _, i := range op.inputs {
		op.timed = op.timed || i.timed
		p.Timed = p.Timed && i.timed
		if i.is(operator.RoleKeyBy) && p.KeyExpr == "" {
			p.KeyExpr, p.KeyType = operator.KeyExpression(i.pbOp.Config), i.keyType
		}
	}
	for _, so := range op.sides { // a side output emits records of the operator's input
		so.out, so.timed = in, op.timed
		if in == nil {
			so.out = operator.UnknownShape()
		}
	}
	op.pbOp.Config, op.out = op.t.Plan(p)
	op.timed = op.timed || op.typ == operator.Watermark.Name
	switch {
	case op.t.Role == operator.RoleSink:
		op.out = nil
	case op.out == nil:
		op.value.Problemf("operator type %q derived no output", op.typ)
		op.out = operator.UnknownShape()
	default:
		b.countFields(op, len(op.out.Fields))
	}
	if op.t.Role == operator.RoleKeyBy {
		op.keyType, op.keyExp = keyOf(operator.KeyExpression(op.pbOp.Config), in)
		return
	}
	if op.out != nil && op.out.Schema != nil {
		op.pbOp.OutputSchema = op.out.Schema.Proto()
	}
	if op.watermark != nil {
		b.planSourceWatermark(op)
	}
}

// planSourceWatermark plans a source's watermark field as a watermark operator chained after
// it.
func (b *builder) planSourceWatermark(op *specOp) {
	op.timed = true
	m, ok := op.watermark.Map()
	if !ok {
		return
	}
	m = m.At(op.watermark.Path())
	m.CheckKeys(operator.Watermark.Fields, "for a watermark")
	p := operator.NewPlanner(b.name, op.name, "watermark", b.cfg, op.out, op.watermark.Value, m)
	cfg, _ := operator.Watermark.Plan(p)
	op.wmOp = &pb.Operator{Name: op.name + ".watermark", Uid: op.uid + ".watermark", Type: operator.Watermark.Name, Line: int32(op.watermark.Line()),
		InputSchema: op.pbOp.GetOutputSchema(), OutputSchema: op.pbOp.GetOutputSchema(), Config: cfg}
}

// keyOf compiles a key-by's key (its plan reported any problem with it) against its input:
// its type, record.Invalid when unknown, and its program when the input is fully known.
func keyOf(key string, in *operator.Shape) (record.Type, *expression.Program) {
	if key == "" {
		return record.Invalid, nil
	}
	if in.Schema != nil {
		if p, err := expression.Compile(key, in.Schema, expression.Options{}); err == nil {
			return p.Type(), p
		}
		return record.Invalid, nil
	}
	t, _ := expression.Check(key, in, in.Open, expression.Options{})
	return t, nil
}

// inputShape is what op reads: its input's shape, or what is known of the schema all its
// inputs share.
func (b *builder) inputShape(op *specOp) *operator.Shape {
	known := !op.unresolved
	var from []*specOp
	for _, in := range op.inputs {
		if in.is(operator.RoleSink) {
			b.ps.Add(op.line, op.path+".inputs", "input %q is a sink and emits nothing", in.name)
			known = false
			continue
		}
		from = append(from, in)
	}
	if !known || len(from) == 0 {
		return operator.UnknownShape()
	}
	for _, in := range from {
		if !b.countFields(op, len(in.out.Fields)) {
			return operator.UnknownShape()
		}
	}
	union := from[0].out
	for _, in := range from[1:] {
		var same bool
		if union, same = operator.Unite(union, in.out); !same {
			b.ps.Add(op.line, op.path+".inputs", "inputs must have the same fields: %q has %v, %q has %v", from[0].name, from[0].out, in.name, in.out)
			return operator.UnknownShape()
		}
	}
	return union
}

// inputShapes is what op reads on each of its distinct inputs (a join's left and right); it
// reports a count of inputs other than the type's.
func (b *builder) inputShapes(op *specOp) []*operator.Shape {
	if !op.unresolved && len(op.inputs) != op.t.Inputs {
		b.ps.Add(op.line, op.path+".inputs", "%s reads %d inputs, got %d", op.typ, op.t.Inputs, len(op.inputs))
	}
	shapes := make([]*operator.Shape, op.t.Inputs)
	for i := range shapes {
		shapes[i] = operator.UnknownShape()
		if i < len(op.inputs) && !op.unresolved && op.inputs[i].out != nil && b.countFields(op, len(op.inputs[i].out.Fields)) {
			shapes[i] = op.inputs[i].out
		}
	}
	return shapes
}

// countFields counts n fields of records op reads or emits towards maxFields, and reports at
// op the first time the job goes beyond it; false then.
func (b *builder) countFields(op *specOp, n int) bool {
	if b.fields > maxFields {
		return false
	}
	if b.fields += n; b.fields > maxFields {
		op.value.Problemf("the job's operators read and emit more than %d fields in all (operators × fields of their records): split the job, or narrow its records", maxFields)
		return false
	}
	return true
}

// checkKeyed checks that op reads keyed or non-keyed inputs as its type needs. Inputs of
// unknown type may be either, so only the others count.
func (b *builder) checkKeyed(op *specOp) {
	var keyed, plain []*specOp
	for _, in := range op.inputs {
		switch {
		case in.t == nil:
		case in.t.Role == operator.RoleKeyBy:
			keyed = append(keyed, in)
		case in.t.Role == operator.RoleSource, in.t.Role == operator.RoleTransform:
			plain = append(plain, in)
		}
	}
	path := op.path + ".inputs"
	switch {
	case op.t.Role == operator.RoleKeyBy && len(keyed) > 0:
		b.ps.Add(op.line, path, "key-by cannot read from another key-by")
	case op.t.Keyed && len(plain) > 0:
		msg := fmt.Sprintf("%s keeps state per key and needs keyed inputs: put a key-by before it", op.typ)
		if op.t.KeyedHint != "" {
			msg += "; " + op.t.KeyedHint
		}
		b.ps.Add(op.line, path, "%s", msg)
	case op.t.Global && len(keyed) > 0:
		b.ps.Add(op.line, path, "%s reads a whole non-keyed stream in one subtask: read the stream before the key-by (a keyed type such as window reads a key-by)", op.typ)
	case len(keyed) > 0 && len(plain) > 0:
		b.ps.Add(op.line, path, "cannot mix keyed and non-keyed inputs")
	default:
		first := record.Invalid
		for _, in := range keyed {
			switch {
			case in.keyType == record.Invalid:
			case first == record.Invalid:
				first = in.keyType
			case in.keyType != first:
				b.ps.Add(op.line, path, "keyed inputs have different key types (%v and %v)", first, in.keyType)
				return
			}
		}
	}
}

// checkSinks reports operators whose output nobody reads, and a job without a sink.
func (b *builder) checkSinks() {
	consumed := map[*specOp]bool{}
	for _, op := range b.ops {
		for _, in := range op.inputs {
			consumed[in] = true
		}
	}
	sinks, unread := 0, 0
	for _, op := range b.ops {
		if op.t == nil || op.t.Role == operator.RoleSink { // an operator of unknown type may be a sink
			sinks++
			continue
		}
		if !consumed[op] && !b.unsureReaders {
			op.value.Problemf("its output goes nowhere: add a sink (print, file, discard) that reads it")
			unread++
		}
	}
	if sinks == 0 && unread == 0 {
		b.ps.Add(0, "operators", "a job needs at least one sink")
	}
}

// edge is a logical edge between two physical (non key-by) operators.
type edge struct {
	from, to *specOp
	part     pb.Partitioner
	key      *expression.Program
	input    int     // which input of to it feeds
	side     *specOp // the side output of from it carries, or nil
}

// newEdge returns the edge from src to op; src may be a side output.
func newEdge(src, to *specOp, part pb.Partitioner, key *expression.Program, input int) edge {
	if src.base != nil {
		return edge{from: src.base, to: to, part: part, key: key, input: input, side: src}
	}
	return edge{from: src, to: to, part: part, key: key, input: input}
}

// vertex is a chain of forward-connected operators with one parallelism.
type vertex struct {
	ops         []*specOp
	par, maxPar int
	// fixed: an operator's parallelism comes from the spec or its type, not the default.
	fixed bool
}

// chain groups the operators into vertices and checks their max parallelism. It needs only
// the inputs, so it runs on a spec with problems too.
func (b *builder) chain() ([]*vertex, []edge) {
	maxPar := b.cfg.Int(config.MaxParallelism)
	parOf := func(op *specOp) int {
		switch {
		case op.t != nil && op.t.Global:
			return 1
		case op.parallelism > 0:
			return op.parallelism
		}
		return b.par
	}
	var physical []*specOp
	var edges []edge
	changelogs := map[*specOp]string{}
	for _, op := range b.ops {
		if op.is(operator.RoleKeyBy) {
			continue
		}
		physical = append(physical, op)
		for j, in := range op.inputs {
			if in.is(operator.RoleKeyBy) {
				for _, src := range in.inputs {
					edges = append(edges, newEdge(src, op, pb.Partitioner_PARTITIONER_HASH, in.keyExp, j))
				}
				continue
			}
			if op.t != nil && op.t.Global {
				// One constant key: the whole stream in one subtask, with keyed state.
				var key *expression.Program
				if in.out != nil && in.out.Schema != nil {
					key, _ = expression.Compile("0", in.out.Schema, expression.Options{})
				}
				edges = append(edges, newEdge(in, op, pb.Partitioner_PARTITIONER_HASH, key, j))
				continue
			}
			part := pb.Partitioner_PARTITIONER_FORWARD
			if parOf(in) != parOf(op) {
				part = pb.Partitioner_PARTITIONER_REBALANCE
				b.checkReordering(op, in, parOf(in), parOf(op), changelogs)
			}
			edges = append(edges, newEdge(in, op, part, nil, j))
		}
	}
	in, out := map[*specOp][]edge{}, map[*specOp][]edge{}
	for _, e := range edges {
		in[e.to] = append(in[e.to], e)
		out[e.from] = append(out[e.from], e)
	}
	var vertices []*vertex
	vertexOf := map[*specOp]*vertex{}
	for _, op := range physical {
		ins := in[op]
		if len(ins) == 1 && ins[0].part == pb.Partitioner_PARTITIONER_FORWARD && ins[0].side == nil && len(out[ins[0].from]) == 1 {
			if v := vertexOf[ins[0].from]; v != nil {
				v.ops = append(v.ops, op)
				v.fixed = v.fixed || fixedPar(op)
				vertexOf[op] = v
				continue
			}
		}
		p := parOf(op)
		mp := maxPar
		if mp <= 0 {
			mp = state.DefaultMaxParallelism(p)
		}
		if err := state.ValidateMaxParallelism(mp, p); err != nil {
			b.ps.Add(cmp.Or(op.parLine, op.line), op.path, "%v (%s)", err, config.MaxParallelism)
		}
		v := &vertex{ops: []*specOp{op}, par: p, maxPar: mp, fixed: fixedPar(op)}
		vertices = append(vertices, v)
		vertexOf[op] = v
	}
	return vertices, edges
}

// checkReordering reports a rebalance edge from in (parallelism from) to op (parallelism to)
// when in emits a changelog: round robin over several channels would reorder the changes of a
// row, and the reader would apply them out of order (an upsert sink could keep a deleted
// row). A key-by on the row's key keeps each row's changes in one channel, in order.
func (b *builder) checkReordering(op, in *specOp, from, to int, memo map[*specOp]string) {
	f := changelog(in, memo)
	if f == "" {
		return
	}
	path, line := op.path, op.line
	if op.parLine > 0 {
		path, line = op.path+".parallelism", op.parLine
	}
	b.ps.Add(line, path, "reads the changelog of %q (the kind of change in field %q) through a rebalance edge (parallelism %d to %d), "+
		"which would reorder the changes of a row: read it through a key-by on the row's key, or give it parallelism %d",
		in.name, f, from, to, from)
}

// changelog returns the field holding the kind of change when op emits a changelog (see
// operator.Type.ChangelogField): a changelog source, or an operator that reads a changelog,
// directly or through a key-by, and keeps that field in its output; "" otherwise. memo holds
// what was found.
func changelog(op *specOp, memo map[*specOp]string) string {
	if f, ok := memo[op]; ok {
		return f
	}
	memo[op] = "" // a cycle cannot be built, but never recurse forever
	f := ""
	switch {
	case op.t != nil && op.t.ChangelogField != "":
		f = op.t.ChangelogField
	case op.is(operator.RoleSink):
	default:
		ins := op.inputs
		if op.base != nil {
			ins = op.base.inputs // a side output emits its base's input
		}
		for _, in := range ins {
			if in.is(operator.RoleKeyBy) {
				for _, src := range in.inputs {
					f = cmp.Or(f, changelog(src, memo))
				}
				continue
			}
			f = cmp.Or(f, changelog(in, memo))
		}
		if f != "" && op.out != nil {
			if _, ok := op.out.Field(f); !ok {
				f = ""
			}
		}
	}
	memo[op] = f
	return f
}

// fixedPar reports whether a rescale must leave an operator's parallelism alone: set in the
// spec, one for a type that runs in one subtask, or a type that cannot rescale its state.
func fixedPar(op *specOp) bool {
	return op.parallelism > 0 || (op.t != nil && (op.t.Global || op.t.NotRescalable))
}

// graph builds the JobGraph of a spec without problems, whose schemas are all known.
func (b *builder) graph(name string, vertices []*vertex, edges []edge) *pb.JobGraph {
	g := &pb.JobGraph{Name: name, Config: b.cfg.Map(), JobConfig: b.jobCfg}
	vertexOf := map[*specOp]*pb.JobVertex{}
	for _, v := range vertices {
		jv := &pb.JobVertex{Id: int32(len(g.Vertices)), Parallelism: int32(v.par), MaxParallelism: int32(v.maxPar), FixedParallelism: v.fixed}
		names := make([]string, len(v.ops))
		for i, op := range v.ops {
			names[i] = op.name
			jv.Operators = append(jv.Operators, op.pbOp)
			if op.wmOp != nil {
				jv.Operators = append(jv.Operators, op.wmOp)
			}
			vertexOf[op] = jv
		}
		jv.Name = strings.Join(names, " -> ") // once: appending to it would copy it per operator
		g.Vertices = append(g.Vertices, jv)
	}
	for _, e := range edges {
		src, dst := vertexOf[e.from], vertexOf[e.to]
		if src == dst {
			continue // chained
		}
		from := e.from
		if e.side != nil {
			from = e.side
		}
		je := &pb.JobEdge{Source: src.Id, Target: dst.Id, Partitioner: e.part, Schema: from.out.Schema.Proto(),
			Timestamps: from.timed, Input: int32(e.input)}
		if e.side != nil {
			je.SideOutput = e.side.side
		}
		if e.key != nil {
			je.Key = e.key.Source()
			je.KeyType = e.key.Type().Proto()
		}
		g.Edges = append(g.Edges, je)
	}
	return g
}

// ErrInvalidSpec matches every *SpecError with errors.Is.
var ErrInvalidSpec = errors.New("invalid job spec")

// Is makes errors.Is(err, ErrInvalidSpec) hold for spec errors.
func (e *SpecError) Is(target error) bool { return target == ErrInvalidSpec }
