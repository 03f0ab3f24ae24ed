package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gatedsql/gated"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx" with database/sql
)

// The overhead section runs each workload closed loop (every goroutine starts its next operation
// when the last one returns) with no deadline, at each goroutine count, for three contenders:
//
//   - plain: sql.Open("pgx") with MaxOpenConns = MaxIdleConns = P;
//   - gated: gated.Open with gate_max_conns = gate_concurrent = P and gate_queue ≥ the largest
//     goroutine count, so that nothing is ever refused;
//   - pgxpool: pgxpool.New with pool_max_conns = P, used natively, as users compare against.
//
// The contenders run one after another inside a round, in an order that rotates from round to
// round, so that noise from the machine hits all of them alike; the summary takes the median over
// rounds with the min–max.

// Contender names.
const (
	plainName  = "plain"
	gatedName  = "gated"
	nativeName = "pgxpool"
)

// overheadWorkloads are the operations of the overhead section, in report order.
var overheadWorkloads = []string{"select1", "writetx"}

// workloadTitle describes a workload for tables and charts.
var workloadTitle = map[string]string{
	"select1": `QueryRowContext("SELECT 1")`,
	"writetx": "write transaction (BEGIN; INSERT; COMMIT)",
}

// An op is one operation of a workload; worker identifies the calling goroutine.
type op func(ctx context.Context, worker int) error

// A contender is one way of reaching the server, with an op per workload.
type contender struct {
	name  string
	ops   map[string]op
	close func()
}

// overheadSample is one contender's measurement of one cell (workload, goroutines) in one round.
type overheadSample struct {
	OpsPerSec   float64
	P50, P99    time.Duration
	AllocsPerOp float64
	BytesPerOp  float64
	CPUPerOp    time.Duration // user+system CPU of the whole process per operation
	Errors      int64
	FirstErr    string
}

// stat is a median over rounds with the smallest and largest value.
type stat struct{ Median, Min, Max float64 }

func statOf(vs []float64) stat {
	if len(vs) == 0 {
		return stat{}
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return stat{Median: m, Min: s[0], Max: s[len(s)-1]}
}

// overheadSummary is one contender in one cell, over all rounds.
type overheadSummary struct {
	Workload   string
	Goroutines int
	Contender  string
	Rounds     []overheadSample

	OpsPerSec   stat
	P50us       stat
	P99us       stat
	AllocsPerOp stat
	CPUus       stat // CPU µs per operation
	// TimeRatio is the time per operation relative to plain's in the same round (plain's is 1).
	TimeRatio stat
	Errors    int64
}

// runOverhead measures every workload at every goroutine count for the three contenders.
func runOverhead(ctx context.Context, cfg config, admin *pgx.Conn, p *progress) ([]overheadSummary, error) {
	table := fmt.Sprintf("gatedbench_w_%d_%d", os.Getpid(), time.Now().UnixNano()%1e6)
	if _, err := admin.Exec(ctx, "CREATE TABLE "+table+" (id bigserial PRIMARY KEY, worker int NOT NULL, at timestamptz NOT NULL DEFAULT now())"); err != nil {
		return nil, fmt.Errorf("creating the write table: %w", err)
	}
	defer admin.Exec(context.Background(), "DROP TABLE IF EXISTS "+table)

	contenders, err := openOverheadContenders(ctx, cfg, table)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, c := range contenders {
			c.close()
		}
	}()

	workers := make([]workerState, slices.Max(cfg.Goroutines))
	var out []overheadSummary
	for _, wl := range overheadWorkloads {
		for _, g := range cfg.Goroutines {
			samples := make([][]overheadSample, len(contenders))
			for r := range cfg.Rounds {
				line := fmt.Sprintf("overhead %s g=%d round %d/%d:", wl, g, r+1, cfg.Rounds)
				for k := range contenders {
					i := (k + r) % len(contenders) // rotate the order from round to round
					c := contenders[i]
					lr, err := closedLoop(ctx, c.ops[wl], workers[:g], cfg.Warmup, cfg.Cell)
					if err != nil {
						return nil, err
					}
					s := lr.sample()
					samples[i] = append(samples[i], s)
					line += fmt.Sprintf(" %s %.0f/s p99 %v", c.name, s.OpsPerSec, s.P99.Round(time.Microsecond))
					if s.Errors > 0 {
						line += fmt.Sprintf(" (%d errors: %s)", s.Errors, s.FirstErr)
					}
				}
				p.printf("%s", line)
			}
			out = append(out, summarizeCell(wl, g, contenders, samples)...)
		}
	}
	return out, nil
}

