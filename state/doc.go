// Package state holds keyed-state primitives. Today that is key groups: the stable, seedless
// key hash and Flink's key-group formulas that both routing (the hash partitioner) and state
// ownership use, so that they always agree.
package state
