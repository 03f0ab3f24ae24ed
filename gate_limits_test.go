package gated

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestGateLoweredBTakesNoPermitFromRunningWork: B lowered from 3 to 1 while 3 run and one waits.
// The running operations keep their permits; the first two releases return theirs instead of
// handing them to the waiter; new arrivals beyond the new B+Q are refused; only the third release
// serves the waiter.
func TestGateLoweredBTakesNoPermitFromRunningWork(t *testing.T) {
	g := newTestGate(3, 2, time.Minute)
	for range 3 {
		mustAcquire(t, g)
	}
	queued := acquireAsync(t, g, context.Background())
	g.setLimits(1, 1)
	if s := gateStats(g); s.Running != 3 || s.Waiting != 1 || s.Concurrent != 1 || s.Queue != 1 || g.withinLimits() {
		t.Fatalf("after lowering B to 1: %+v", s)
	}
	if _, err := g.acquire(context.Background()); !errors.Is(err, ErrAdmissionFull) {
		t.Fatalf("an arrival with 3 running and 1 waiting under B=1, Q=1: %v, want ErrAdmissionFull", err)
	}
	g.release(nil)
	g.release(nil)
	if s := gateStats(g); s.Running != 1 || s.Waiting != 1 || !g.withinLimits() {
		t.Fatalf("after two releases: running %d, waiting %d; want 1 and 1, the waiter not served while B is full", s.Running, s.Waiting)
	}
	select {
	case err := <-queued:
		t.Fatalf("the waiter was served while running was at the lowered B: %v", err)
	default:
	}
	g.release(nil)
	if err := <-queued; err != nil {
		t.Fatalf("the waiter after the third release: %v", err)
	}
	g.release(nil)
	if s := gateStats(g); s.Running != 0 || s.Waiting != 0 || s.Admitted != 4 {
		t.Fatalf("final: %+v", s)
	}
}

// TestGateRaisedBServesWaitersAtOnce: B raised from 1 to 3 with three waiting, one of them
// canceled: the two live waiters get permits in the same call, the canceled one none (I5).
func TestGateRaisedBServesWaitersAtOnce(t *testing.T) {
	g := newTestGate(1, 3, time.Minute)
	mustAcquire(t, g)
	first := acquireAsync(t, g, context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	gone := acquireAsync(t, g, ctx)
	third := acquireAsync(t, g, context.Background())
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled waiter: %v", err)
	}
	g.setLimits(3, 3)
	for i, ch := range []<-chan error{first, third} {
		if err := <-ch; err != nil {
			t.Fatalf("waiter %d after raising B: %v", i, err)
		}
	}
	if s := gateStats(g); s.Running != 3 || s.Waiting != 0 {
		t.Fatalf("after raising B: running %d, waiting %d", s.Running, s.Waiting)
	}
	for range 3 {
		g.release(nil)
	}
	if s := gateStats(g); s.Running != 0 || s.Admitted != 3 || s.Canceled != 1 {
		t.Fatalf("final: %+v", s)
	}
}

// TestGateWithoutBRefusesAtOnce: a share of no permits and no queue refuses every arrival at once.
func TestGateWithoutBRefusesAtOnce(t *testing.T) {
	g := newTestGate(2, 2, time.Minute)
	g.setLimits(0, 0)
	if _, err := g.acquire(context.Background()); !errors.Is(err, ErrAdmissionFull) {
		t.Fatalf("acquire with B=0, Q=0: %v, want ErrAdmissionFull", err)
	}
}
