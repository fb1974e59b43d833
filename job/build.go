package job

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/expression"
	"github.com/goflink/goflink/internal/suggest"
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
	// Parallelism, when > 0, overrides the spec's default parallelism (flinkctl run -p).
	Parallelism int
}

// Env is what the cluster contributes.
type Env struct {
	// Defaults are the job-scope keys of the cluster config (may be nil).
	Defaults *config.Config
	// Operators holds custom operators (may be nil).
	Operators *operator.Registry
}

const (
	roleUnknown = iota // the type is missing or unknown
	roleSource
	roleTransform
	roleSink
	roleKeyBy
)

type typeInfo struct {
	role   int
	keyed  bool
	fields []string
	// withInputs, when set, is the type's role once the operator reads inputs: "kafka" is a
	// source without inputs and a sink with them.
	withInputs *typeInfo
}

var builtinTypes = map[string]typeInfo{
	"sequence": {role: roleSource, fields: []string{"from", "to", "rate"}},
	"map":      {role: roleTransform, fields: []string{"fields"}},
	"filter":   {role: roleTransform, fields: []string{"condition"}},
	"key-by":   {role: roleKeyBy, fields: []string{"key"}},
	"sum":      {role: roleTransform, keyed: true, fields: []string{"field"}},
	"count":    {role: roleTransform, keyed: true},
	"reduce":   {role: roleTransform, keyed: true, fields: []string{"fields"}},
	"fail":     {role: roleTransform, fields: []string{"when", "attempt"}},
	"print":    {role: roleSink},
	"file":     {role: roleSink, fields: []string{"path", "format"}},
	"discard":  {role: roleSink},
	"kafka":    {role: roleSource, fields: kafkaSourceFields, withInputs: &typeInfo{role: roleSink, fields: kafkaSinkFields}},
}

var commonFields = []string{"name", "type", "inputs", "parallelism"}

// specOp is one parsed operator of the spec.
type specOp struct {
	index       int
	line        int
	path        string
	name, typ   string
	info        typeInfo // role roleUnknown when the type is missing or unknown
	custom      *operator.Custom
	inputNames  []string
	inputLines  []int
	explicitIn  bool
	badInputs   bool // the inputs field could not be read
	parallelism int
	parLine     int
	fields      *mapping // the type-specific fields

	// resolved
	inputs     []*specOp
	unresolved bool                // an input could not be resolved (reported)
	in         *shape              // what it reads; nil for a source
	out        *shape              // what it emits; nil for a sink
	keyType    record.Type         // key-by only; record.Invalid when unknown
	keyExp     *expression.Program // key-by only; nil when its input is not fully known
	pbOp       *pb.Operator
}

// Build validates a spec and returns its JobGraph.
func Build(req Request, env Env) (*pb.JobGraph, error) {
	ps := &problems{}
	b := &builder{req: req, env: env, ps: ps}
	g := b.build()
	if err := ps.err(req.SpecName); err != nil {
		return nil, err
	}
	return g, nil
}

type builder struct {
	req Request
	env Env
	ps  *problems
	cfg *config.Config
	// jobCfg holds the keys the spec and the overrides set (JobGraph.job_config).
	jobCfg map[string]string
	par    int
	ops    []*specOp
	name   string // the job's name
	// unsureReaders is set when an input could not be resolved: any operator may be the one
	// meant, so none is reported as unread.
	unsureReaders bool
}