// summarizeCell turns the rounds of one cell into one summary per contender; contenders[0] must
// be plain, the reference of TimeRatio.
func summarizeCell(wl string, g int, contenders []contender, samples [][]overheadSample) []overheadSummary {
	var out []overheadSummary
	for i, c := range contenders {
		s := overheadSummary{Workload: wl, Goroutines: g, Contender: c.name, Rounds: samples[i]}
		var ops, p50, p99, allocs, cpu, ratio []float64
		for r, x := range samples[i] {
			ops = append(ops, x.OpsPerSec)
			p50 = append(p50, us(x.P50))
			p99 = append(p99, us(x.P99))
			allocs = append(allocs, x.AllocsPerOp)
			cpu = append(cpu, us(x.CPUPerOp))
			if x.OpsPerSec > 0 {
				ratio = append(ratio, samples[0][r].OpsPerSec/x.OpsPerSec)
			}
			s.Errors += x.Errors
		}
		s.OpsPerSec, s.P50us, s.P99us = statOf(ops), statOf(p50), statOf(p99)
		s.AllocsPerOp, s.CPUus, s.TimeRatio = statOf(allocs), statOf(cpu), statOf(ratio)
		out = append(out, s)
	}
	return out
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// openOverheadContenders opens plain, gated and pgxpool, in that order, each with an
// application_name of its own.
func openOverheadContenders(ctx context.Context, cfg config, table string) ([]contender, error) {
	insert := "INSERT INTO " + table + " (worker) VALUES ($1)"
	app := func(name string) string { return fmt.Sprintf("gatedbench_%d_%s", os.Getpid(), name) }
	maxG := slices.Max(cfg.Goroutines)

	plain, err := openPlain(cfg, app(plainName))
	if err != nil {
		return nil, err
	}

	gatedDSN, err := withParams(cfg.URL, "application_name", app(gatedName),
		"gate_max_conns", strconv.Itoa(cfg.P), "gate_concurrent", strconv.Itoa(cfg.P),
		"gate_queue", strconv.Itoa(max(cfg.Q, maxG)), "gate_queue_wait", "1m")
	if err != nil {
		plain.Close()
		return nil, err
	}
	gdb, err := gated.Open(gatedDSN)
	if err != nil {
		plain.Close()
		return nil, err
	}

	nativeDSN, err := withParams(cfg.URL, "application_name", app(nativeName), "pool_max_conns", strconv.Itoa(cfg.P))
	if err != nil {
		plain.Close()
		gdb.Close()
		return nil, err
	}
	pool, err := pgxpool.New(ctx, nativeDSN)
	if err != nil {
		plain.Close()
		gdb.Close()
		return nil, err
	}

	obs, err := attachObservers(cfg.Observe, gdb)
	if err != nil {
		plain.Close()
		gdb.Close()
		pool.Close()
		return nil, err
	}
	return []contender{
		{name: plainName, ops: obs.wrapOps(sqlOps(plain, insert)), close: func() { plain.Close() }},
		{name: gatedName, ops: obs.wrapOps(sqlOps(gdb, insert)), close: func() { obs.close(); gdb.Close() }},
		{name: nativeName, ops: obs.wrapOps(poolOps(pool, insert)), close: pool.Close},
	}, nil
}

// sqlOps are the workloads through database/sql.
func sqlOps(db *sql.DB, insert string) map[string]op {
	return map[string]op{
		"select1": func(ctx context.Context, _ int) error {
			var n int
			return db.QueryRowContext(ctx, "SELECT 1").Scan(&n)
		},
		"writetx": func(ctx context.Context, worker int) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, insert, worker); err != nil {
				tx.Rollback()
				return err
			}
			return tx.Commit()
		},
	}
}

// poolOps are the workloads through pgxpool.
func poolOps(pool *pgxpool.Pool, insert string) map[string]op {
	return map[string]op{
		"select1": func(ctx context.Context, _ int) error {
			var n int
			return pool.QueryRow(ctx, "SELECT 1").Scan(&n)
		},
		"writetx": func(ctx context.Context, worker int) error {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, insert, worker); err != nil {
				tx.Rollback(ctx)
				return err
			}
			return tx.Commit(ctx)
		},
	}
}

// workerState is what one closed-loop goroutine records. Workers are preallocated once and reused,
// so that nothing the harness allocates is counted against an operation.
type workerState struct {
	h    histogram
	ops  int64
	errs int64
	err  error
	_    [64]byte // keeps the counters of neighbouring workers off one cache line
}

// loopResult is one closed-loop measurement.
type loopResult struct {
	Ops, Errors int64
	FirstErr    error
	Elapsed     time.Duration
	Hist        histogram
	Mallocs     uint64        // heap allocations during the measurement
	Bytes       uint64        // heap bytes allocated during the measurement
	CPU         time.Duration // process user+system CPU during the measurement
}

