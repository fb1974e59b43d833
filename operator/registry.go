package operator

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

// Role says where an operator type stands in a job.
type Role int

// The roles of operator types.
const (
	// RoleTransform reads records and emits records.
	RoleTransform Role = iota
	// RoleSink reads records and emits none.
	RoleSink
	// RoleSource reads no input.
	RoleSource
	// RoleKeyBy partitions its input by a key for the keyed operators that read it; it runs no
	// code of its own (the key is computed by the producers' network writers).
	RoleKeyBy
)

// Type describes an operator type once: its name in job specs, its role, its fields, how
// the job builder checks them and derives what it emits (Plan), and how a TaskManager builds
// one instance per subtask (New). Build one with Define. The engine's built-in types are in
// the table builtins; connectors and custom operators are registered in a Registry.
type Type struct {
	// Name is the type as written in job specs.
	Name string
	Role Role
	// Keyed types keep state per key and need a key-by input; Context.Key() holds the key of
	// the record being processed.
	Keyed bool
	// KeyedHint is added to the problem of a Keyed type that reads a non-keyed input.
	KeyedHint string
	// Global types run in one subtask: their parallelism is 1 whatever the job's, a spec
	// setting more is a problem, and a rescale leaves it. A transform reads its whole
	// non-keyed stream there, keyed by one constant key, so that it has keyed state and timers
	// (window-all); a source reads an input that cannot be split (postgres-cdc: one replication
	// slot).
	Global bool
	// ChangelogField, when set, makes the type a changelog source: its records are the
	// changes of a table's rows, that field holding the kind of change (postgres-cdc's "op"),
	// and their order per row is what a reader applies. An operator that keeps the field emits
	// the changelog on; the job builder refuses a rebalance edge (to another parallelism,
	// without a key-by) out of any of them, which would reorder the changes of a row.
	ChangelogField string
	// NotRescalable types cannot redistribute their state to another parallelism: a rescale
	// (flinkctl rescale) leaves their vertex's parallelism as it is.
	NotRescalable bool
	// Inputs, when > 0, is the number of distinct inputs the type reads (a join's left and
	// right), each with its own schema (Planner.Ins); its runtime implements TwoInput. With 0
	// an operator reads any number of inputs of one schema, as one stream.
	Inputs int
	// SideOutputs are the names of the type's side outputs, which readers name as inputs
	// "<operator>.<side>" (a window's "late"); each emits records of the operator's input.
	SideOutputs []string
	// Fields are the spec fields the type takes besides name, type, inputs and parallelism;
	// any other field is reported as unknown. Nil takes any field (the type checks them).
	Fields []string
	// WithInputs, when set, is the type as it is used when the operator reads inputs: the
	// "kafka" type is a source without inputs and a sink with them.
	WithInputs *Type
	// Probed types check an operator against the external system it connects to when its job
	// is submitted (a table's columns, a server's settings): the JobManager, which plans specs
	// without the connector's client, asks a TaskManager to run the probe that Probes adds to
	// the runtime there, with that TaskManager's network and the secrets it holds.
	Probed bool

	plan   func(p *Planner) ([]byte, *Shape)
	run    func(cfg []byte, in, out *record.Schema) (any, error)
	probe  func(ctx context.Context, cfg []byte, in, out *record.Schema) error
	config func(cfg []byte) (any, error) // the decoded configuration, for PathNamer and LocationNamer
}

// LocalPath is a path on a process's file system that an operator's configuration names. A
// job runs with its processes' privileges, so the JobManager (at submit) and every
// TaskManager (before a task opens) confine these to their io.allowed-paths.
type LocalPath struct {
	// Field is the spec field that names the path: "path", "properties.ssl.ca.location".
	Field string
	Path  string
	// Output says the operator writes into the directory Path and owns it (the file sink):
	// no other sink of any running job may name the same directory. Otherwise the operator
	// reads the file Path.
	Output bool
}

// PathNamer is implemented by the configuration of an operator type (Define's C) that names
// local paths. A type whose configuration names a path must implement it, or its paths are
// not confined.
type PathNamer interface {
	LocalPaths() []LocalPath
}

// Location is a storage location that is no local path, an s3://bucket/prefix URI, that an
// operator's configuration names. The processes reach it with their S3 settings (s3.*), so
// io.allowed-paths does not confine it; the JobManager probes it at submit (storage.Probe),
// so that a missing bucket or refused credentials refuse the job before anything runs.
type Location struct {
	// Field is the spec field that names the location: "path".
	Field string
	URI   string
	// Output says the operator writes under the location and owns it (the file sink).
	Output bool
}

// LocationNamer is implemented by the configuration of an operator type (Define's C) that
// names storage locations (see Location).
type LocationNamer interface {
	Locations() []Location
}

