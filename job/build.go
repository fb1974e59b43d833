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
	roleSource = iota
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
	info        typeInfo
	custom      *operator.Custom
	inputNames  []string
	inputLines  []int
	explicitIn  bool
	parallelism int
	parLine     int
	fields      *mapping

	// resolved
	inputs []*specOp
	in     *record.Schema // nil when unknown (an upstream problem)
	out    *record.Schema
	keyExp *expression.Program // key-by only
	pbOp   *pb.Operator
	valid  bool
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

	name := ""
	if e, ok := top.get("name"); ok {
		name, _ = scalarString(e.val, "name", b.ps)
	}
	if strings.TrimSpace(name) == "" {
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
	if len(b.ps.list) > 0 {
		return nil
	}
	return b.graph(name)
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

func (b *builder) parseOperators(list *yaml.Node) {
	names := map[string]*specOp{}
	for i, n := range list.Content {
		op := &specOp{index: i, line: n.Line, path: fmt.Sprintf("operators[%d]", i), valid: true}
		m := asMapping(n, op.path, b.ps)
		if m == nil {
			op.valid = false
			b.ops = append(b.ops, op)
			continue
		}
		if e, ok := m.get("name"); ok {
			op.name, _ = scalarString(e.val, op.path+".name", b.ps)
		}
		if op.name == "" {
			b.ps.add(op.line, op.path, "an operator needs a name")
			op.valid = false
		} else {
			op.path = fmt.Sprintf("operators[%d] %q", i, op.name)
			if prev, dup := names[op.name]; dup {
				b.ps.add(op.line, op.path, "duplicate operator name (first used on line %d)", prev.line)
				op.valid = false
			} else {
				names[op.name] = op
			}
		}
		e, ok := m.get("type")
		if ok {
			op.typ, _ = scalarString(e.val, op.path+".type", b.ps)
		}
		switch info, builtin := builtinTypes[op.typ]; {
		case !ok || op.typ == "":
			b.ps.add(op.line, op.path, "an operator needs a type (one of %s)", strings.Join(b.knownTypes(), ", "))
			op.valid = false
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
				op.valid = false
			}
		}
		if e, ok := m.get("inputs"); ok {
			op.explicitIn = true
			var good bool
			op.inputNames, op.inputLines, good = stringList(e.val, op.path+".inputs", b.ps)
			op.valid = op.valid && good
		}
		if op.info.withInputs != nil && op.readsInputs() {
			op.info = *op.info.withInputs
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
		if op.valid && op.custom == nil {
			allowed := append(slices.Clone(commonFields), op.info.fields...)
			m.checkKeys(op.path, allowed, "for type "+op.typ, b.ps)
		}
		var rest mapping
		for _, e := range m.entries {
			if !slices.Contains(commonFields, e.key) {
				rest.entries = append(rest.entries, e)
			}
		}
		rest.line = m.line
		op.fields = &rest
		b.ops = append(b.ops, op)
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

func (b *builder) resolveInputs() {
	byName := map[string]*specOp{}
	for _, op := range b.ops {
		if !op.valid && op.name == "" {
			continue
		}
		if op.info.role == roleSource {
			if op.explicitIn && len(op.inputNames) > 0 {
				b.ps.add(op.line, op.path+".inputs", "a %s source reads no inputs", op.typ)
			}
		} else if op.valid {
			if !op.explicitIn {
				if op.index == 0 {
					b.ps.add(op.line, op.path, "missing input: the first operator must be a source, or name its inputs")
					op.valid = false
				} else {
					prev := b.ops[op.index-1]
					op.inputs = []*specOp{prev}
				}
			} else if len(op.inputNames) == 0 {
				b.ps.add(op.line, op.path+".inputs", "missing input: the list is empty")
				op.valid = false
			}
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
					op.valid = false
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

// plan computes op's input and output schemas and its typed spec.
func (b *builder) plan(op *specOp) {
	if !op.valid {
		return
	}
	for _, in := range op.inputs {
		if in.info.role == roleSink {
			b.ps.add(op.line, op.path+".inputs", "input %q is a sink and emits nothing", in.name)
			op.valid = false
		}
		if !in.valid || in.out == nil {
			op.valid = false // reported where it went wrong
		}
	}
	if !op.valid {
		return
	}
	if op.info.role == roleKeyBy && op.parallelism > 0 {
		b.ps.add(op.parLine, op.path+".parallelism", "key-by only routes records and has no parallelism of its own")
	}
	if op.info.role != roleSource {
		op.in = op.inputs[0].out
		for _, in := range op.inputs[1:] {
			if !in.out.Equal(op.in) {
				b.ps.add(op.line, op.path+".inputs", "inputs must have the same fields: %q has %v, %q has %v", op.inputs[0].name, op.in, in.name, in.out)
				op.valid = false
				return
			}
		}
		keyed := 0
		for _, in := range op.inputs {
			if in.info.role == roleKeyBy {
				keyed++
			}
		}
		if op.info.role == roleKeyBy && keyed > 0 {
			b.ps.add(op.line, op.path+".inputs", "key-by cannot read from another key-by")
			op.valid = false
			return
		}
		if op.info.keyed && keyed != len(op.inputs) {
			b.ps.add(op.line, op.path+".inputs", "%s keeps state per key and needs keyed inputs: put a key-by before it", op.typ)
			op.valid = false
			return
		}
		if keyed > 0 && keyed < len(op.inputs) {
			b.ps.add(op.line, op.path+".inputs", "cannot mix keyed and non-keyed inputs")
			op.valid = false
			return
		}
		if keyed > 1 {
			first := op.inputs[0].keyExp.Type()
			for _, in := range op.inputs[1:] {
				if in.keyExp.Type() != first {
					b.ps.add(op.line, op.path+".inputs", "keyed inputs have different key types (%v and %v)", first, in.keyExp.Type())
					op.valid = false
					return
				}
			}
		}
	}
	op.pbOp = &pb.Operator{Name: op.name, Type: op.typ, Line: int32(op.line)}
	if op.in != nil {
		op.pbOp.InputSchema = op.in.Proto()
	}
	out, ok := b.planType(op)
	if !ok {
		op.valid = false
		return
	}
	op.out = out
	if out != nil && op.info.role != roleKeyBy {
		op.pbOp.OutputSchema = out.Proto()
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

func (b *builder) compile(op *specOp, e entry, path string, src string, opts expression.Options) (*expression.Program, bool) {
	p, err := expression.Compile(src, op.in, opts)
	if err != nil {
		b.ps.add(e.line, path, "expression %q: %v", src, err)
		return nil, false
	}
	return p, true
}

func (b *builder) planType(op *specOp) (*record.Schema, bool) {
	path := op.path
	switch op.typ {
	case "sequence":
		s := &pb.SequenceSource{}
		e, ok := b.field(op, "from", true)
		if !ok {
			return nil, false
		}
		if s.From, ok = scalarInt(e.val, path+".from", b.ps); !ok {
			return nil, false
		}
		if e, has := b.field(op, "to", false); has {
			to, ok := scalarInt(e.val, path+".to", b.ps)
			if !ok {
				return nil, false
			}
			if to < s.From {
				b.ps.add(e.line, path+".to", "to (%d) is below from (%d)", to, s.From)
				return nil, false
			}
			s.To = &to
		}
		if e, has := b.field(op, "rate", false); has {
			if s.Rate, ok = scalarFloat(e.val, path+".rate", b.ps); !ok {
				return nil, false
			}
			if s.Rate < 0 {
				b.ps.add(e.line, path+".rate", "must not be negative, got %v", s.Rate)
				return nil, false
			}
		}
		op.pbOp.Spec = &pb.Operator_Sequence{Sequence: s}
		return operator.SequenceSchema, true
	case "map", "reduce":
		e, ok := b.field(op, "fields", true)
		if !ok {
			return nil, false
		}
		m := asMapping(e.val, path+".fields", b.ps)
		if m == nil {
			return nil, false
		}
		if len(m.entries) == 0 {
			b.ps.add(e.line, path+".fields", "needs at least one field")
			return nil, false
		}
		var exprs []*pb.NamedExpression
		var fields []record.Field
		good := true
		for _, fe := range m.entries {
			fpath := path + ".fields." + fe.key
			if !identifier.MatchString(fe.key) {
				b.ps.add(fe.line, fpath, "field names must be identifiers (letters, digits, _)")
				good = false
				continue
			}
			src, ok := scalarString(fe.val, fpath, b.ps)
			if !ok {
				good = false
				continue
			}
			opts := expression.Options{}
			if op.typ == "reduce" {
				i := op.in.Index(fe.key)
				if i < 0 {
					b.ps.add(fe.line, fpath, "no field %q in the input %v", fe.key, op.in)
					good = false
					continue
				}
				opts = expression.Options{Acc: true, Want: op.in.Field(i).Type}
			}
			p, ok := b.compile(op, fe, fpath, src, opts)
			if !ok {
				good = false
				continue
			}
			exprs = append(exprs, &pb.NamedExpression{Name: fe.key, Expression: src})
			fields = append(fields, record.Field{Name: fe.key, Type: p.Type()})
		}
		if !good {
			return nil, false
		}
		if op.typ == "reduce" {
			op.pbOp.Spec = &pb.Operator_Reduce{Reduce: &pb.ReduceOperator{Fields: exprs}}
			return op.in, true
		}
		out, err := record.NewSchema(fields...)
		if err != nil {
			b.ps.add(e.line, path+".fields", "%v", err)
			return nil, false
		}
		op.pbOp.Spec = &pb.Operator_Map{Map: &pb.MapOperator{Fields: exprs}}
		return out, true
	case "filter", "fail", "key-by":
		key := map[string]string{"filter": "condition", "fail": "when", "key-by": "key"}[op.typ]
		e, ok := b.field(op, key, true)
		if !ok {
			return nil, false
		}
		src, ok := scalarString(e.val, path+"."+key, b.ps)
		if !ok {
			return nil, false
		}
		want := record.Bool
		if op.typ == "key-by" {
			want = record.Invalid
		}
		p, ok := b.compile(op, e, path+"."+key, src, expression.Options{Want: want})
		if !ok {
			return nil, false
		}
		switch op.typ {
		case "filter":
			op.pbOp.Spec = &pb.Operator_Filter{Filter: &pb.FilterOperator{Condition: src}}
		case "key-by":
			if p.Type() == record.Map {
				b.ps.add(e.line, path+".key", "a key cannot be a map; key by one of its entries, such as %s[\"name\"]", src)
				return nil, false
			}
			op.keyExp = p
		case "fail":
			f := &pb.FailOperator{When: src}
			if ae, has := b.field(op, "attempt", false); has {
				a, ok := scalarInt(ae.val, path+".attempt", b.ps)
				if !ok {
					return nil, false
				}
				if a < 0 {
					b.ps.add(ae.line, path+".attempt", "must not be negative, got %d", a)
					return nil, false
				}
				a32 := int32(a)
				f.Attempt = &a32
			}
			op.pbOp.Spec = &pb.Operator_Fail{Fail: f}
		}
		return op.in, true
	case "sum":
		e, ok := b.field(op, "field", true)
		if !ok {
			return nil, false
		}
		name, ok := scalarString(e.val, path+".field", b.ps)
		if !ok {
			return nil, false
		}
		i := op.in.Index(name)
		if i < 0 {
			msg := fmt.Sprintf("no field %q in the input %v", name, op.in)
			if s := suggest.Closest(name, fieldNames(op.in)); s != "" {
				msg += fmt.Sprintf("; did you mean %q?", s)
			}
			b.ps.add(e.line, path+".field", "%s", msg)
			return nil, false
		}
		if t := op.in.Field(i).Type; t != record.Int64 && t != record.Float64 {
			b.ps.add(e.line, path+".field", "field %q is %v; sum needs int64 or float64", name, t)
			return nil, false
		}
		op.pbOp.Spec = &pb.Operator_Sum{Sum: &pb.SumOperator{Field: name}}
		return op.in, true
	case "count":
		if op.in.Index("count") >= 0 {
			b.ps.add(op.line, path, "the input already has a field \"count\"; rename it with a map first")
			return nil, false
		}
		out, _ := record.NewSchema(append(op.in.Fields(), record.Field{Name: "count", Type: record.Int64})...)
		op.pbOp.Spec = &pb.Operator_Count{Count: &pb.CountOperator{}}
		return out, true
	case "print":
		op.pbOp.Spec = &pb.Operator_Print{Print: &pb.PrintSink{}}
		return nil, true
	case "discard":
		op.pbOp.Spec = &pb.Operator_Discard{Discard: &pb.DiscardSink{}}
		return nil, true
	case "file":
		e, ok := b.field(op, "path", true)
		if !ok {
			return nil, false
		}
		p, ok := scalarString(e.val, path+".path", b.ps)
		if !ok || strings.TrimSpace(p) == "" {
			if ok {
				b.ps.add(e.line, path+".path", "must not be empty")
			}
			return nil, false
		}
		if fe, has := b.field(op, "format", false); has {
			if f, ok := scalarString(fe.val, path+".format", b.ps); ok && f != "json" {
				b.ps.add(fe.line, path+".format", "unknown format %q (the file sink writes json)", f)
				return nil, false
			}
		}
		op.pbOp.Spec = &pb.Operator_File{File: &pb.FileSink{Path: p}}
		return nil, true
	case "kafka":
		if op.info.role == roleSource {
			return b.planKafkaSource(op)
		}
		return nil, b.planKafkaSink(op)
	}
	return b.planCustom(op)
}

func (b *builder) planCustom(op *specOp) (*record.Schema, bool) {
	fields := map[string]any{}
	for _, e := range op.fields.entries {
		var v any
		if err := e.val.Decode(&v); err != nil {
			b.ps.add(e.line, op.path+"."+e.key, "%v", err)
			return nil, false
		}
		fields[e.key] = v
	}
	raw, err := json.Marshal(fields)
	if err != nil {
		b.ps.add(op.line, op.path, "fields cannot be encoded as JSON: %v", err)
		return nil, false
	}
	// Decode the JSON again so Plan sees exactly what the TaskManager's New will see.
	fields = map[string]any{}
	_ = json.Unmarshal(raw, &fields)
	out, err := op.custom.Plan(fields, op.in)
	if err != nil {
		b.ps.add(op.line, op.path, "%v", err)
		return nil, false
	}
	if op.info.role == roleSink {
		out = nil
	} else if out == nil {
		b.ps.add(op.line, op.path, "custom operator %q returned no output schema", op.typ)
		return nil, false
	}
	op.pbOp.Spec = &pb.Operator_Custom{Custom: &pb.CustomOperator{FieldsJson: raw}}
	return out, true
}

func fieldNames(s *record.Schema) []string {
	out := make([]string, s.Len())
	for i := range out {
		out[i] = s.Field(i).Name
	}
	return out
}

// checkSinks reports operators whose output nobody reads.
func (b *builder) checkSinks() {
	consumed := map[*specOp]bool{}
	for _, op := range b.ops {
		for _, in := range op.inputs {
			consumed[in] = true
		}
	}
	hasSink := false
	for _, op := range b.ops {
		if op.info.role == roleSink {
			hasSink = true
		}
		if op.valid && op.info.role != roleSink && !consumed[op] {
			b.ps.add(op.line, op.path, "its output goes nowhere: add a sink (print, file, discard) that reads it")
		}
	}
	if !hasSink && len(b.ps.list) == 0 {
		b.ps.add(0, "operators", "a job needs at least one sink")
	}
}

// edge is a logical edge between two physical (non key-by) operators.
type edge struct {
	from, to *specOp
	part     pb.Partitioner
	key      *expression.Program
}

func (b *builder) graph(name string) *pb.JobGraph {
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
	g := &pb.JobGraph{Name: name, Config: b.cfg.Map(), JobConfig: b.jobCfg}
	vertexOf := map[*specOp]*pb.JobVertex{}
	for _, op := range physical {
		ins := in[op]
		if len(ins) == 1 && ins[0].part == pb.Partitioner_PARTITIONER_FORWARD && len(out[ins[0].from]) == 1 {
			v := vertexOf[ins[0].from]
			v.Operators = append(v.Operators, op.pbOp)
			v.Name += " -> " + op.name
			vertexOf[op] = v
			continue
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
		v := &pb.JobVertex{Id: int32(len(g.Vertices)), Name: op.name, Parallelism: int32(p), MaxParallelism: int32(mp), Operators: []*pb.Operator{op.pbOp}}
		g.Vertices = append(g.Vertices, v)
		vertexOf[op] = v
	}
	for _, e := range edges {
		src, dst := vertexOf[e.from], vertexOf[e.to]
		if src == dst {
			continue // chained
		}
		je := &pb.JobEdge{Source: src.Id, Target: dst.Id, Partitioner: e.part, Schema: e.from.out.Proto()}
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
