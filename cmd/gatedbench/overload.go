package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatedsql/gated"
)

// The overload section offers more work than the server can do and looks at what callers get.
//
// For each query it first measures the capacity: plain database/sql, closed loop with P
// goroutines, operations per second. Then it measures the unloaded latency with open-loop
// arrivals at a small fraction of that capacity, and then offers each load level (a multiple of
// the capacity) as open-loop Poisson arrivals: every arrival is a goroutine of its own with a
// context.WithTimeout(deadline), started on schedule whether or not earlier ones have finished.
// Plain and gated see the same arrival sequence (same ArrivalSeed), one after the other, in an order
// that alternates from level to level.
//
// An arrival ends in exactly one class: success (no error, within the deadline), late (no error
// but past it), refused (gated.IsRejected), deadline (the context ended first), other error, or
// dropped (never started because -max-inflight arrivals were already in flight; plain
// database/sql lets every arrival wait until its deadline, and the cap protects the machine).

// unloadedFor is how long the unloaded latency is measured.
func unloadedFor(cfg config) time.Duration { return cfg.Duration }

// settle is the pause after each run, in which the server finishes cancelled work.
func settle(cfg config) time.Duration { return min(300*time.Millisecond, cfg.Duration) }

// A querySpec is a query whose cost the server really pays.
type querySpec struct {
	Name  string
	Title string
	SQL   string
	Arg   any
}

// overloadQueries are the queries the overload section knows.
func overloadQueries(cfg config) []querySpec {
	return []querySpec{
		{Name: "sleep", Title: fmt.Sprintf("SELECT pg_sleep(%g)", cfg.Sleep.Seconds()),
			SQL: "SELECT 1::bigint FROM pg_sleep($1)", Arg: cfg.Sleep.Seconds()},
		{Name: "cpu", Title: fmt.Sprintf("CPU-bound: sum over generate_series(1, %d)", cfg.CPURows),
			SQL: "SELECT sum(i)::bigint FROM generate_series(1, $1::int) AS s(i)", Arg: cfg.CPURows},
	}
}

// overloadQuery is everything measured for one query.
type overloadQuery struct {
	Query       querySpec
	Capacity    float64       // operations per second, plain, closed loop with P goroutines
	CapacityP99 time.Duration // p99 latency in the capacity run
	BytesPerOp  float64       // heap bytes allocated per operation in the capacity run
	Unloaded    []overloadRow // plain and gated at cfg.Unloaded × capacity
	Rows        []overloadRow // each load level, plain then gated
	Auto        []overloadRow // gated with gate_concurrent=auto (-auto): unloaded, then each load level
}

// autoRows returns q with the auto rows in the gated rows' places, for the checks.
func (q *overloadQuery) autoRows() *overloadQuery {
	a := *q
	a.Rows = append([]overloadRow(nil), q.Rows...)
	for i, r := range a.Rows {
		if r.Contender == gatedName {
			for _, ar := range q.Auto[1:] {
				if ar.Load == r.Load {
					a.Rows[i] = ar
				}
			}
		}
	}
	return &a
}

// unloadedP99 returns the unloaded p99 of successes of contender name.
func (q *overloadQuery) unloadedP99(name string) time.Duration {
	for _, r := range q.Unloaded {
		if r.Contender == name {
			return r.SuccessP99
		}
	}
	return 0
}

// overloadRow is one contender at one offered load.
type overloadRow struct {
	Load      float64 // multiple of the capacity
	Contender string
	Rate      float64 // target arrivals per second
	Offered   float64 // arrivals per second actually started or dropped

	Arrivals, Success, Late, Refused, Deadline, Other, Dropped int64
	FirstOther                                                 string

	Goodput    float64 // successes within the deadline per second
	SuccessP50 time.Duration
	SuccessP99 time.Duration
	RefusalP99 time.Duration
	LagP99     time.Duration // start of an arrival's goroutine after its scheduled time
	Inflight   int64         // peak arrivals in flight

	CPUPerArrival    time.Duration // process user+system CPU per arrival, the harness's included
	AllocsPerArrival float64       // heap allocations per arrival, the harness's included

	RejectedFull, RejectedTimeout int64 // gated's counters over the run
	Peaks                         peaks
}

