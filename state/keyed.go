package state

import (
	"errors"
	"fmt"

	"github.com/goflink/goflink/record"
)

// ValueState is a single value per key.
//
// Every keyed state (ValueState, ListState, MapState, ReducingState) is registered on a
// backend under a name unique in that backend, and every access refers to the backend's
// current key (SetCurrentKey). Like the backend, a state belongs to the task's goroutine and
// must not be used after the backend's Close. Accessing a state without a current key
// (ErrNoCurrentKey) or with a key outside the backend's key groups (ErrKeyOutOfRange) returns
// an error, as do storage failures of the bbolt backend.
//
// Values of reference types (record.Row, []byte, slices) handed to a state or returned by it
// must not be modified afterwards: the hashmap backend keeps them as they are, and a snapshot
// may be encoding them on another goroutine. Appending to a value read from a state and
// handing the result back (Update) is allowed: what lies beyond a value's length is not part
// of it, so an append that writes into the same backing array changes nothing a snapshot sees.
type ValueState[T any] struct {
	s  valueStore[T]
	hm *hmValue[T] // s, when the backend is a hashmap: a direct call per access
}

// ListState is a list of values per key.
type ListState[T any] struct{ s listStore[T] }

// MapState is a map per key.
type MapState[K comparable, V any] struct{ s mapStore[K, V] }

// ReducingState is a value per key that Add folds new values into with a reduce function.
type ReducingState[T any] struct {
	s      valueStore[T]
	hm     *hmValue[T] // s, when the backend is a hashmap
	reduce func(acc, v T) T
}

type valueStore[T any] interface {
	get() (T, bool, error)
	set(v T) error
	clear() error
	keys() ([]record.Value, error)
}

type listStore[T any] interface {
	get() ([]T, error)
	add(v T) error
	update(vs []T) error
	clear() error
}

type mapStore[K comparable, V any] interface {
	keys() ([]record.Value, error)
	get(k K) (V, bool, error)
	getForUpdate(k K) (V, bool, error)
	put(k K, v V) error
	remove(k K) error
	forEach(fn func(K, V) bool) error
	clear() error
}

// NewValueState registers a value state named name on b. Restored entries of that name become
// visible. It fails when the name is taken or was restored as another kind of state, or when
// restored entries do not decode.
func NewValueState[T any](b KeyedBackend, name string, c Codec[T]) (*ValueState[T], error) {
	s, err := newValueStore(b, name, kindValue, c)
	if err != nil {
		return nil, err
	}
	hm, _ := s.(*hmValue[T])
	return &ValueState[T]{s: s, hm: hm}, nil
}

// NewReducingState registers a reducing state named name on b; see NewValueState.
func NewReducingState[T any](b KeyedBackend, name string, c Codec[T], reduce func(acc, v T) T) (*ReducingState[T], error) {
	if reduce == nil {
		return nil, fmt.Errorf("state %q: nil reduce function", name)
	}
	s, err := newValueStore(b, name, kindReducing, c)
	if err != nil {
		return nil, err
	}
	hm, _ := s.(*hmValue[T])
	return &ReducingState[T]{s: s, hm: hm, reduce: reduce}, nil
}

func newValueStore[T any](b KeyedBackend, name string, kind stateKind, c Codec[T]) (valueStore[T], error) {
	if c == nil {
		return nil, fmt.Errorf("state %q: nil codec", name)
	}
	return newStore(b, name,
		func(b *hashMapBackend) (valueStore[T], error) { return newHMValue(b, name, kind, c) },
		func(b *boltBackend) (valueStore[T], error) { return newBoltValue(b, name, kind, c) })
}

// NewListState registers a list state named name on b; see NewValueState.
func NewListState[T any](b KeyedBackend, name string, c Codec[T]) (*ListState[T], error) {
	if c == nil {
		return nil, fmt.Errorf("state %q: nil codec", name)
	}
	s, err := newStore(b, name,
		func(b *hashMapBackend) (listStore[T], error) { return newHMList(b, name, c) },
		func(b *boltBackend) (listStore[T], error) { return newBoltList(b, name, c) })
	if err != nil {
		return nil, err
	}
	return &ListState[T]{s: s}, nil
}

// NewMapState registers a map state named name on b; see NewValueState. kc encodes the user
// keys: two keys must be equal exactly when their encodings are.
func NewMapState[K comparable, V any](b KeyedBackend, name string, kc Codec[K], vc Codec[V]) (*MapState[K, V], error) {
	if kc == nil || vc == nil {
		return nil, fmt.Errorf("state %q: nil codec", name)
	}
	s, err := newStore(b, name,
		func(b *hashMapBackend) (mapStore[K, V], error) { return newHMMap(b, name, kc, vc) },
		func(b *boltBackend) (mapStore[K, V], error) { return newBoltMap(b, name, kc, vc) })
	if err != nil {
		return nil, err
	}
	return &MapState[K, V]{s: s}, nil
}

