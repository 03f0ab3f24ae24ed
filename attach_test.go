package gated

import (
	"context"
	"sync/atomic"
	"testing"
)

// TestAttachFansOutAndDetaches: Observers attached to a Connector already made (as gatedprom's
// and gatedotel's are) each receive every event, beside Config.Observer; a detached one receives
// no more; detaching twice is harmless; and two attached Observers add no allocation per
// operation.
func TestAttachFansOutAndDetaches(t *testing.T) {
	var fromCfg, a, b atomic.Int64
	count := func(n *atomic.Int64) Observer {
		return ObserverFunc(func(e Event) {
			if e.Kind == EventAdmitted {
				n.Add(1)
			}
		})
	}
	db, c, _ := openObserved(t, "gate_max_conns=2", count(&fromCfg), nil)
	ctx := context.Background()
	ping := func(n int) {
		t.Helper()
		for range n {
			if err := db.PingContext(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	ping(1)
	detachA := c.Attach(count(&a))
	detachB := c.Attach(count(&b))
	ping(2)
	detachA()
	detachA()
	ping(3)
	detachB()
	ping(1)
	if got := [3]int64{fromCfg.Load(), a.Load(), b.Load()}; got != [3]int64{7, 2, 5} {
		t.Errorf("admitted events seen by Config.Observer, a, b = %v, want [7 2 5]", got)
	}
	c.Attach(nil)() // nothing attached, nothing to detach

	allocs := func() float64 {
		var v int
		return testing.AllocsPerRun(500, func() {
			if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&v); err != nil {
				t.Fatal(err)
			}
		})
	}
	one := allocs()
	defer c.Attach(count(&a))()
	defer c.Attach(count(&b))()
	if three := allocs(); three != one {
		t.Errorf("QueryRowContext allocates %v times with three Observers attached, %v with one", three, one)
	}
}