// runOverload measures every query of the overload section.
func runOverload(ctx context.Context, cfg config, p *progress) ([]overloadQuery, error) {
	var out []overloadQuery
	for qi, q := range overloadQueries(cfg) {
		if !slices.Contains(cfg.Queries, q.Name) {
			continue
		}
		oq, err := runQuery(ctx, cfg, p, q, uint64(qi))
		if err != nil {
			return nil, err
		}
		out = append(out, oq)
	}
	return out, nil
}

// overloadContender is a *sql.DB under test in the overload section.
type overloadContender struct {
	name string
	app  string // application_name of its server connections
	db   *sql.DB
	gate *gated.Connector // nil for plain
}

func runQuery(ctx context.Context, cfg config, p *progress, q querySpec, qi uint64) (overloadQuery, error) {
	oq := overloadQuery{Query: q}
	cs, err := openOverloadContenders(cfg)
	if err != nil {
		return oq, err
	}
	defer func() {
		for _, c := range cs {
			c.db.Close()
		}
	}()
	plain, gatedC := cs[0], cs[1]
	var auto *overloadContender
	if len(cs) > 2 {
		auto = &cs[2]
	}
	closedOp := func(db *sql.DB) op {
		return func(ctx context.Context, _ int) error { return queryOnce(ctx, db, q) }
	}

	workers := make([]workerState, cfg.P)
	lr, err := closedLoop(ctx, closedOp(plain.db), workers, cfg.Warmup, cfg.CapacityFor)
	if err != nil {
		return oq, err
	}
	if lr.Ops == 0 {
		return oq, fmt.Errorf("overload %s: no operation succeeded while measuring capacity: %v", q.Name, lr.FirstErr)
	}
	s := lr.sample()
	oq.Capacity, oq.CapacityP99, oq.BytesPerOp = s.OpsPerSec, s.P99, s.BytesPerOp
	p.printf("overload %s: capacity %.0f ops/s (plain, %d goroutines, closed loop), p99 %v, %.0f B/op",
		q.Name, oq.Capacity, cfg.P, s.P99.Round(time.Microsecond), s.BytesPerOp)
	if _, err := closedLoop(ctx, closedOp(gatedC.db), workers, cfg.Warmup, 10*time.Millisecond); err != nil {
		return oq, err // warms gated's connections up like the capacity run warmed plain's
	}

	for _, c := range cs {
		row, err := openLoop(ctx, cfg, c, q, cfg.Unloaded, oq.Capacity, rand.NewPCG(uint64(cfg.ArrivalSeed), qi<<32))
		if err != nil {
			return oq, err
		}
		if c.name == autoName {
			oq.Auto = append(oq.Auto, row)
		} else {
			oq.Unloaded = append(oq.Unloaded, row)
		}
		p.printf("overload %s unloaded (%g×) %s: %s", q.Name, cfg.Unloaded, c.name, row.brief())
	}
	for li, load := range cfg.Loads {
		order := []overloadContender{plain, gatedC}
		if li%2 == 1 {
			order = []overloadContender{gatedC, plain}
		}
		rows := make([]overloadRow, 2)
		for _, c := range order {
			row, err := openLoop(ctx, cfg, c, q, load, oq.Capacity, rand.NewPCG(uint64(cfg.ArrivalSeed), qi<<32|uint64(li+1)))
			if err != nil {
				return oq, err
			}
			if c.gate == nil {
				rows[0] = row
			} else {
				rows[1] = row
			}
			p.printf("overload %s %g× %s: %s", q.Name, load, c.name, row.brief())
		}
		oq.Rows = append(oq.Rows, rows...)
		if auto != nil {
			// gate_concurrent=auto, warmed up at the same load first: it starts at its ceiling.
			src := rand.NewPCG(uint64(cfg.ArrivalSeed), qi<<32|uint64(li+1))
			warm := cfg
			warm.Duration = min(time.Second, cfg.Duration)
			if _, err := openLoop(ctx, warm, *auto, q, load, oq.Capacity, rand.NewPCG(uint64(cfg.ArrivalSeed)+1, qi<<32|uint64(li+1))); err != nil {
				return oq, err
			}
			row, err := openLoop(ctx, cfg, *auto, q, load, oq.Capacity, src)
			if err != nil {
				return oq, err
			}
			oq.Auto = append(oq.Auto, row)
			p.printf("overload %s %g× %s: %s", q.Name, load, auto.name, row.brief())
		}
	}
	return oq, nil
}