// newStore registers a state on b with the constructor of b's kind.
func newStore[S any](b KeyedBackend, name string, hm func(*hashMapBackend) (S, error), bolt func(*boltBackend) (S, error)) (S, error) {
	switch b := b.(type) {
	case *hashMapBackend:
		return hm(b)
	case *boltBackend:
		return bolt(b)
	}
	var zero S
	return zero, fmt.Errorf("state %q: unsupported keyed backend %T", name, b)
}

// Value returns the current key's value, and false when it has none.
func (s *ValueState[T]) Value() (T, bool, error) {
	if s.hm != nil {
		return s.hm.get()
	}
	return s.s.get()
}

// Update sets the current key's value.
func (s *ValueState[T]) Update(v T) error {
	if s.hm != nil {
		return s.hm.set(v)
	}
	return s.s.set(v)
}

// Clear removes the current key's value.
func (s *ValueState[T]) Clear() error { return s.s.clear() }

// Keys returns every key that has a value, in no particular order (a timer service rebuilds
// its queue from them after a restore). It reads the whole state: use it at initialization,
// not per record.
func (s *ValueState[T]) Keys() ([]record.Value, error) { return s.s.keys() }

// Get returns the current key's list (nil when empty). The slice is the caller's.
func (s *ListState[T]) Get() ([]T, error) { return s.s.get() }

// Add appends v to the current key's list.
func (s *ListState[T]) Add(v T) error { return s.s.add(v) }

// Update replaces the current key's list with a copy of vs; an empty vs clears it.
func (s *ListState[T]) Update(vs []T) error { return s.s.update(vs) }

// Clear removes the current key's list.
func (s *ListState[T]) Clear() error { return s.s.clear() }

// Get returns the value of user key k under the current key, and false when absent.
func (s *MapState[K, V]) Get(k K) (V, bool, error) { return s.s.get(k) }

// Put sets user key k to v under the current key.
func (s *MapState[K, V]) Put(k K, v V) error { return s.s.put(k, v) }

// GetForUpdate is Get for a read-modify-write: the caller may modify the value it returns
// in place (a row's fields) and must then hand it back with Put, before any other access to
// the state. The hashmap backend first settles what a pending snapshot needs of the key's
// key group, so that the change cannot reach it; the bbolt backend returns a copy.
func (s *MapState[K, V]) GetForUpdate(k K) (V, bool, error) { return s.s.getForUpdate(k) }

// Remove deletes user key k under the current key.
func (s *MapState[K, V]) Remove(k K) error { return s.s.remove(k) }

// Keys returns every key whose map has an entry, in no particular order (an operator
// rebuilds what it keeps in memory from them after a restore). It reads the whole state: use
// it at initialization, not per record.
func (s *MapState[K, V]) Keys() ([]record.Value, error) { return s.s.keys() }

// Range calls fn for every entry of the current key's map, in no particular order, until fn
// returns false. fn must not modify this MapState (other states may be used).
func (s *MapState[K, V]) Range(fn func(K, V) bool) error { return s.s.forEach(fn) }

// Clear removes the current key's whole map.
func (s *MapState[K, V]) Clear() error { return s.s.clear() }

// Get returns the current key's accumulated value, and false when nothing was added.
func (s *ReducingState[T]) Get() (T, bool, error) { return s.s.get() }

// Add folds v into the current key's value: reduce(acc, v), or v for the first value.
func (s *ReducingState[T]) Add(v T) error {
	if s.hm != nil {
		acc, ok, err := s.hm.get()
		if err != nil {
			return err
		}
		if ok {
			v = s.reduce(acc, v)
		}
		return s.hm.set(v)
	}
	acc, ok, err := s.s.get()
	if err != nil {
		return err
	}
	if ok {
		v = s.reduce(acc, v)
	}
	return s.s.set(v)
}

// Clear removes the current key's value.
func (s *ReducingState[T]) Clear() error { return s.s.clear() }

// checkRegister checks that a state can be registered under name on a backend.
func checkRegister(name string, closed, exists bool) error {
	switch {
	case name == "":
		return errors.New("empty state name")
	case closed:
		return fmt.Errorf("state %q: %w", name, ErrClosed)
	case exists:
		return fmt.Errorf("state %q: %w", name, ErrStateExists)
	}
	return nil
}
