package gated

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// newAutoGate returns a gate_concurrent=auto gate with ceiling b, starting at limit start.
func newAutoGate(b, q, start int, wait time.Duration) *gate {
	g := newTestGate(b, q, wait)
	g.autoLimit(true, 1)
	g.mu.Lock()
	g.setLimitLocked(start)
	g.mu.Unlock()
	return g
}

func setLimit(g *gate, n int) {
	g.mu.Lock()
	g.setLimitLocked(n)
	g.mu.Unlock()
}

func TestAutoGateStartsAtItsMinimum(t *testing.T) {
	g := newTestGate(8, 8, time.Second)
	g.autoLimit(true, 2)
	if s := gateStats(g); s.Concurrent != 2 {
		t.Errorf("Concurrent = %d, want the minimum 2", s.Concurrent)
	}
}

func TestAutoRaisedLimitServesWaitersAtOnce(t *testing.T) {
	g := newAutoGate(8, 8, 1, time.Minute)
	mustAcquire(t, g)
	first := acquireAsync(t, g, context.Background())
	second := acquireAsync(t, g, context.Background())
	setLimit(g, 3) // no release: the raise alone hands the two permits over
	for _, c := range []<-chan error{first, second} {
		if err := <-c; err != nil {
			t.Fatalf("waiter: %v", err)
		}
	}
	if s := gateStats(g); s.Running != 3 || s.Waiting != 0 || s.Concurrent != 3 {
		t.Errorf("stats = %+v, want 3 running, none waiting, limit 3", s)
	}
}

func TestAutoLoweredLimitTakesNoPermitAndHandsNoneOverUntilWithin(t *testing.T) {
	g := newAutoGate(8, 8, 3, time.Minute)
	for range 3 {
		mustAcquire(t, g)
	}
	queued := acquireAsync(t, g, context.Background())
	setLimit(g, 1)
	if s := gateStats(g); s.Running != 3 {
		t.Fatalf("lowering the limit changed running to %d", s.Running)
	}
	for i := range 2 {
		g.release(nil)
		if s := gateStats(g); s.Waiting != 1 || s.Running != 2-i {
			t.Fatalf("after release %d: running %d, waiting %d; want %d and 1: a permit above the limit passed on", i+1, s.Running, s.Waiting, 2-i)
		}
	}
	g.release(nil) // running 1, the limit: this permit passes on
	if err := <-queued; err != nil {
		t.Fatalf("waiter: %v", err)
	}
	if s := gateStats(g); s.Running != 1 || s.Waiting != 0 {
		t.Errorf("stats = %+v, want 1 running", s)
	}
}

func TestAutoQueueBoundRefusesAtOnceBeyondHalfAServiceTime(t *testing.T) {
	g := newAutoGate(8, 8, 2, time.Minute)
	g.mu.Lock()
	g.lim.service = 10 * time.Millisecond
	g.mu.Unlock()
	mustAcquire(t, g)
	mustAcquire(t, g)
	a := acquireAsync(t, g, context.Background()) // expected wait 10ms / 2: admitted
	// Second in line: expected wait 2 × 10ms / 2 > half of 10ms.
	if _, err := g.acquire(context.Background()); !errors.Is(err, ErrAdmissionTimeout) {
		t.Fatalf("second waiter: got %v, want ErrAdmissionTimeout at once", err)
	}
	if s := gateStats(g); s.RejectedTimeout != 1 || s.Waiting != 1 {
		t.Errorf("stats = %+v", s)
	}
	for range 3 {
		g.release(nil)
	}
	<-a
}

