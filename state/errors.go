package state

import "errors"

var (
	// ErrCorrupt says encoded state (a snapshot file or a stored value) is truncated or
	// malformed.
	ErrCorrupt = errors.New("state: corrupt encoded state")
	// ErrClosed says a keyed state backend was used after Close.
	ErrClosed = errors.New("state: keyed state backend is closed")
	// ErrNoCurrentKey says keyed state was accessed before SetCurrentKey.
	ErrNoCurrentKey = errors.New("state: keyed state accessed without a current key")
	// ErrKeyOutOfRange says the current key belongs to a key group the backend does not own:
	// the record was routed to the wrong subtask.
	ErrKeyOutOfRange = errors.New("state: key outside the backend's key groups")
	// ErrStateExists says a state name is already registered on the backend.
	ErrStateExists = errors.New("state: state name already registered")
)
