package state

import (
	"syscall"
	"testing"
	"time"

	"github.com/goflink/goflink/record"
)

func cpuNow() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_THREAD, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestZZCPU(t *testing.T) {
	const keys = 10000
	ks := make([]record.Value, keys)
	for i := range ks {
		ks[i] = record.IntValue(int64(i) * 7919)
	}
	for _, kind := range kinds {
		be := newBackend(t, kind, record.Int64, fullRange, 0)
		vs, _ := NewValueState(be, "v", Int64Codec{})
		for _, k := range ks {
			be.SetCurrentKey(k)
			vs.Update(1)
		}
		const n = 20_000_000
		for _, mode := range []string{"update", "get-update", "setkey-only"} {
			best := time.Hour
			for range 3 {
				c0 := cpuNow()
				for i := range n {
					be.SetCurrentKey(ks[i%keys])
					switch mode {
					case "update":
						vs.Update(int64(i))
					case "get-update":
						v, _, _ := vs.Value()
						vs.Update(v + 1)
					}
				}
				best = min(best, cpuNow()-c0)
			}
			t.Logf("%s %s: %.1f ns/op CPU", kind, mode, float64(best)/n)
		}
	}
}