// In sustained overload the one waiter is the newest arrival: the one before it is refused.
func TestAutoGateInSustainedOverloadServesTheNewestArrival(t *testing.T) {
	g := newAutoGate(8, 8, 1, time.Minute)
	g.mu.Lock()
	g.lim.service, g.lim.sustained = 10*time.Millisecond, true
	g.mu.Unlock()
	mustAcquire(t, g)
	oldest := acquireAsync(t, g, context.Background())
	newest := make(chan error, 1)
	go func() {
		_, err := g.acquire(context.Background())
		newest <- err
	}()
	select {
	case err := <-oldest:
		if !errors.Is(err, ErrAdmissionTimeout) {
			t.Fatalf("the displaced waiter got %v, want ErrAdmissionTimeout", err)
		}
	case err := <-newest:
		t.Fatalf("the newest arrival got %v while the oldest kept waiting", err)
	}
	waitFor(t, "the newest arrival queued", func() bool { return gateStats(g).Waiting == 1 })
	g.release(nil)
	if err := <-newest; err != nil {
		t.Fatalf("the newest arrival: %v", err)
	}
	if s := gateStats(g); s.Running != 1 || s.Waiting != 0 || s.RejectedTimeout != 1 || s.Admitted != 2 {
		t.Errorf("stats = %+v, want 1 running, none waiting, 1 refused, 2 admitted", s)
	}
	g.release(nil)
}

// A waiter that is leaving because its context ended is taken off the queue by a refusal but
// reports its own cancellation, and counts as canceled, not as refused.
func TestRefusedWaiterWhoseContextEndedCountsAsCanceled(t *testing.T) {
	g := newTestGate(1, 1, time.Minute)
	mustAcquire(t, g)
	ctx, cancel := context.WithCancel(context.Background())
	leaving := acquireAsync(t, g, ctx)
	g.mu.Lock()
	cancel() // the waiter wakes and waits for the mutex
	g.refuseLocked(g.head)
	g.mu.Unlock()
	if err := <-leaving; !errors.Is(err, ErrWaitCanceled) || !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want the waiter's own cancellation", err)
	}
	if s := gateStats(g); s.Canceled != 1 || s.RejectedTimeout != 0 || s.Waiting != 0 {
		t.Errorf("stats = %+v, want 1 canceled, none refused, none waiting", s)
	}
	g.release(nil)
}

// A gate whose samples show flat service times under pressure climbs to its ceiling, through
// releaseSample, and one that fails fast does not move.
func TestAutoGateLearnsFromReleaseSamples(t *testing.T) {
	for _, c := range []struct {
		name string
		o    outcome
		want func(int) bool
	}{
		{"flat service", outcomeOK, func(n int) bool { return n == 8 }},
		{"fast failures", outcomeFailed, func(n int) bool { return n == 1 }},
		{"timeouts", outcomeOverload, func(n int) bool { return n == 1 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := newAutoGate(8, 8, 1, time.Minute)
			hold := 2 * time.Millisecond
			if c.o == outcomeFailed {
				hold = 10 * time.Microsecond
			}
			deadline := time.Now().Add(3 * time.Second) // windows close after windowMin of real time
			// Demand at the limit: every sample is taken with all permits held, and the
			// permit is taken again at once, with as many more as a raise allows.
			held := 0
			for time.Now().Before(deadline) {
				for ; held < gateStats(g).Concurrent; held++ {
					mustAcquire(t, g)
				}
				g.releaseSample(nil, monoNow(), hold, c.o)
				held--
				if c.o == outcomeOK && gateStats(g).Concurrent == 8 {
					break
				}
			}
			for ; held > 0; held-- {
				g.release(nil)
			}
			if got := gateStats(g).Concurrent; !c.want(got) {
				t.Errorf("limit %d after 3s of samples", got)
			}
		})
	}
}