// Define completes t with its planning and its runtime over a configuration C, a value that
// encodes to JSON (the job graph stores it). plan checks the operator's fields, reporting
// every problem through the Planner, and returns the configuration and what the operator
// emits as far as it is known (nil for a sink). run builds the Source or Operator of one
// subtask from the configuration; nil for a type that only plans (a connector's description
// in a process that does not run it, see Runs).
func Define[C any](t Type, plan func(p *Planner) (C, *Shape), run func(c C, in, out *record.Schema) (any, error)) Type {
	t.plan = func(p *Planner) ([]byte, *Shape) {
		c, out := plan(p)
		b, err := json.Marshal(c)
		if err != nil {
			p.Problemf("configuration cannot be encoded: %v", err)
		}
		return b, out
	}
	t.config = func(cfg []byte) (any, error) {
		var c C
		if err := json.Unmarshal(cfg, &c); err != nil {
			return nil, fmt.Errorf("decode configuration: %w", err)
		}
		return c, nil
	}
	if run != nil {
		t = Runs(t, run)
	}
	return t
}

// LocalPaths returns the local paths an operator of this type with configuration cfg (as its
// plan stored it in the job graph) names; see PathNamer.
func (t Type) LocalPaths(cfg []byte) ([]LocalPath, error) {
	if t.config == nil {
		return nil, nil
	}
	c, err := t.config(cfg)
	if err != nil {
		return nil, err
	}
	if n, ok := c.(PathNamer); ok {
		return n.LocalPaths(), nil
	}
	return nil, nil
}

// Locations returns the storage locations an operator of this type with configuration cfg
// names; see LocationNamer.
func (t Type) Locations(cfg []byte) ([]Location, error) {
	if t.config == nil {
		return nil, nil
	}
	c, err := t.config(cfg)
	if err != nil {
		return nil, err
	}
	if n, ok := c.(LocationNamer); ok {
		return n.Locations(), nil
	}
	return nil, nil
}

// Runs returns t with run as its runtime (see Define). A connector describes its types in a
// package without its client library, which JobManagers link to check specs, and adds the
// runtime in the package TaskManagers link.
func Runs[C any](t Type, run func(c C, in, out *record.Schema) (any, error)) Type {
	t.run = func(cfg []byte, in, out *record.Schema) (any, error) {
		var c C
		if err := json.Unmarshal(cfg, &c); err != nil {
			return nil, fmt.Errorf("decode configuration: %w", err)
		}
		return run(c, in, out)
	}
	return t
}

// Probes returns t with probe as the check of its operators at submit (see Type.Probed),
// which it sets. probe reports what is wrong with the external system for this
// configuration in words a user acts on; the JobManager names the operator and its line.
func Probes[C any](t Type, probe func(ctx context.Context, c C, in, out *record.Schema) error) Type {
	t.Probed = true
	t.probe = func(ctx context.Context, cfg []byte, in, out *record.Schema) error {
		var c C
		if err := json.Unmarshal(cfg, &c); err != nil {
			return fmt.Errorf("decode configuration: %w", err)
		}
		return probe(ctx, c, in, out)
	}
	return t
}

// Plan runs the type's planning (the job builder calls it): the configuration to store in
// the job graph, and what the operator emits.
func (t Type) Plan(p *Planner) ([]byte, *Shape) {
	if t.plan == nil {
		p.Problemf("operator type %q cannot be planned (it was registered without Define)", t.Name)
		return nil, UnknownShape()
	}
	return t.plan(p)
}

// builtins are the engine's own operator types, in the order they are listed to users. Each
// is defined in the file of its runtime.
var builtins = []Type{Sequence, Map, Filter, KeyBy, Watermark, Window, WindowAll, WindowJoin, IntervalJoin, Sum, Count, Reduce, Fail, Throttle, Print, File, Discard}

// Registry maps type names to operator types: the built-in ones and those registered
// (connectors, custom operators). It is safe for concurrent use. A JobManager plans specs with
// its Registry, a TaskManager runs tasks with its own: register the same types in both (a
// connector's description in the one, its runtime in the other).
type Registry struct {
	mu    sync.RWMutex
	types map[string]Type
	names []string // in registration order, built-in types first
}

// NewRegistry returns a registry of the built-in types and these types.
func NewRegistry(types ...Type) (*Registry, error) {
	r := &Registry{types: map[string]Type{}}
	for _, t := range builtins {
		r.add(t)
	}
	if err := r.Register(types...); err != nil {
		return nil, err
	}
	return r, nil
}

