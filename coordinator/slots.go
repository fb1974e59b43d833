package coordinator

import "slices"

// freeSlots is the free capacity of one TaskManager, input to assignSlots.
type freeSlots struct {
	tm   string // registration ID
	free []int  // free slot indexes, ascending
}

// assignSlots picks n slots spread across TaskManagers: each pick takes the lowest free slot
// of the TaskManager with the most free slots (ties broken by order in tms). It returns nil if
// fewer than n slots are free. It is pure: the caller reserves the result.
func assignSlots(tms []freeSlots, n int) []slotRef {
	total := 0
	for _, t := range tms {
		total += len(t.free)
	}
	if n <= 0 || total < n {
		return nil
	}
	left := make([][]int, len(tms))
	for i, t := range tms {
		left[i] = slices.Sorted(slices.Values(t.free))
	}
	out := make([]slotRef, 0, n)
	for len(out) < n {
		best := -1
		for i := range left {
			if len(left[i]) > 0 && (best < 0 || len(left[i]) > len(left[best])) {
				best = i
			}
		}
		out = append(out, slotRef{tm: tms[best].tm, slot: left[best][0]})
		left[best] = left[best][1:]
	}
	return out
}

// slotRef names one slot of one TaskManager registration.
type slotRef struct {
	tm   string
	slot int
}
