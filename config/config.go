package config

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/goflink/goflink/internal/suggest"
)

// Config is a set of validated key/value pairs. The zero value is not usable; use New.
// A Config is not safe for concurrent mutation; share it read-only once built.
type Config struct {
	values map[string]string
}

// New returns an empty Config: every key reads as its default.
func New() *Config { return &Config{values: map[string]string{}} }

// UnknownKeyError reports a key goflink does not know.
type UnknownKeyError struct {
	Key        string
	Suggestion string
}

func (e *UnknownKeyError) Error() string {
	if e.Suggestion != "" {
		return fmt.Sprintf("unknown config key %q; did you mean %q?", e.Key, e.Suggestion)
	}
	return fmt.Sprintf("unknown config key %q", e.Key)
}

// Set validates and stores one value.
func (c *Config) Set(key, value string) error {
	o, ok := byKey[key]
	if !ok {
		return &UnknownKeyError{Key: key, Suggestion: suggestKey(key)}
	}
	v, err := o.normalize(value)
	if err != nil {
		return fmt.Errorf("config key %q: %w", key, err)
	}
	c.values[o.Key] = v // an alias sets its key
	return nil
}

// SetAll sets every pair, stopping at nothing: it returns all errors joined and applies none of
// the pairs if any is invalid.
func (c *Config) SetAll(m map[string]string) error {
	staged := New()
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if err := staged.Set(k, m[k]); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	maps.Copy(c.values, staged.values)
	return nil
}

// Merge overlays o onto c: keys set in o win.
func (c *Config) Merge(o *Config) {
	maps.Copy(c.values, o.values)
}

// Clone returns an independent copy.
func (c *Config) Clone() *Config { return &Config{values: maps.Clone(c.values)} }

// Map returns the explicitly set keys and their canonical values.
func (c *Config) Map() map[string]string { return maps.Clone(c.values) }

// IsSet reports whether key (or an alias of it) was set explicitly.
func (c *Config) IsSet(key string) bool {
	if o, ok := byKey[key]; ok {
		key = o.Key
	}
	_, ok := c.values[key]
	return ok
}

func (c *Config) raw(key string, kind Kind) string {
	o, ok := byKey[key]
	if !ok || o.Kind != kind {
		panic(fmt.Sprintf("config: %q is not a registered key of kind %d", key, kind))
	}
	if v, ok := c.values[key]; ok {
		return v
	}
	return o.Default
}

// Int returns an integer key's value (its default when unset).
func (c *Config) Int(key string) int {
	n, _ := strconv.Atoi(c.raw(key, KindInt))
	return n
}

// Duration returns a duration key's value (its default when unset, 0 when it has none).
func (c *Config) Duration(key string) time.Duration {
	v := c.raw(key, KindDuration)
	if v == "" {
		return 0
	}
	d, _ := ParseDuration(v)
	return d
}

// String returns a string or enum key's value ("" when unset without default).
func (c *Config) String(key string) string {
	if o, ok := byKey[key]; ok && o.Kind == KindEnum {
		return c.raw(key, KindEnum)
	}
	return c.raw(key, KindString)
}

// Bool returns a true/false enum key's value.
func (c *Config) Bool(key string) bool { return c.raw(key, KindEnum) == "true" }

// ParseDynamic parses repeated "-D key=value" flags into a Config.
func ParseDynamic(pairs []string) (*Config, error) {
	c := New()
	var errs []error
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok {
			errs = append(errs, fmt.Errorf("-D %q: want key=value", p))
			continue
		}
		if err := c.Set(strings.TrimSpace(k), v); err != nil {
			errs = append(errs, fmt.Errorf("-D %s: %w", k, err))
		}
	}
	return c, errors.Join(errs...)
}

// LoadFile reads a Flink-style YAML config file: flat "key: value" lines or nested maps, which
// are flattened with dots. Errors name the key and its line.
func LoadFile(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config file: %w", err)
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	return c, nil
}

// Parse parses YAML config text (see LoadFile).
func Parse(data []byte) (*Config, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	c := New()
	if len(doc.Content) == 0 {
		return c, nil
	}
	var errs []error
	flatten(doc.Content[0], "", func(key string, n *yaml.Node) {
		value, err := scalarValue(key, n)
		if err != nil {
			errs = append(errs, fmt.Errorf("line %d: %s: %w", n.Line, key, err))
			return
		}
		if err := c.Set(key, value); err != nil {
			errs = append(errs, fmt.Errorf("line %d: %w", n.Line, err))
		}
	})
	if doc.Content[0].Kind != yaml.MappingNode {
		errs = append(errs, fmt.Errorf("line %d: want a map of config keys", doc.Content[0].Line))
	}
	return c, errors.Join(errs...)
}

// scalarValue is the value of a config file's key: a scalar, or for a list key (KindList) also
// a sequence of scalars, joined with ListSeparator.
func scalarValue(key string, n *yaml.Node) (string, error) {
	if n.Kind == yaml.ScalarNode {
		return n.Value, nil
	}
	if o, ok := byKey[key]; !ok || o.Kind != KindList || n.Kind != yaml.SequenceNode {
		return "", errors.New("want a scalar value")
	}
	elems := make([]string, len(n.Content))
	for i, e := range n.Content {
		if e.Kind != yaml.ScalarNode {
			return "", fmt.Errorf("element %d: want a scalar value", i+1)
		}
		if strings.Contains(e.Value, ListSeparator) {
			return "", fmt.Errorf("element %d %q contains the list separator %s", i+1, e.Value, ListSeparator)
		}
		elems[i] = e.Value
	}
	return strings.Join(elems, ListSeparator), nil
}

func flatten(n *yaml.Node, prefix string, visit func(string, *yaml.Node)) {
	if n.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key := n.Content[i].Value
		if prefix != "" {
			key = prefix + "." + key
		}
		v := n.Content[i+1]
		if v.Kind == yaml.MappingNode {
			// A known key takes a scalar, unless other keys lie under it
			// (execution.checkpointing.unaligned and its alias …unaligned.enabled).
			if _, known := byKey[key]; !known || hasKeysUnder(key) {
				flatten(v, key, visit)
				continue
			}
		}
		visit(key, v)
	}
}

// ValidateJob checks a job's config: known keys, valid values, and no process-only keys.
func ValidateJob(m map[string]string) error {
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if o, ok := byKey[k]; ok && o.Scope == ScopeProcess {
			errs = append(errs, fmt.Errorf("config key %q configures a JobManager or TaskManager process and cannot be set by a job", k))
			continue
		}
		if err := New().Set(k, m[k]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// JobDefaults returns the job-scope keys set in a cluster config (the defaults for every job).
func (c *Config) JobDefaults() *Config {
	out := New()
	for k, v := range c.values {
		if byKey[k].Scope == ScopeJob {
			out.values[k] = v
		}
	}
	return out
}

// hasKeysUnder reports whether a key or alias starts with prefix and a dot.
func hasKeysUnder(prefix string) bool {
	for k := range byKey {
		if strings.HasPrefix(k, prefix+".") {
			return true
		}
	}
	return false
}

func suggestKey(key string) string {
	keys := make([]string, len(options))
	for i, o := range options {
		keys[i] = o.Key
	}
	return suggest.Closest(key, keys)
}