func (b *builder) build() *pb.JobGraph {
	var doc yaml.Node
	if err := yaml.Unmarshal(b.req.Spec, &doc); err != nil {
		b.ps.add(0, "", "not valid YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
		return nil
	}
	if len(doc.Content) == 0 {
		b.ps.add(0, "", "the spec is empty")
		return nil
	}
	top := asMapping(doc.Content[0], "spec", b.ps)
	if top == nil {
		return nil
	}
	top.checkKeys("spec", []string{"name", "parallelism", "config", "operators"}, "at the top level", b.ps)

	name, nameOK := "", true
	if e, ok := top.get("name"); ok {
		name, nameOK = scalarString(e.val, "name", b.ps)
	}
	if nameOK && strings.TrimSpace(name) == "" {
		b.ps.add(top.line, "name", "a job needs a name")
	}
	b.name = name
	b.buildConfig(top)
	b.resolveParallelism(top)
	e, ok := top.get("operators")
	if !ok {
		b.ps.add(top.line, "operators", "a job needs a list of operators")
		return nil
	}
	if e.val.Kind != yaml.SequenceNode || len(e.val.Content) == 0 {
		b.ps.add(e.line, "operators", "want a non-empty list of operators, got %s", kindName(e.val))
		return nil
	}
	b.parseOperators(e.val)
	b.resolveInputs()
	for _, op := range b.ops {
		b.plan(op)
	}
	b.checkSinks()
	vertices, edges := b.chain()
	if len(b.ps.list) > 0 {
		return nil
	}
	for _, op := range b.ops {
		// Only a problem leaves part of a schema unknown; make sure rather than panic below.
		if op.info.role != roleSink && (op.out == nil || op.out.schema == nil) {
			b.ps.add(op.line, op.path, "its output schema could not be derived")
			return nil
		}
	}
	return b.graph(name, vertices, edges)
}

// buildConfig merges cluster defaults < spec config < overrides.
func (b *builder) buildConfig(top *mapping) {
	b.cfg, b.jobCfg = config.New(), map[string]string{}
	if b.env.Defaults != nil {
		b.cfg.Merge(b.env.Defaults)
	}
	if e, ok := top.get("config"); ok {
		if m := asMapping(e.val, "config", b.ps); m != nil {
			for _, ce := range m.entries {
				v, ok := scalarString(ce.val, "config."+ce.key, b.ps)
				if !ok {
					continue
				}
				if err := config.ValidateJob(map[string]string{ce.key: v}); err != nil {
					b.ps.add(ce.line, "config", "%v", err)
					continue
				}
				_ = b.cfg.Set(ce.key, v)
				b.jobCfg[ce.key] = v
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(b.req.Overrides)) {
		v := b.req.Overrides[k]
		if err := config.ValidateJob(map[string]string{k: v}); err != nil {
			b.ps.add(0, "-D "+k, "%v", err)
			continue
		}
		_ = b.cfg.Set(k, v)
		b.jobCfg[k] = v
	}
}

func (b *builder) resolveParallelism(top *mapping) {
	b.par = b.cfg.Int(config.ParallelismDefault)
	if e, ok := top.get("parallelism"); ok {
		if v, ok := scalarInt(e.val, "parallelism", b.ps); ok {
			if v < 1 || v > state.UpperBoundMaxParallelism {
				b.ps.add(e.line, "parallelism", "must be between 1 and %d, got %d", state.UpperBoundMaxParallelism, v)
			} else {
				b.par = int(v)
			}
		}
	}
	if b.req.Parallelism > 0 {
		b.par = b.req.Parallelism
	}
}

// parseOperators reads each operator's common fields. An operator with problems is kept: what
// does not depend on them is still checked, and its readers are checked against what is known.
func (b *builder) parseOperators(list *yaml.Node) {
	names := map[string]*specOp{}
	for i, n := range list.Content {
		op := &specOp{index: i, line: n.Line, path: fmt.Sprintf("operators[%d]", i), fields: &mapping{line: n.Line}}
		b.ops = append(b.ops, op)
		m := asMapping(n, op.path, b.ps)
		if m == nil {
			continue
		}
		nameOK := true
		if e, ok := m.get("name"); ok {
			op.name, nameOK = scalarString(e.val, op.path+".name", b.ps)
		}
		if op.name == "" {
			if nameOK {
				b.ps.add(op.line, op.path, "an operator needs a name")
			}
		} else {
			op.path = fmt.Sprintf("operators[%d] %q", i, op.name)
			if prev, dup := names[op.name]; dup {
				b.ps.add(op.line, op.path, "duplicate operator name (first used on line %d)", prev.line)
			} else {
				names[op.name] = op
			}
		}
		e, ok := m.get("type")
		typeOK := true
		if ok {
			op.typ, typeOK = scalarString(e.val, op.path+".type", b.ps)
		}
		switch info, builtin := builtinTypes[op.typ]; {
		case !typeOK: // reported
		case !ok || op.typ == "":
			b.ps.add(op.line, op.path, "an operator needs a type (one of %s)", strings.Join(b.knownTypes(), ", "))
		case builtin:
			op.info = info
		default:
			if c, found := b.env.Operators.Lookup(op.typ); found {
				op.custom = &c
				op.info = typeInfo{role: roleTransform, keyed: c.Keyed}
				if c.Role == operator.RoleSink {
					op.info.role = roleSink
				}
			} else {
				msg := fmt.Sprintf("unknown operator type %q", op.typ)
				if s := suggest.Closest(op.typ, b.knownTypes()); s != "" {
					msg += fmt.Sprintf("; did you mean %q?", s)
				}
				b.ps.add(e.line, op.path+".type", "%s (known: %s)", msg, strings.Join(b.knownTypes(), ", "))
			}
		}
		if e, ok := m.get("inputs"); ok {
			op.explicitIn = true
			var good bool
			op.inputNames, op.inputLines, good = stringList(e.val, op.path+".inputs", b.ps)
			op.badInputs = !good
		}
		if op.info.withInputs != nil {
			switch {
			case op.badInputs:
				op.info = typeInfo{} // a source or a sink: unknown
			case op.readsInputs():
				op.info = *op.info.withInputs
			}
		}
		if e, ok := m.get("parallelism"); ok {
			op.parLine = e.line
			if v, good := scalarInt(e.val, op.path+".parallelism", b.ps); good {
				if v < 1 || v > state.UpperBoundMaxParallelism {
					b.ps.add(e.line, op.path+".parallelism", "must be between 1 and %d, got %d", state.UpperBoundMaxParallelism, v)
				} else {
					op.parallelism = int(v)
				}
			}
		}
		if op.info.role != roleUnknown && op.custom == nil {
			allowed := append(slices.Clone(commonFields), op.info.fields...)
			m.checkKeys(op.path, allowed, "for type "+op.typ, b.ps)
		}
		for _, e := range m.entries {
			if !slices.Contains(commonFields, e.key) {
				op.fields.entries = append(op.fields.entries, e)
			}
		}
		op.fields.line = m.line
	}
}

// readsInputs reports whether op reads inputs: it names some, or it is not the first operator
// and names none (so it reads the previous one). An explicit empty list means none.
func (op *specOp) readsInputs() bool {
	if op.explicitIn {
		return len(op.inputNames) > 0
	}
	return op.index > 0
}

func (b *builder) knownTypes() []string {
	types := operator.Builtins()
	return append(types, b.env.Operators.Types()...)
}

// resolveInputs links each operator to the operators it reads. An operator of unknown type
// reads what its inputs field names, or the operator above it: whatever its type was meant to
// be, it is not reported for missing inputs, and what it may read is not reported as unread.
func (b *builder) resolveInputs() {
	byName := map[string]*specOp{}
	for _, op := range b.ops {
		role := op.info.role
		switch {
		case role == roleSource:
			if op.explicitIn && len(op.inputNames) > 0 {
				b.ps.add(op.line, op.path+".inputs", "a %s source reads no inputs", op.typ)
				b.unsureReaders = true
			}
		case op.badInputs:
			op.unresolved = true
			b.unsureReaders = true
		case !op.explicitIn && op.index == 0:
			if role != roleUnknown {
				b.ps.add(op.line, op.path, "missing input: the first operator must be a source, or name its inputs")
				op.unresolved = true
			}
		case !op.explicitIn:
			op.inputs = []*specOp{b.ops[op.index-1]}
		case len(op.inputNames) == 0:
			if role != roleUnknown {
				b.ps.add(op.line, op.path+".inputs", "missing input: the list is empty")
				op.unresolved = true
				b.unsureReaders = true
			}
		default:
			for i, in := range op.inputNames {
				src, ok := byName[in]
				if !ok {
					msg := fmt.Sprintf("missing input: no operator %q", in)
					if later := b.find(in); later != nil {
						msg = fmt.Sprintf("input %q must be declared before this operator (it is on line %d)", in, later.line)
					} else if s := suggest.Closest(in, slices.Collect(maps.Keys(byName))); s != "" {
						msg += fmt.Sprintf("; did you mean %q?", s)
					}
					b.ps.add(op.inputLines[i], op.path+".inputs", "%s", msg)
					op.unresolved = true
					b.unsureReaders = true
					continue
				}
				if slices.Contains(op.inputs, src) {
					b.ps.add(op.inputLines[i], op.path+".inputs", "input %q is listed twice", in)
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

func (b *builder) find(name string) *specOp {
	for _, op := range b.ops {
		if op.name == name {
			return op
		}
	}
	return nil
}

// plan checks op against what is known of its inputs and derives what it emits. An operator
// with problems still derives its output as far as it can (a filter emits what it reads, a
// map the fields it names), so its readers are checked too.
func (b *builder) plan(op *specOp) {
	if op.info.role == roleUnknown {
		op.out = unknownShape()
		return
	}
	if op.info.role == roleKeyBy && op.parallelism > 0 {
		b.ps.add(op.parLine, op.path+".parallelism", "key-by only routes records and has no parallelism of its own")
	}
	op.pbOp = &pb.Operator{Name: op.name, Type: op.typ, Line: int32(op.line)}
	if op.info.role != roleSource {
		op.in = b.inputShape(op)
		b.checkKeyed(op)
		if op.in.schema != nil {
			op.pbOp.InputSchema = op.in.schema.Proto()
		}
	}
	op.out = b.planType(op)
	if op.info.role == roleSink {
		op.out = nil
	}
	if op.out != nil && op.out.schema != nil && op.info.role != roleKeyBy {
		op.pbOp.OutputSchema = op.out.schema.Proto()
	}
}

// inputShape is what op reads: its input's shape, or what is known of the schema all its
// inputs share.
func (b *builder) inputShape(op *specOp) *shape {
	known := !op.unresolved
	var from []*specOp
	for _, in := range op.inputs {
		if in.info.role == roleSink {
			b.ps.add(op.line, op.path+".inputs", "input %q is a sink and emits nothing", in.name)
			known = false
			continue
		}
		from = append(from, in)
	}
	if !known || len(from) == 0 {
		return unknownShape()
	}
	union := from[0].out
	for _, in := range from[1:] {
		var same bool
		if union, same = unite(union, in.out); !same {
			b.ps.add(op.line, op.path+".inputs", "inputs must have the same fields: %q has %v, %q has %v", from[0].name, from[0].out, in.name, in.out)
			return unknownShape()
		}
	}
	return union
}

// checkKeyed checks that op reads keyed or non-keyed inputs as its type needs. Inputs of
// unknown type may be either, so only the others count.
func (b *builder) checkKeyed(op *specOp) {
	var keyed, plain []*specOp
	for _, in := range op.inputs {
		switch in.info.role {
		case roleKeyBy:
			keyed = append(keyed, in)
		case roleSource, roleTransform:
			plain = append(plain, in)
		}
	}
	switch {
	case op.info.role == roleKeyBy && len(keyed) > 0:
		b.ps.add(op.line, op.path+".inputs", "key-by cannot read from another key-by")
	case op.info.keyed && len(plain) > 0:
		b.ps.add(op.line, op.path+".inputs", "%s keeps state per key and needs keyed inputs: put a key-by before it", op.typ)
	case len(keyed) > 0 && len(plain) > 0:
		b.ps.add(op.line, op.path+".inputs", "cannot mix keyed and non-keyed inputs")
	default:
		first := record.Invalid
		for _, in := range keyed {
			switch {
			case in.keyType == record.Invalid:
			case first == record.Invalid:
				first = in.keyType
			case in.keyType != first:
				b.ps.add(op.line, op.path+".inputs", "keyed inputs have different key types (%v and %v)", first, in.keyType)
				return
			}
		}
	}
}

// field reads a type-specific field; required ones are reported when missing.
func (b *builder) field(op *specOp, key string, required bool) (entry, bool) {
	e, ok := op.fields.get(key)
	if !ok && required {
		b.ps.add(op.line, op.path, "%s needs the field %q", op.typ, key)
	}
	return e, ok
}

// compile type-checks an expression against op's input: fully when it is known (the program
// is returned then), else against what is known of it. The type is record.Invalid when it
// depends on what is unknown; false means a problem was reported.
func (b *builder) compile(op *specOp, e entry, path string, src string, opts expression.Options) (record.Type, *expression.Program, bool) {
	in := op.in
	if in == nil {
		in = unknownShape()
	}
	if in.schema != nil {
		p, err := expression.Compile(src, in.schema, opts)
		if err != nil {
			b.ps.add(e.line, path, "expression %q: %v", src, err)
			return record.Invalid, nil, false
		}
		return p.Type(), p, true
	}
	t, err := checkPartial(src, in, opts)
	if err != nil {
		b.ps.add(e.line, path, "expression %q: %v", src, err)
		return record.Invalid, nil, false
	}
	return t, nil, true
}

// planType checks op's type-specific fields, reporting every problem, sets its spec and
// returns what it emits (nil for a sink), as far as it is known.
func (b *builder) planType(op *specOp) *shape {
	switch op.typ {
	case "sequence":
		b.planSequence(op)
		return knownShape(operator.SequenceSchema)
	case "map":
		return b.planMap(op)
	case "reduce":
		b.planReduce(op)
		return op.in
	case "filter", "fail", "key-by":
		b.planPredicate(op)
		return op.in
	case "sum":
		b.planSum(op)
		return op.in
	case "count":
		return b.planCount(op)
	case "print":
		op.pbOp.Spec = &pb.Operator_Print{Print: &pb.PrintSink{}}
		return nil
	case "discard":
		op.pbOp.Spec = &pb.Operator_Discard{Discard: &pb.DiscardSink{}}
		return nil
	case "file":
		b.planFile(op)
		return nil
	case "kafka":
		if op.info.role == roleSource {
			return b.planKafkaSource(op)
		}
		b.planKafkaSink(op)
		return nil
	}
	return b.planCustom(op)
}

func (b *builder) planSequence(op *specOp) {
	path := op.path
	s := &pb.SequenceSource{}
	fromOK := false
	if e, ok := b.field(op, "from", true); ok {
		s.From, fromOK = scalarInt(e.val, path+".from", b.ps)
	}
	if e, has := b.field(op, "to", false); has {
		if to, ok := scalarInt(e.val, path+".to", b.ps); ok {
			if fromOK && to < s.From {
				b.ps.add(e.line, path+".to", "to (%d) is below from (%d)", to, s.From)
			}
			s.To = &to
		}
	}
	if e, has := b.field(op, "rate", false); has {
		var ok bool
		if s.Rate, ok = scalarFloat(e.val, path+".rate", b.ps); ok && s.Rate < 0 {
			b.ps.add(e.line, path+".rate", "must not be negative, got %v", s.Rate)
		}
	}
	op.pbOp.Spec = &pb.Operator_Sequence{Sequence: s}
}

// exprFields reads the fields mapping of map and reduce; nil after a problem with it.
func (b *builder) exprFields(op *specOp) *mapping {
	e, ok := b.field(op, "fields", true)
	if !ok {
		return nil
	}
	m := asMapping(e.val, op.path+".fields", b.ps)
	if m == nil {
		return nil
	}
	if len(m.entries) == 0 {
		b.ps.add(e.line, op.path+".fields", "needs at least one field")
		return nil
	}
	return m
}

// planMap returns the fields the map names, each with its expression's type when known.
func (b *builder) planMap(op *specOp) *shape {
	m := b.exprFields(op)
	if m == nil {
		return unknownShape()
	}
	var exprs []*pb.NamedExpression
	var fields []record.Field
	open := false
	for _, fe := range m.entries {
		fpath := op.path + ".fields." + fe.key
		if !identifier.MatchString(fe.key) {
			b.ps.add(fe.line, fpath, "field names must be identifiers (letters, digits, _)")
			open = true // the field it will be renamed to is unknown
			continue
		}
		t := record.Invalid
		if src, ok := scalarString(fe.val, fpath, b.ps); ok {
			t, _, _ = b.compile(op, fe, fpath, src, expression.Options{})
			exprs = append(exprs, &pb.NamedExpression{Name: fe.key, Expression: src})
		}
		fields = append(fields, record.Field{Name: fe.key, Type: t})
	}
	op.pbOp.Spec = &pb.Operator_Map{Map: &pb.MapOperator{Fields: exprs}}
	return newShape(fields, open)
}

func (b *builder) planReduce(op *specOp) {
	m := b.exprFields(op)
	if m == nil {
		return
	}
	var exprs []*pb.NamedExpression
	for _, fe := range m.entries {
		fpath := op.path + ".fields." + fe.key
		if !identifier.MatchString(fe.key) {
			b.ps.add(fe.line, fpath, "field names must be identifiers (letters, digits, _)")
			continue
		}
		src, ok := scalarString(fe.val, fpath, b.ps)
		if !ok {
			continue
		}
		f, found := op.in.field(fe.key)
		if !found {
			if !op.in.open {
				b.ps.add(fe.line, fpath, "no field %q in the input %v", fe.key, op.in)
			}
			continue
		}
		b.compile(op, fe, fpath, src, expression.Options{Acc: true, Want: f.Type})
		exprs = append(exprs, &pb.NamedExpression{Name: fe.key, Expression: src})
	}
	op.pbOp.Spec = &pb.Operator_Reduce{Reduce: &pb.ReduceOperator{Fields: exprs}}
}

// planPredicate plans the operators of one expression over the record: filter, fail, key-by.
func (b *builder) planPredicate(op *specOp) {
	path := op.path
	key := map[string]string{"filter": "condition", "fail": "when", "key-by": "key"}[op.typ]
	src := ""
	if e, ok := b.field(op, key, true); ok {
		if src, ok = scalarString(e.val, path+"."+key, b.ps); ok {
			want := record.Bool
			if op.typ == "key-by" {
				want = record.Invalid
			}
			t, p, ok := b.compile(op, e, path+"."+key, src, expression.Options{Want: want})
			if ok && op.typ == "key-by" {
				if t == record.Map {
					b.ps.add(e.line, path+".key", "a key cannot be a map; key by one of its entries, such as %s[\"name\"]", src)
					t, p = record.Invalid, nil
				}
				op.keyType, op.keyExp = t, p
			}
		}
	}
	switch op.typ {
	case "filter":
		op.pbOp.Spec = &pb.Operator_Filter{Filter: &pb.FilterOperator{Condition: src}}
	case "fail":
		f := &pb.FailOperator{When: src}
		if ae, has := b.field(op, "attempt", false); has {
			if a, ok := scalarInt(ae.val, path+".attempt", b.ps); ok {
				if a < 0 {
					b.ps.add(ae.line, path+".attempt", "must not be negative, got %d", a)
				}
				a32 := int32(a)
				f.Attempt = &a32
			}
		}
		op.pbOp.Spec = &pb.Operator_Fail{Fail: f}
	}
}

func (b *builder) planSum(op *specOp) {
	e, ok := b.field(op, "field", true)
	if !ok {
		return
	}
	path := op.path + ".field"
	name, ok := scalarString(e.val, path, b.ps)
	if !ok {
		return
	}
	f, found := op.in.field(name)
	switch {
	case op.in.lacks(name):
		msg := fmt.Sprintf("no field %q in the input %v", name, op.in)
		if s := suggest.Closest(name, op.in.names()); s != "" {
			msg += fmt.Sprintf("; did you mean %q?", s)
		}
		b.ps.add(e.line, path, "%s", msg)
	case found && f.Type != record.Invalid && f.Type != record.Int64 && f.Type != record.Float64:
		b.ps.add(e.line, path, "field %q is %v; sum needs int64 or float64", name, f.Type)
	}
	op.pbOp.Spec = &pb.Operator_Sum{Sum: &pb.SumOperator{Field: name}}
}

// planCount returns the input with the field count added.
func (b *builder) planCount(op *specOp) *shape {
	var fields []record.Field
	for _, f := range op.in.fields {
		if f.Name == "count" {
			b.ps.add(op.line, op.path, "the input already has a field \"count\"; rename it with a map first")
			continue
		}
		fields = append(fields, f)
	}
	op.pbOp.Spec = &pb.Operator_Count{Count: &pb.CountOperator{}}
	return newShape(append(fields, record.Field{Name: "count", Type: record.Int64}), op.in.open)
}

func (b *builder) planFile(op *specOp) {
	path := op.path
	fs := &pb.FileSink{}
	if e, ok := b.field(op, "path", true); ok {
		if p, ok := scalarString(e.val, path+".path", b.ps); ok {
			if strings.TrimSpace(p) == "" {
				b.ps.add(e.line, path+".path", "must not be empty")
			}
			fs.Path = p
		}
	}
	if fe, has := b.field(op, "format", false); has {
		if f, ok := scalarString(fe.val, path+".format", b.ps); ok && f != "json" {
			b.ps.add(fe.line, path+".format", "unknown format %q (the file sink writes json)", f)
		}
	}
	op.pbOp.Spec = &pb.Operator_File{File: fs}
}

// planCustom checks a registered operator's fields with its Plan, when its input is known.
func (b *builder) planCustom(op *specOp) *shape {
	fields := map[string]any{}
	good := true
	for _, e := range op.fields.entries {
		var v any
		if err := e.val.Decode(&v); err != nil {
			b.ps.add(e.line, op.path+"."+e.key, "%v", err)
			good = false
			continue
		}
		fields[e.key] = v
	}
	if !good {
		return unknownShape()
	}
	raw, err := json.Marshal(fields)
	if err != nil {
		b.ps.add(op.line, op.path, "fields cannot be encoded as JSON: %v", err)
		return unknownShape()
	}
	if op.in.schema == nil {
		return unknownShape() // Plan needs the input schema
	}
	// Decode the JSON again so Plan sees exactly what the TaskManager's New will see.
	fields = map[string]any{}
	_ = json.Unmarshal(raw, &fields)
	out, err := op.custom.Plan(fields, op.in.schema)
	if err != nil {
		b.ps.add(op.line, op.path, "%v", err)
		return unknownShape()
	}
	op.pbOp.Spec = &pb.Operator_Custom{Custom: &pb.CustomOperator{FieldsJson: raw}}
	if op.info.role == roleSink {
		return nil
	}
	if out == nil {
		b.ps.add(op.line, op.path, "custom operator %q returned no output schema", op.typ)
		return unknownShape()
	}
	return knownShape(out)
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
		switch op.info.role {
		case roleSink, roleUnknown: // an operator of unknown type may be a sink
			sinks++
		default:
			if !consumed[op] && !b.unsureReaders {
				b.ps.add(op.line, op.path, "its output goes nowhere: add a sink (print, file, discard) that reads it")
				unread++
			}
		}
	}
	if sinks == 0 && unread == 0 {
		b.ps.add(0, "operators", "a job needs at least one sink")
	}
}

// edge is a logical edge between two physical (non key-by) operators.
type edge struct {
	from, to *specOp
	part     pb.Partitioner
	key      *expression.Program
}

// vertex is a chain of forward-connected operators with one parallelism.
type vertex struct {
	ops         []*specOp
	par, maxPar int
}

// chain groups the operators into vertices and checks their max parallelism. It needs only
// the inputs, so it runs on a spec with problems too.
func (b *builder) chain() ([]*vertex, []edge) {
	maxPar := b.cfg.Int(config.MaxParallelism)
	parOf := func(op *specOp) int {
		if op.parallelism > 0 {
			return op.parallelism
		}
		return b.par
	}
	var physical []*specOp
	var edges []edge
	for _, op := range b.ops {
		if op.info.role == roleKeyBy {
			continue
		}
		physical = append(physical, op)
		for _, in := range op.inputs {
			if in.info.role == roleKeyBy {
				for _, src := range in.inputs {
					edges = append(edges, edge{from: src, to: op, part: pb.Partitioner_PARTITIONER_HASH, key: in.keyExp})
				}
				continue
			}
			part := pb.Partitioner_PARTITIONER_FORWARD
			if parOf(in) != parOf(op) {
				part = pb.Partitioner_PARTITIONER_REBALANCE
			}
			edges = append(edges, edge{from: in, to: op, part: part})
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
		if len(ins) == 1 && ins[0].part == pb.Partitioner_PARTITIONER_FORWARD && len(out[ins[0].from]) == 1 {
			if v := vertexOf[ins[0].from]; v != nil {
				v.ops = append(v.ops, op)
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
			line := op.parLine
			if line == 0 {
				line = op.line
			}
			b.ps.add(line, op.path, "%v (%s)", err, config.MaxParallelism)
		}
		v := &vertex{ops: []*specOp{op}, par: p, maxPar: mp}
		vertices = append(vertices, v)
		vertexOf[op] = v
	}
	return vertices, edges
}

// graph builds the JobGraph of a spec without problems, whose schemas are all known.
func (b *builder) graph(name string, vertices []*vertex, edges []edge) *pb.JobGraph {
	g := &pb.JobGraph{Name: name, Config: b.cfg.Map(), JobConfig: b.jobCfg}
	vertexOf := map[*specOp]*pb.JobVertex{}
	for _, v := range vertices {
		jv := &pb.JobVertex{Id: int32(len(g.Vertices)), Parallelism: int32(v.par), MaxParallelism: int32(v.maxPar)}
		for i, op := range v.ops {
			if i > 0 {
				jv.Name += " -> "
			}
			jv.Name += op.name
			jv.Operators = append(jv.Operators, op.pbOp)
			vertexOf[op] = jv
		}
		g.Vertices = append(g.Vertices, jv)
	}
	for _, e := range edges {
		src, dst := vertexOf[e.from], vertexOf[e.to]
		if src == dst {
			continue // chained
		}
		je := &pb.JobEdge{Source: src.Id, Target: dst.Id, Partitioner: e.part, Schema: e.from.out.schema.Proto()}
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
