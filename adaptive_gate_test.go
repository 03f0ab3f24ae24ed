package gated

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatedsql/gated/internal/fakedb"
	"github.com/gatedsql/gated/internal/testwait"
)

// newAutoGate returns a gate_concurrent=auto gate with ceiling b, at limit start after its cold
// start.
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

func TestAutoGateStartsAtItsCeiling(t *testing.T) {
	g := newTestGate(8, 8, time.Second)
	g.autoLimit(true, 2)
	if s := gateStats(g); s.Concurrent != 8 {
		t.Errorf("Concurrent = %d, want the ceiling 8", s.Concurrent)
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

// gate_queue means what it says with auto too: at a low limit, Q operations wait (each at most
// gate_queue_wait), and only the one beyond them is refused, as full.
func TestAutoGateQueuesQWaitersAtALowLimit(t *testing.T) {
	g := newAutoGate(8, 4, 1, time.Minute)
	mustAcquire(t, g)
	var queued []<-chan error
	for range 4 {
		queued = append(queued, acquireAsync(t, g, context.Background()))
	}
	waitFor(t, "four waiters", func() bool { return gateStats(g).Waiting == 4 })
	if _, err := g.acquire(context.Background()); !errors.Is(err, ErrAdmissionFull) {
		t.Fatalf("the operation beyond B + Q: got %v, want ErrAdmissionFull", err)
	}
	for _, c := range queued {
		g.release(nil)
		if err := <-c; err != nil {
			t.Fatalf("waiter: %v", err)
		}
	}
	if s := gateStats(g); s.RejectedTimeout != 0 || s.RejectedFull != 1 || s.Admitted != 5 {
		t.Errorf("stats = %+v, want 5 admitted, 1 refused as full, none timed out", s)
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
	g.refuseLocked(g.head, g.wl.timeout)
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
var errAllocProbe error = sqlStateError("23505")

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
	if s := gateStats(g); s.Concurrent != 4 {
		t.Fatalf("auto gate starts at Concurrent = %d, want its ceiling 4", s.Concurrent)
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

// runCallers runs n callers of workload (the default when ""), each making calls calls of query
// one after another, and returns how many succeeded and how many the gate refused. Any other
// error fails t.
func runCallers(t *testing.T, db *sql.DB, workload, query string, n, calls int) (ok, refused int64) {
	t.Helper()
	ctx := context.Background()
	if workload != "" {
		ctx = WithWorkload(ctx, workload)
	}
	var okN, refusedN atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for range calls {
				switch _, err := db.ExecContext(ctx, query); {
				case err == nil:
					okN.Add(1)
				case IsRejected(err):
					refusedN.Add(1)
				default:
					t.Errorf("%s: %v", query, err)
					return
				}
			}
		})
	}
	wg.Wait()
	return okN.Load(), refusedN.Load()
}

// A fresh gate_concurrent=auto gate serves what a fixed B at its ceiling serves until it has
// evidence that fewer is better: three callers of a 50 ms query, from the first call on, fit a
// ceiling of three (or ten) and none is refused.
func TestAutoColdStartRefusesNoCallThatFits(t *testing.T) {
	if testing.Short() {
		t.Skip("3 s of load per driver and case")
	}
	for _, c := range []struct{ name, params, workload string }{
		{"batch workload", "gate_max_conns=10&gate_concurrent=auto&gate_queue=8&gate_workloads=batch:3:2:50ms:auto", "batch"},
		{"default workload", "gate_max_conns=10&gate_concurrent=auto&gate_queue=8", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			runPG(t, c.params, func(t *testing.T, e *pgEnv) {
				ok, refused := runCallers(t, e.db, c.workload, "SELECT pg_sleep(0.05)", 3, 60)
				if refused != 0 {
					t.Errorf("%d of %d calls refused (%d succeeded); three callers fit the ceiling", refused, ok+refused, ok)
				}
			})
		})
	}
}

// storm runs callers that retry at once when refused, each until the calls of all of them that
// succeeded reach total or stop is set, and returns how many succeeded and were refused.
func storm(t *testing.T, db *sql.DB, query string, callers int, total int64, stop *atomic.Bool) (ok, refused int64) {
	t.Helper()
	var okN, refusedN atomic.Int64
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for okN.Load() < total && (stop == nil || !stop.Load()) {
				switch _, err := db.ExecContext(context.Background(), query); {
				case err == nil:
					okN.Add(1)
				case IsRejected(err):
					refusedN.Add(1)
				default:
					t.Errorf("%s: %v", query, err)
					return
				}
			}
		})
	}
	wg.Wait()
	return okN.Load(), refusedN.Load()
}