// brief is a progress line for one run.
func (r *overloadRow) brief() string {
	s := fmt.Sprintf("offered %.0f/s goodput %.0f/s ok p99 %v", r.Offered, r.Goodput, r.SuccessP99.Round(time.Microsecond))
	if r.Refused > 0 {
		s += fmt.Sprintf(" refused %d (p99 %v)", r.Refused, r.RefusalP99.Round(time.Microsecond))
	}
	s += fmt.Sprintf(" deadline %d other %d", r.Deadline, r.Other)
	if r.Dropped > 0 {
		s += fmt.Sprintf(" DROPPED %d (cap %d hit)", r.Dropped, r.Inflight)
	}
	s += fmt.Sprintf("; peaks: %d goroutines, %.1f MiB heap, %d server conns", r.Peaks.Goroutines, mib(r.Peaks.HeapBytes), r.Peaks.ServerConns)
	if r.Contender != plainName {
		s += fmt.Sprintf(", %d waiting", r.Peaks.Waiting)
	}
	if r.FirstOther != "" {
		s += "; first other error: " + r.FirstOther
	}
	return s
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// queryOnce runs q once and reads its single value.
func queryOnce(ctx context.Context, db *sql.DB, q querySpec) error {
	var v int64
	return db.QueryRowContext(ctx, q.SQL, q.Arg).Scan(&v)
}

// openOverloadContenders opens plain (MaxOpenConns = MaxIdleConns = P) and gated (P, B, Q, and
// gate_queue_wait = deadline), in that order.
func openOverloadContenders(cfg config) ([]overloadContender, error) {
	plainApp := fmt.Sprintf("gatedbench_%d_ol_%s", os.Getpid(), plainName)
	gatedApp := fmt.Sprintf("gatedbench_%d_ol_%s", os.Getpid(), gatedName)
	gatedDSN, err := withParams(cfg.URL, "application_name", gatedApp,
		"gate_max_conns", strconv.Itoa(cfg.P), "gate_concurrent", strconv.Itoa(cfg.B),
		"gate_queue", strconv.Itoa(cfg.Q), "gate_queue_wait", cfg.Deadline.String(),
		"gate_queue_order", cfg.Order)
	if err != nil {
		return nil, err
	}
	plain, err := openPlain(cfg, plainApp)
	if err != nil {
		return nil, err
	}
	gdb, err := gated.Open(gatedDSN)
	if err != nil {
		plain.Close()
		return nil, err
	}
	c, _ := gated.FromDB(gdb)
	cs := []overloadContender{
		{name: plainName, app: plainApp, db: plain},
		{name: gatedName, app: gatedApp, db: gdb, gate: c},
	}
	if cfg.Auto {
		autoApp := fmt.Sprintf("gatedbench_%d_ol_auto", os.Getpid())
		autoDSN, err := withParams(cfg.URL, "application_name", autoApp,
			"gate_max_conns", strconv.Itoa(cfg.P), "gate_concurrent", "auto",
			"gate_queue", strconv.Itoa(cfg.Q), "gate_queue_wait", cfg.Deadline.String(),
			"gate_queue_order", cfg.Order)
		if err != nil {
			return nil, err
		}
		adb, err := gated.Open(autoDSN)
		if err != nil {
			plain.Close()
			gdb.Close()
			return nil, err
		}
		ac, _ := gated.FromDB(adb)
		cs = append(cs, overloadContender{name: autoName, app: autoApp, db: adb, gate: ac})
	}
	return cs, nil
}

// autoName is the overload contender with gate_concurrent=auto.
const autoName = "gated auto"

// arrivals collects the outcomes of one open-loop run; its methods are safe for concurrent use.
type arrivals struct {
	success, late, refused, deadline, other, dropped atomic.Int64
	inflight, maxInflight                            atomic.Int64
	okHist, refusedHist, lagHist                     histogram // written with recordAtomic
	otherOnce                                        sync.Once
	firstOther                                       string
}

// openLoop offers load × capacity arrivals per second to c for cfg.Duration (Poisson arrivals
// from src), waits for the last one to end, and reports what happened, with the peaks sampled
// meanwhile.
func openLoop(ctx context.Context, cfg config, c overloadContender, q querySpec, load, capacity float64, src rand.Source) (overloadRow, error) {
	row := overloadRow{Load: load, Contender: c.name, Rate: load * capacity}
	var before gated.Stats
	if c.gate != nil {
		before = c.gate.Stats()
	}
	a := new(arrivals)
	rng := rand.New(src)
	runtime.GC() // start from the live heap, not the garbage an earlier run left behind
	smp := startSampler(cfg.URL, c.app, c.gate)
	m0, c0 := mallocs(), cpuTime()
	var wg sync.WaitGroup
	var started int64

	// The dispatcher starts every arrival that is due, then sleeps until the next one. Go's
	// timers wake it about once a millisecond at best, so arrivals leave in small bursts; over
	// the deadline (100 ms) and the service times measured here that does not matter.
	start := time.Now()
	end := start.Add(cfg.Duration)
	next := start
	for ctx.Err() == nil {
		now := time.Now()
		for !next.After(now) && next.Before(end) {
			started++
			if n := a.inflight.Add(1); n > int64(cfg.MaxInflight) {
				a.inflight.Add(-1)
				a.dropped.Add(1)
			} else {
				updateMax(&a.maxInflight, n)
				wg.Add(1)
				go a.arrive(ctx, &wg, next, cfg.Deadline, c.db, q)
			}
			next = next.Add(time.Duration(rng.ExpFloat64() / row.Rate * float64(time.Second)))
		}
		if !next.Before(end) {
			break
		}
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		}
	}
	wg.Wait()
	m1, c1 := mallocs(), cpuTime()
	row.Peaks = smp.finish()
	if err := ctx.Err(); err != nil {
		return row, err
	}

	secs := cfg.Duration.Seconds()
	row.Arrivals = started
	row.Offered = float64(started) / secs
	row.Success, row.Late, row.Refused = a.success.Load(), a.late.Load(), a.refused.Load()
	row.Deadline, row.Other, row.Dropped = a.deadline.Load(), a.other.Load(), a.dropped.Load()
	row.FirstOther = a.firstOther
	row.Goodput = float64(row.Success) / secs
	row.SuccessP50, row.SuccessP99 = a.okHist.quantile(0.50), a.okHist.quantile(0.99)
	row.RefusalP99 = a.refusedHist.quantile(0.99)
	row.LagP99 = a.lagHist.quantile(0.99)
	row.Inflight = a.maxInflight.Load()
	if started > 0 {
		row.CPUPerArrival = (c1 - c0) / time.Duration(started)
		row.AllocsPerArrival = float64(m1.Mallocs-m0.Mallocs) / float64(started)
	}
	if c.gate != nil {
		after := c.gate.Stats()
		row.RejectedFull = after.RejectedFull - before.RejectedFull
		row.RejectedTimeout = after.RejectedTimeout - before.RejectedTimeout
	}
	sleep(ctx, settle(cfg))
	return row, nil
}

