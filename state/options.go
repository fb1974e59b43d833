package state

import (
	"errors"
	"fmt"

	"github.com/goflink/goflink/record"
)

// Defaults of the bbolt backend.
const (
	// DefaultCacheEntries bounds the bbolt backend's write-back cache: it is flushed in one
	// transaction when it holds more dirty entries than this.
	DefaultCacheEntries = 64 << 10
	// DefaultMmapSize is the bbolt backend's initial mmap size. bbolt must re-map the file
	// when it outgrows the mapping, and a re-map waits for every read transaction, including
	// a snapshot being written: below this size writes never wait for a snapshot upload. It
	// reserves address space only; the file grows with the data.
	DefaultMmapSize = 1 << 30
)

// KeyedBackendOptions configures NewKeyedBackend.
type KeyedBackendOptions struct {
	// Kind is BackendHashMap (in memory; the default when empty) or BackendBBolt (a local
	// bbolt file with a write-back cache).
	Kind string
	// KeyType is the type of the keys.
	KeyType record.Type
	// MaxParallelism is the number of key groups of the operator.
	MaxParallelism int
	// Range is the key groups this backend owns (RangeForOperator).
	Range KeyGroupRange
	// Dir is where the bbolt backend creates its working file (a unique name, removed on
	// Close). Required for bbolt, unused for hashmap.
	Dir string
	// CacheEntries bounds the bbolt write-back cache; 0 means DefaultCacheEntries.
	CacheEntries int
	// MmapSize is bbolt's initial mmap size in bytes; 0 means DefaultMmapSize.
	MmapSize int
}

// Validate checks the options.
func (o KeyedBackendOptions) Validate() error {
	var errs []error
	switch o.Kind {
	case "", BackendHashMap, BackendBBolt:
	default:
		errs = append(errs, fmt.Errorf("unknown state backend %q (valid: %q, %q)", o.Kind, BackendHashMap, BackendBBolt))
	}
	if o.KeyType <= record.Invalid || o.KeyType > record.Timestamp {
		errs = append(errs, fmt.Errorf("invalid key type %s", o.KeyType))
	}
	if err := ValidateMaxParallelism(o.MaxParallelism, 1); err != nil {
		errs = append(errs, err)
	} else if o.Range.Start < 0 || o.Range.Start > o.Range.End || o.Range.End >= o.MaxParallelism {
		errs = append(errs, fmt.Errorf("key-group range %d..%d not within 0..%d", o.Range.Start, o.Range.End, o.MaxParallelism-1))
	}
	if o.Kind == BackendBBolt && o.Dir == "" {
		errs = append(errs, errors.New("bbolt backend needs a working directory (Dir)"))
	}
	if o.CacheEntries < 0 {
		errs = append(errs, fmt.Errorf("negative cache entries %d", o.CacheEntries))
	}
	if o.MmapSize < 0 {
		errs = append(errs, fmt.Errorf("negative mmap size %d", o.MmapSize))
	}
	return errors.Join(errs...)
}

// NewKeyedBackend creates a keyed state backend. Register states on it with NewValueState,
// NewListState, NewMapState and NewReducingState.
func NewKeyedBackend(o KeyedBackendOptions) (KeyedBackend, error) {
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("keyed state backend: %w", err)
	}
	if o.Kind == BackendBBolt {
		return newBoltBackend(o)
	}
	return newHashMapBackend(o), nil
}

// keyContext is the current key of a backend and where its key group lies in the range.
type keyContext struct {
	keyType record.Type
	maxP    int
	rng     KeyGroupRange
	grouper KeyGrouper

	key    record.Value
	hasKey bool
	kg     int // key group of key
	kgIdx  int // kg - rng.Start, -1 when there is no key or kg is outside rng, kgUnknown
}

// kgUnknown is keyContext.kgIdx while the current key's key group is not computed yet
// (setKeyLazy).
const kgUnknown = -2

func newKeyContext(o KeyedBackendOptions) keyContext {
	return keyContext{keyType: o.KeyType, maxP: o.MaxParallelism, rng: o.Range, grouper: NewKeyGrouper(o.KeyType, o.MaxParallelism), kgIdx: -1}
}

func (c *keyContext) setKey(k record.Value) {
	c.key = k
	c.hasKey = true
	c.kg = c.grouper.KeyGroup(k)
	if c.rng.Contains(c.kg) {
		c.kgIdx = c.kg - c.rng.Start
	} else {
		c.kgIdx = -1
	}
}

// setKeyLazy sets the current key, leaving its key group to be computed when group asks for
// it: a read of a key that a state holds needs none.
func (c *keyContext) setKeyLazy(k record.Value) {
	c.key = k
	c.hasKey = true
	c.kgIdx = kgUnknown
}

// CurrentKey returns the current key (as given to SetCurrentKey, not cloned).
func (c *keyContext) CurrentKey() record.Value { return c.key }

// KeyGroupRange returns the key groups the backend owns.
func (c *keyContext) KeyGroupRange() KeyGroupRange { return c.rng }

// group returns the index of the current key's key group in the range.
func (c *keyContext) group() (int, error) {
	if c.kgIdx < 0 {
		return c.groupSlow()
	}
	return c.kgIdx, nil
}

func (c *keyContext) groupSlow() (int, error) {
	if c.kgIdx == kgUnknown {
		c.setKey(c.key)
		if c.kgIdx >= 0 {
			return c.kgIdx, nil
		}
	}
	return 0, c.keyError()
}

func (c *keyContext) keyError() error {
	if !c.hasKey {
		return ErrNoCurrentKey
	}
	return fmt.Errorf("%w: key %s is in key group %d, the backend owns %d..%d",
		ErrKeyOutOfRange, c.key.Format(c.keyType), c.kg, c.rng.Start, c.rng.End)
}