func (r *loopResult) sample() overheadSample {
	s := overheadSample{P50: r.Hist.quantile(0.50), P99: r.Hist.quantile(0.99), Errors: r.Errors}
	if r.FirstErr != nil {
		s.FirstErr = r.FirstErr.Error()
	}
	if r.Ops > 0 {
		n := float64(r.Ops)
		s.OpsPerSec = n / r.Elapsed.Seconds()
		s.AllocsPerOp = float64(r.Mallocs) / n
		s.BytesPerOp = float64(r.Bytes) / n
		s.CPUPerOp = time.Duration(float64(r.CPU) / n)
	}
	return s
}

// Phases of a closed loop.
const (
	phaseWarmup int32 = iota
	phaseMeasure
	phaseStop
)

// A loopWindow runs closed-loop workers through a warm-up and a measured window: each worker
// repeats one operation while the loop runs, and counts it only if it ended while measuring.
// closedLoop and fairPhase share it.
type loopWindow struct {
	phase atomic.Int32
	stop  chan struct{} // closed when the window ends, for workers that pause between operations
}

// measuring reports whether the measured window is open.
func (l *loopWindow) measuring() bool { return l.phase.Load() == phaseMeasure }

// run calls once(i) over and over in n goroutines, i from 0 to n-1, for warmup and until every
// worker's first call has ended (the first one opens a connection, which on a busy machine can
// take longer than the warm-up), then opens the window for dur. opened and closed (nil: nothing)
// run as it opens and closes, before the workers stop. It returns the window's length.
func (l *loopWindow) run(ctx context.Context, n int, warmup, dur time.Duration, once func(i int), opened, closed func()) time.Duration {
	l.stop = make(chan struct{})
	var wg, warm sync.WaitGroup
	for i := range n {
		wg.Add(1)
		warm.Add(1)
		go func() {
			warmed := false
			defer func() {
				if !warmed { // ctx ended first
					warm.Done()
				}
				wg.Done()
			}()
			for l.phase.Load() != phaseStop && ctx.Err() == nil {
				once(i)
				if !warmed {
					warmed = true
					warm.Done()
				}
			}
		}()
	}
	sleep(ctx, warmup)
	allWarm := make(chan struct{})
	go func() { warm.Wait(); close(allWarm) }()
	select {
	case <-allWarm:
	case <-ctx.Done():
	}
	l.phase.Store(phaseMeasure)
	if opened != nil {
		opened()
	}
	t0 := time.Now()
	sleep(ctx, dur)
	l.phase.Store(phaseStop)
	elapsed := time.Since(t0)
	if closed != nil {
		closed()
	}
	close(l.stop)
	wg.Wait()
	return elapsed
}

// closedLoop runs op in len(workers) goroutines (loopWindow): operations that complete while
// measuring are counted (an unbiased throughput in steady state), their latencies recorded, and
// the process's allocations and CPU time taken over the same window. It returns an error only
// when ctx ends.
func closedLoop(ctx context.Context, op op, workers []workerState, warmup, dur time.Duration) (loopResult, error) {
	runtime.GC() // garbage of the previous measurement is not this one's to collect
	for i := range workers {
		w := &workers[i]
		w.h.reset()
		w.ops, w.errs, w.err = 0, 0, nil
	}
	var l loopWindow
	var m0, m1 runtime.MemStats
	var c0, c1 time.Duration
	elapsed := l.run(ctx, len(workers), warmup, dur, func(i int) {
		w := &workers[i]
		t0 := time.Now()
		err := op(ctx, i)
		d := time.Since(t0)
		if !l.measuring() {
			return
		}
		if err != nil {
			if w.errs++; w.err == nil {
				w.err = err
			}
			return
		}
		w.h.record(d)
		w.ops++
	}, func() { m0, c0 = mallocs(), cpuTime() }, func() { m1, c1 = mallocs(), cpuTime() })
	if err := ctx.Err(); err != nil {
		return loopResult{}, err
	}
	r := loopResult{Elapsed: elapsed, Mallocs: m1.Mallocs - m0.Mallocs, Bytes: m1.TotalAlloc - m0.TotalAlloc, CPU: c1 - c0}
	for i := range workers {
		w := &workers[i]
		r.Ops += w.ops
		r.Errors += w.errs
		if r.FirstErr == nil {
			r.FirstErr = w.err
		}
		r.Hist.merge(&w.h)
	}
	return r, nil
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func mallocs() runtime.MemStats {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m
}

// cpuTime returns the process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// openPlain opens the plain contender: sql.Open("pgx") with MaxOpenConns = MaxIdleConns = P and
// application_name app.
func openPlain(cfg config, app string) (*sql.DB, error) {
	dsn, err := withParams(cfg.URL, "application_name", app)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(cfg.P)
	db.SetMaxIdleConns(cfg.P)
	return db, nil
}