// arrive runs one arrival: its own deadline, one query, and its classification. Latency counts
// from the start of the call, so that the dispatcher's and scheduler's delays (reported as lag)
// do not hide in the refusal latency.
func (a *arrivals) arrive(parent context.Context, wg *sync.WaitGroup, sched time.Time, deadline time.Duration, db *sql.DB, q querySpec) {
	defer wg.Done()
	defer a.inflight.Add(-1)
	ctx, cancel := context.WithTimeout(parent, deadline)
	t0 := time.Now()
	a.lagHist.recordAtomic(t0.Sub(sched))
	err := queryOnce(ctx, db, q)
	d := time.Since(t0)
	ctxErr := ctx.Err()
	cancel()
	switch {
	case err == nil && d <= deadline:
		a.success.Add(1)
		a.okHist.recordAtomic(d)
	case err == nil:
		a.late.Add(1)
	case gated.IsRejected(err):
		a.refused.Add(1)
		a.refusedHist.recordAtomic(d)
	case ctxErr != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		a.deadline.Add(1)
	default:
		a.other.Add(1)
		a.otherOnce.Do(func() { a.firstOther = err.Error() })
	}
}

// updateMax raises m to v if v is larger.
func updateMax(m *atomic.Int64, v int64) {
	for {
		cur := m.Load()
		if v <= cur || m.CompareAndSwap(cur, v) {
			return
		}
	}
}
