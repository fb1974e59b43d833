package operator

import (
	"encoding/json"
	"fmt"
	"sort"
	"sync"

	"github.com/goflink/goflink/record"
)

// Role says where a custom operator may stand in a job.
type Role int

// The roles of custom operators.
const (
	RoleTransform Role = iota
	RoleSink
)

// Custom describes a custom Go operator. Register it in the Registry of every JobManager (which
// validates specs) and TaskManager (which runs them) of the cluster.
type Custom struct {
	// Type is the name used in job specs.
	Type string
	Role Role
	// Keyed operators need a key-by input; ctx.Key() holds the record's key.
	Keyed bool
	// Plan validates the operator's own spec fields (decoded YAML: maps, lists, strings,
	// numbers, bools) and returns its output schema for the given input schema (nil for sinks).
	Plan func(fields map[string]any, in *record.Schema) (*record.Schema, error)
	// New builds one instance per subtask.
	New func(fields map[string]any, in, out *record.Schema) (Operator, error)
}

// Registry holds custom operators. It is safe for concurrent use.
type Registry struct {
	mu     sync.RWMutex
	custom map[string]Custom
}

// NewRegistry returns an empty registry (the built-in operators are always available).
func NewRegistry() *Registry { return &Registry{custom: map[string]Custom{}} }

// Register adds a custom operator; it fails for an empty, built-in or duplicate type.
func (r *Registry) Register(c Custom) error {
	if c.Type == "" || c.Plan == nil || c.New == nil {
		return fmt.Errorf("custom operator %q: Type, Plan and New are required", c.Type)
	}
	if IsBuiltin(c.Type) {
		return fmt.Errorf("custom operator %q: a built-in operator has that type", c.Type)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.custom[c.Type]; dup {
		return fmt.Errorf("custom operator %q: already registered", c.Type)
	}
	r.custom[c.Type] = c
	return nil
}

// Lookup returns the custom operator of a type.
func (r *Registry) Lookup(typ string) (Custom, bool) {
	if r == nil {
		return Custom{}, false
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	c, ok := r.custom[typ]
	return c, ok
}

// Types returns the registered custom types, sorted.
func (r *Registry) Types() []string {
	if r == nil {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.custom))
	for t := range r.custom {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

func (r *Registry) newCustom(typ string, fieldsJSON []byte, in, out *record.Schema) (Operator, error) {
	c, ok := r.Lookup(typ)
	if !ok {
		return nil, fmt.Errorf("custom operator type %q is not registered in this TaskManager", typ)
	}
	fields := map[string]any{}
	if len(fieldsJSON) > 0 {
		if err := json.Unmarshal(fieldsJSON, &fields); err != nil {
			return nil, fmt.Errorf("decode fields: %w", err)
		}
	}
	return c.New(fields, in, out)
}

// Builtin operator types, as written in job specs.
var builtins = []string{"sequence", "map", "filter", "key-by", "sum", "count", "reduce", "fail", "print", "file", "discard", "kafka"}

// Builtins returns the built-in operator types.
func Builtins() []string { return append([]string(nil), builtins...) }

// IsBuiltin reports whether typ is a built-in operator type.
func IsBuiltin(typ string) bool {
	for _, b := range builtins {
		if b == typ {
			return true
		}
	}
	return false
}