// MustRegistry is NewRegistry for types known to be valid; it panics on an error.
func MustRegistry(types ...Type) *Registry {
	r, err := NewRegistry(types...)
	if err != nil {
		panic(err)
	}
	return r
}

// Register adds operator types; it fails, adding none, for a type without a name or plan,
// or whose name is taken.
func (r *Registry) Register(types ...Type) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	for _, t := range types {
		switch _, taken := r.types[t.Name]; {
		case t.Name == "" || t.plan == nil:
			return fmt.Errorf("operator type %q: a name is required and it must be built with operator.Define", t.Name)
		case taken || seen[t.Name]:
			return fmt.Errorf("operator type %q: already registered", t.Name)
		}
		seen[t.Name] = true
	}
	for _, t := range types {
		r.add(t)
	}
	return nil
}

func (r *Registry) add(t Type) {
	r.types[t.Name] = t
	r.names = append(r.names, t.Name)
}

// Lookup returns the type of a name.
func (r *Registry) Lookup(name string) (Type, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	t, ok := r.types[name]
	return t, ok
}

// Names returns the names of every type, built-in ones first.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Clone(r.names)
}

// New builds the runtime of one operator of a job graph: a Source or an Operator.
func (r *Registry) New(op *pb.Operator) (any, error) {
	in, err := optionalSchema(op.GetInputSchema())
	if err != nil {
		return nil, fmt.Errorf("operator %q: input schema: %w", op.GetName(), err)
	}
	out, err := optionalSchema(op.GetOutputSchema())
	if err != nil {
		return nil, fmt.Errorf("operator %q: output schema: %w", op.GetName(), err)
	}
	t, ok := r.typeOf(op)
	switch {
	case !ok:
		return nil, fmt.Errorf("operator %q: type %q is not registered in this TaskManager", op.GetName(), op.GetType())
	case t.run == nil:
		return nil, fmt.Errorf("operator %q: type %q cannot run in this process (only its description is registered)", op.GetName(), op.GetType())
	}
	o, err := t.run(op.GetConfig(), in, out)
	if err != nil {
		return nil, fmt.Errorf("operator %q: %w", op.GetName(), err)
	}
	return o, nil
}

// Probed says an operator of a job graph is to be probed at submit (Type.Probed).
func (r *Registry) Probed(op *pb.Operator) bool {
	t, ok := r.typeOf(op)
	return ok && t.Probed
}

// Probe runs the probe of an operator of a job graph (see Probes); nil for a type without
// one. The error does not name the operator: the caller does.
func (r *Registry) Probe(ctx context.Context, op *pb.Operator) error {
	t, ok := r.typeOf(op)
	switch {
	case !ok:
		return fmt.Errorf("type %q is not registered in this TaskManager", op.GetType())
	case t.probe == nil:
		return nil
	}
	in, err := optionalSchema(op.GetInputSchema())
	if err != nil {
		return fmt.Errorf("input schema: %w", err)
	}
	out, err := optionalSchema(op.GetOutputSchema())
	if err != nil {
		return fmt.Errorf("output schema: %w", err)
	}
	return t.probe(ctx, op.GetConfig(), in, out)
}

// typeOf returns the type an operator of a job graph runs as: for a type that is used
// differently with inputs (Type.WithInputs), that one when the operator reads inputs.
func (r *Registry) typeOf(op *pb.Operator) (Type, bool) {
	t, ok := r.Lookup(op.GetType())
	if ok && op.GetInputSchema() != nil && t.WithInputs != nil {
		t = *t.WithInputs
	}
	return t, ok
}

// LocalPaths returns the local paths an operator of a job graph names (see PathNamer).
func (r *Registry) LocalPaths(op *pb.Operator) ([]LocalPath, error) {
	t, ok := r.typeOf(op)
	if !ok {
		return nil, fmt.Errorf("operator %q: type %q is not registered", op.GetName(), op.GetType())
	}
	paths, err := t.LocalPaths(op.GetConfig())
	if err != nil {
		return nil, fmt.Errorf("operator %q: %w", op.GetName(), err)
	}
	return paths, nil
}

// Locations returns the storage locations an operator of a job graph names (see
// LocationNamer).
func (r *Registry) Locations(op *pb.Operator) ([]Location, error) {
	t, ok := r.typeOf(op)
	if !ok {
		return nil, fmt.Errorf("operator %q: type %q is not registered", op.GetName(), op.GetType())
	}
	locs, err := t.Locations(op.GetConfig())
	if err != nil {
		return nil, fmt.Errorf("operator %q: %w", op.GetName(), err)
	}
	return locs, nil
}

func optionalSchema(p *pb.Schema) (*record.Schema, error) {
	if p == nil {
		return nil, nil
	}
	return record.SchemaFromProto(p)
}