// Idle forgets: a burst after a retry storm and two idle seconds is refused no more than the same
// burst after a calm load and two idle seconds. Eleven callers fit a limit of 8 and a queue of 16.
func TestAutoBurstAfterAnIdleStormIsRefusedNoMoreThanAfterAnIdleCalm(t *testing.T) {
	if testing.Short() {
		t.Skip("idle seconds")
	}
	const params = "gate_max_conns=8&gate_concurrent=auto&gate_queue=16&gate_queue_wait=3s"
	forEachDriver(t, func(t *testing.T, drv string) {
		burst := func(load func(db *sql.DB)) int64 {
			db, c, _ := openPG(t, drv, params)
			load(db)
			limit := c.Stats().Concurrent
			time.Sleep(2 * time.Second) // the idle time under test, not a synchronization
			_, refused := runCallers(t, db, "", "SELECT pg_sleep(0.05)", 11, 1)
			t.Logf("limit %d after the load; the burst: %d refused", limit, refused)
			return refused
		}
		afterStorm := burst(func(db *sql.DB) {
			if _, refused := storm(t, db, "SELECT pg_sleep(0.02)", 40, 400, nil); refused == 0 {
				t.Error("40 callers against 8 + 16 permits were never refused: no storm")
			}
		})
		afterCalm := burst(func(db *sql.DB) { runCallers(t, db, "", "SELECT pg_sleep(0.02)", 8, 50) })
		if afterStorm > afterCalm {
			t.Errorf("a burst of 11 after an idle storm: %d refused; after an idle calm: %d", afterStorm, afterCalm)
		}
	})
}

// A caller's deadline that the gate's queue spent is no evidence of the database's load: an
// operation that waited for its permit longer than it then ran before the deadline ended it is
// no overload sample, one that ran longer is; the server's own timeout is one either way.
func TestAutoCountsADeadlineTheQueueSpentAsNoOverload(t *testing.T) {
	g := newAutoGate(8, 8, 8, time.Minute)
	ended, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ended.Done()
	for _, c := range []struct {
		name        string
		ctx         context.Context
		err         error
		waited, ran time.Duration
		want        outcome
	}{
		{"the queue spent most of the deadline", ended, ended.Err(), 90 * time.Millisecond, 10 * time.Millisecond, outcomeFailed},
		{"the database spent most of the deadline", ended, ended.Err(), 10 * time.Millisecond, 90 * time.Millisecond, outcomeOverload},
		{"the server's statement timeout after a long wait", context.Background(), sqlStateError("57014"), 90 * time.Millisecond, 10 * time.Millisecond, outcomeOverload},
	} {
		t.Run(c.name, func(t *testing.T) {
			now := monoNow()
			b := binding{g: g, queued: c.waited, readyAt: now - c.ran, worst: outcomeOK}
			b.note(c.ctx, c.err)
			if b.worst != c.want {
				t.Errorf("outcome %v, want %v", b.worst, c.want)
			}
		})
	}
}

// bind times the wait for the execution permit that note judges a deadline by, with an Observer
// attached (whose clock readings it reuses) and without one: at least from the moment the
// binding was seen waiting until the permit was given back, at most the whole bind.
func TestAutoBindTimesItsWaitForThePermit(t *testing.T) {
	const dsn = "gate_max_conns=1 gate_concurrent=auto gate_queue=1 gate_queue_wait=1m"
	for _, observed := range []bool{false, true} {
		t.Run(fmt.Sprintf("observer %v", observed), func(t *testing.T) {
			var (
				db *sql.DB
				c  *Connector
				fd *fakedb.Driver
			)
			if observed {
				db, c, fd = openObserved(t, dsn, ObserverFunc(func(Event) {}), nil)
			} else {
				db, c, fd = openFake(t, dsn)
			}
			held := holdPermit(t, db, fd, "h")
			cn := &conn{c: c}
			before := monoNow()
			bound := make(chan error, 1)
			go func() { bound <- cn.bind(context.Background()) }()
			testwait.For(t, "the binding to wait for the permit", func() bool { return c.Stats().Waiting == 1 })
			seen := monoNow()
			fd.Release("h")
			released := monoNow()
			if err := <-bound; err != nil {
				t.Fatalf("bind: %v", err)
			}
			after := monoNow()
			if err := <-held; err != nil {
				t.Fatal(err)
			}
			if q := cn.queued; q < released-seen || q > after-before {
				t.Errorf("bind timed a wait of %v, want between %v and %v", q, released-seen, after-before)
			}
			cn.unbind()
		})
	}
}