// The invariants under churn: 10,000 callers come and go while the limit is driven up and down,
// in and out of sustained overload. A permit is never granted above the limit (an operation whose
// acquire saw no change of the limit finds running within it), running + waiting never exceeds
// the ceiling + Q, and everything is back when quiet.
func TestAutoLimitChurnKeepsInvariants(t *testing.T) {
	const ceiling, q, workers, perWorker = 8, 8, 100, 100
	g := newAutoGate(ceiling, q, 4, 2*time.Millisecond)
	var (
		epoch      atomic.Int64 // changes of the limit, made under g.mu
		violations atomic.Int64
		first      atomic.Value
	)
	check := func(since int64) {
		g.mu.Lock()
		defer g.mu.Unlock()
		if epoch.Load() == since && g.running > g.concurrent || g.running+g.waiting > ceiling+q || g.concurrent < 1 || g.concurrent > ceiling {
			violations.Add(1)
			first.CompareAndSwap(nil, fmt.Sprintf("running %d waiting %d limit %d, limit unchanged %v", g.running, g.waiting, g.concurrent, epoch.Load() == since))
		}
	}
	stop := make(chan struct{})
	var driver sync.WaitGroup
	driver.Go(func() {
		r := rand.New(rand.NewPCG(7, 7))
		for {
			select {
			case <-stop:
				return
			default:
			}
			g.mu.Lock()
			g.setLimitLocked(1 + r.IntN(ceiling))
			epoch.Add(1)
			// In and out of sustained overload, where an arrival displaces the one waiter.
			g.lim.sustained, g.lim.service = r.IntN(2) == 0, time.Duration(r.IntN(4000))*time.Microsecond
			g.mu.Unlock()
			time.Sleep(time.Duration(r.IntN(300)) * time.Microsecond)
		}
	})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 3))
			for range perWorker {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(r.IntN(3000))*time.Microsecond)
				since := epoch.Load()
				_, err := g.acquire(ctx)
				cancel()
				if err != nil {
					continue
				}
				check(since)
				time.Sleep(time.Duration(r.IntN(200)) * time.Microsecond)
				if r.IntN(2) == 0 {
					g.releaseSample(nil, monoNow(), time.Millisecond, outcomeOK)
				} else {
					g.release(nil)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	driver.Wait()
	if n := violations.Load(); n != 0 {
		t.Errorf("%d violations; first: %v", n, first.Load())
	}
	s := gateStats(g)
	if s.Running != 0 || s.Waiting != 0 {
		t.Errorf("after quiet: running %d, waiting %d", s.Running, s.Waiting)
	}
	if total := s.Admitted + s.RejectedFull + s.RejectedTimeout + s.Canceled; total != workers*perWorker {
		t.Errorf("outcomes add up to %d, want %d (%+v)", total, workers*perWorker, s)
	}
	for range s.Concurrent {
		mustAcquire(t, g)
	}
}

// errAllocProbe is a server error that says nothing about load, made once.
var errAllocProbe error = stateErr("23505")

// A failing call costs gate_concurrent=auto no allocation beyond what it costs a fixed gate
// (the observer's classification of server errors allocates on both).
func TestAutoAddsNoAllocationToAFailingCall(t *testing.T) {
	allocs := func(params string) float64 {
		_, c, _ := openFake(t, params)
		cn := &conn{c: c}
		ctx := context.Background()
		return testing.AllocsPerRun(1000, func() {
			if err := cn.run(ctx, false, func(*physConn) error { return errAllocProbe }); err != errAllocProbe {
				t.Fatal(err)
			}
			cn.unbind()
		})
	}
	fixed, auto := allocs("gate_max_conns=1"), allocs("gate_max_conns=1 gate_concurrent=auto")
	if auto > fixed {
		t.Errorf("a failing call allocates %v times with gate_concurrent=auto, %v with a fixed B", auto, fixed)
	}
}

// A fleet share is a hard bound for gate_concurrent=auto too: setLimits below
// gate_concurrent_min lowers the limit to the share, and raising it again lets the limiter grow
// only up to the new ceiling.
func TestSetLimitsBoundsAnAutoGateBelowItsMinimum(t *testing.T) {
	g := newTestGate(4, 4, time.Minute)
	g.autoLimit(true, 2)
	if s := gateStats(g); s.Concurrent != 2 {
		t.Fatalf("auto gate starts at Concurrent = %d, want its minimum 2", s.Concurrent)
	}
	for _, b := range []int{1, 0} {
		g.setLimits(b, b)
		if s := gateStats(g); s.Concurrent != b || s.Queue != b {
			t.Errorf("after setLimits(%d, %d): Concurrent = %d, Queue = %d", b, b, s.Concurrent, s.Queue)
		}
	}
	g.setLimits(3, 3)
	if s := gateStats(g); s.Concurrent < 2 || s.Concurrent > 3 {
		t.Errorf("after setLimits(3, 3): Concurrent = %d, want between the minimum 2 and the ceiling 3", s.Concurrent)
	}
}
