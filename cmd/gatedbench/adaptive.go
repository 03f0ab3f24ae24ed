package main

// gatedbench adaptive: gate_concurrent=auto against fixed B, plain database/sql and failsafe-go's
// adaptive limiter (peer.go), on the scenarios auto is meant for:
//
//   - cpu: the CPU-bound query at 5× capacity; fixed B swept over 1..P gives C*, the best goodput.
//   - sleep: pg_sleep(0.005) at 1×, 5× and 10×.
//   - lock: one hot row updated in short transactions, at 5×.
//   - drop: the CPU-bound query at 3×; halfway through, competing CPU-bound sessions on the server
//     (started and bounded by the benchmark) take about half its capacity, and later stop.
//   - fail: auto settled on the CPU-bound query, then the query fails at once (division by zero),
//     then it runs into statement_timeout on every call: the limit must not rise.
//   - lend: web (B 6) beside batch (B 2) on P = 8, batch idle and then saturated, with and without
//     lending.
//   - steady: the CPU-bound query at 2× for -steady (10 minutes by default), auto only.
//   - overhead: closed loop SELECT 1 at 1 and 32 goroutines, auto against fixed B = P.
//
// Every run is open loop (Poisson arrivals, a deadline each) and records, per -step, the limit,
// the goodput and the p99 of successes, drawn as one chart per scenario.
//
//	go run ./cmd/gatedbench adaptive [-url URL] [-scenarios cpu,sleep,...] [-rounds 3] [-duration 5s] [-out dir]

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gatedsql/gated"
	"github.com/gatedsql/gated/internal/pgtest"
	"github.com/jackc/pgx/v5"
)

type adaptiveConfig struct {
	url, out  string
	P, Q      int
	deadline  time.Duration
	duration  time.Duration // measured arrivals per run
	warmup    time.Duration // unmeasured arrivals at the same load before each run
	step      time.Duration // time-series resolution
	rounds    int
	steady    time.Duration
	scenarios []string
	cpuRows   int
	auto      string // the value of gate_concurrent for the auto contender
	compete   int    // drop: competing CPU-bound sessions
	dropOnly  string // drop: the contenders to run, comma-separated names ("" for all)
	dropFixed []int  // drop: fixed B values run beside 1 and P
	order     string // gate_queue_order of every gated contender

	overheadRun time.Duration // overhead: measured time of one closed-loop run
}

var adaptiveScenarios = []string{"cpu", "sleep", "lock", "drop", "fail", "lend", "overhead", "steady"}

func runAdaptiveCmd(args []string, out, log io.Writer) int {
	ac := adaptiveConfig{P: 8, Q: 8, order: "fifo", deadline: 100 * time.Millisecond, duration: 5 * time.Second, warmup: time.Second,
		step: 250 * time.Millisecond, rounds: 3, steady: 10 * time.Minute, cpuRows: 20000, auto: "auto", out: "gatedbench-out"}
	fs := flag.NewFlagSet("gatedbench adaptive", flag.ContinueOnError)
	fs.StringVar(&ac.url, "url", os.Getenv("DATABASE_URL"), "PostgreSQL URL (default $DATABASE_URL, then the server the tests find)")
	fs.StringVar(&ac.out, "out", ac.out, "output `dir` for adaptive.md and adaptive-*.png")
	fs.IntVar(&ac.P, "P", ac.P, "physical connections")
	fs.IntVar(&ac.Q, "Q", ac.Q, "gated's gate_queue")
	fs.DurationVar(&ac.deadline, "deadline", ac.deadline, "per-request deadline (also gate_queue_wait)")
	fs.DurationVar(&ac.duration, "duration", ac.duration, "measured arrivals per run")
	fs.DurationVar(&ac.warmup, "warmup", ac.warmup, "unmeasured arrivals at the same load before each run")
	fs.DurationVar(&ac.step, "step", ac.step, "time-series resolution")
	fs.IntVar(&ac.rounds, "rounds", ac.rounds, "interleaved rounds per scenario")
	fs.DurationVar(&ac.steady, "steady", ac.steady, "length of the steady scenario")
	fs.StringVar(&ac.auto, "auto", ac.auto, "gate_concurrent of the auto contender")
	fs.DurationVar(&ac.overheadRun, "overhead-run", 2*time.Second, "overhead: measured time of one closed-loop run")
	fs.IntVar(&ac.compete, "compete", runtime.NumCPU(), "drop: competing CPU-bound sessions on the server (default: as many as this machine's CPUs, which the server shares here)")
	fs.StringVar(&ac.dropOnly, "drop-contenders", "", "drop: run only these contenders, comma-separated (of \"B=1 Q=0\", B=1, B=P's name, the -drop-fixed ones, auto, failsafe-go)")
	fs.StringVar(&ac.order, "queue-order", "fifo", "gate_queue_order of every gated contender: fifo or adaptive")
	dropFixed := fs.String("drop-fixed", "", "drop: more fixed B to run beside B=1 and B=P, comma-separated (for example 2,3,4: which limit meets both drop targets)")
	scen := fs.String("scenarios", strings.Join(adaptiveScenarios[:len(adaptiveScenarios)-1], ","), "scenarios: "+strings.Join(adaptiveScenarios, ","))
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *dropFixed != "" {
		for v := range strings.SplitSeq(*dropFixed, ",") {
			k, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || k < 1 || k > ac.P {
				fmt.Fprintf(log, "gatedbench adaptive: -drop-fixed: %q is not a B between 1 and P (%d)\n", v, ac.P)
				return 2
			}
			if k != 1 && k != ac.P && !slices.Contains(ac.dropFixed, k) {
				ac.dropFixed = append(ac.dropFixed, k)
			}
		}
		slices.Sort(ac.dropFixed)
	}
	for s := range strings.SplitSeq(*scen, ",") {
		if !slices.Contains(adaptiveScenarios, s) {
			fmt.Fprintf(log, "gatedbench adaptive: unknown scenario %q\n", s)
			return 2
		}
		ac.scenarios = append(ac.scenarios, s)
	}
	if ac.url == "" {
		u, err := pgtest.Lookup()
		if err != nil {
			fmt.Fprintln(log, "gatedbench adaptive: no server:", err)
			return 1
		}
		ac.url = u
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := os.MkdirAll(ac.out, 0o755); err != nil {
		fmt.Fprintln(log, "gatedbench adaptive:", err)
		return 1
	}
	rep := &adaptiveReport{cfg: ac, start: time.Now(), load: loadAvg()}
	b := &bench{ac: ac, log: log, start: time.Now()}
	for _, s := range ac.scenarios {
		var err error
		switch s {
		case "cpu":
			err = b.cpuScenario(ctx, rep)
		case "sleep":
			err = b.sleepScenario(ctx, rep)
		case "lock":
			err = b.lockScenario(ctx, rep)
		case "drop":
			err = b.dropScenario(ctx, rep)
		case "fail":
			err = b.failScenario(ctx, rep)
		case "lend":
			err = b.lendScenario(ctx, rep)
		case "overhead":
			err = b.overheadScenario(ctx, rep)
		case "steady":
			err = b.steadyScenario(ctx, rep)
		}
		if err != nil {
			fmt.Fprintf(log, "gatedbench adaptive: %s: %v\n", s, err)
			return 1
		}
		// Written after every scenario, so that an interrupted run keeps what it measured.
		if err := rep.write(io.Discard); err != nil {
			fmt.Fprintln(log, "gatedbench adaptive:", err)
			return 1
		}
	}
	if err := rep.write(out); err != nil {
		fmt.Fprintln(log, "gatedbench adaptive:", err)
		return 1
	}
	pgtest.Cleanup()
	return 0
}

type bench struct {
	ac    adaptiveConfig
	log   io.Writer
	start time.Time
}

func (b *bench) printf(format string, args ...any) {
	fmt.Fprintf(b.log, "[%7s] %s\n", time.Since(b.start).Round(100*time.Millisecond), fmt.Sprintf(format, args...))
}

// An adTarget is one contender as the scenarios see it.
type adTarget struct {
	name  string
	app   string
	do    func(ctx context.Context, work workFn) error
	limit func() int // the current limit (P for plain)
	c     *gated.Connector
	close func()
}

// workFn is one operation on a *sql.DB.
type workFn func(ctx context.Context, db *sql.DB) error

func queryWork(sqlText string, arg any) workFn {
	return func(ctx context.Context, db *sql.DB) error {
		var v int64
		return db.QueryRowContext(ctx, sqlText, arg).Scan(&v)
	}
}

var (
	cpuWork = func(rows int) workFn {
		return queryWork("SELECT sum(i)::bigint FROM generate_series(1, $1::int) AS s(i)", rows)
	}
	sleepWork = queryWork("SELECT 1::bigint FROM pg_sleep($1)", 0.005)
	lockWork  = func(ctx context.Context, db *sql.DB) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "UPDATE gatedbench_hot SET n = n + 1 WHERE id = 1"); err != nil {
			tx.Rollback()
			return err
		}
		return tx.Commit()
	}
	failWork    = queryWork("SELECT (1 / (0 * $1::int))::bigint", 1)
	timeoutWork = queryWork("SELECT 1::bigint FROM pg_sleep($1)", 1.0)
)

// openGated opens a gated contender; extra are more DSN parameters.
func (b *bench) openGated(name, concurrent string, extra ...string) (*adTarget, error) {
	app := fmt.Sprintf("gatedbench_%d_ad_%s", os.Getpid(), strings.ReplaceAll(name, " ", "_"))
	kv := append([]string{"application_name", app, "gate_max_conns", strconv.Itoa(b.ac.P),
		"gate_concurrent", concurrent, "gate_queue", strconv.Itoa(b.ac.Q), "gate_queue_wait", b.ac.deadline.String(),
		"gate_queue_order", b.ac.order}, extra...)
	dsn, err := withParams(b.ac.url, kv...)
	if err != nil {
		return nil, err
	}
	db, err := gated.Open(dsn)
	if err != nil {
		return nil, err
	}
	c, _ := gated.FromDB(db)
	return &adTarget{name: name, app: app, c: c,
		do:    func(ctx context.Context, w workFn) error { return w(ctx, db) },
		limit: func() int { return c.Stats().Concurrent },
		close: func() { db.Close() },
	}, nil
}

func (b *bench) openPlainTarget() (*adTarget, error) {
	app := fmt.Sprintf("gatedbench_%d_ad_plain", os.Getpid())
	db, err := openPlain(config{URL: b.ac.url, P: b.ac.P}, app)
	if err != nil {
		return nil, err
	}
	return &adTarget{name: plainName, app: app,
		do:    func(ctx context.Context, w workFn) error { return w(ctx, db) },
		limit: func() int { return b.ac.P },
		close: func() { db.Close() },
	}, nil
}

func (b *bench) openPeer() (*adTarget, error) {
	app := fmt.Sprintf("gatedbench_%d_ad_peer", os.Getpid())
	db, err := openPlain(config{URL: b.ac.url, P: b.ac.P}, app)
	if err != nil {
		return nil, err
	}
	p := newPeer(db)
	return &adTarget{name: peerName, app: app,
		do:    func(ctx context.Context, w workFn) error { return p.do(ctx, w) },
		limit: func() int { return p.lim.Limit() },
		close: func() { db.Close() },
	}, nil
}

// openSet opens the contenders: fixed B for each of fixed, then auto, plain and the peer.
func (b *bench) openSet(fixed []int, plainAndPeer bool) ([]*adTarget, error) {
	var ts []*adTarget
	fail := func(err error) ([]*adTarget, error) {
		for _, t := range ts {
			t.close()
		}
		return nil, err
	}
	for _, k := range fixed {
		t, err := b.openGated(fmt.Sprintf("B=%d", k), strconv.Itoa(k))
		if err != nil {
			return fail(err)
		}
		ts = append(ts, t)
	}
	t, err := b.openGated("auto", b.ac.auto)
	if err != nil {
		return fail(err)
	}
	ts = append(ts, t)
	if plainAndPeer {
		for _, open := range []func() (*adTarget, error){b.openPlainTarget, b.openPeer} {
			t, err := open()
			if err != nil {
				return fail(err)
			}
			ts = append(ts, t)
		}
	}
	return ts, nil
}

func closeAll(ts []*adTarget) {
	for _, t := range ts {
		t.close()
	}
}

// capacity measures ops/s closed loop with P goroutines on t.
func (b *bench) capacity(ctx context.Context, t *adTarget, w workFn) (float64, error) {
	workers := make([]workerState, b.ac.P)
	lr, err := closedLoop(ctx, func(ctx context.Context, _ int) error { return t.do(ctx, w) }, workers, 300*time.Millisecond, 2*time.Second)
	if err != nil {
		return 0, err
	}
	if lr.Ops == 0 {
		return 0, fmt.Errorf("no operation succeeded while measuring capacity: %v", lr.FirstErr)
	}
	return lr.sample().OpsPerSec, nil
}

// A runResult is one open-loop run of one contender.
type runResult struct {
	Contender string
	Load      float64
	Round     int

	Arrivals, Success, Late, Refused, Deadline, Other int64
	FirstOther                                        string
	Goodput                                           float64
	P50, P99                                          time.Duration
	Series                                            []point1 // per step
}

// point1 is one step of a run's time series.
type point1 struct {
	T       float64 // seconds since the measured arrivals began
	Limit   float64 // mean of the limit's samples in the step
	Goodput float64 // successes per second completing in the step
	P99     time.Duration
	Refused int64
	hist    *coarseHist // the successes' latencies in the step
}

// A recorder collects one run's outcomes; safe for concurrent use.
type recorder struct {
	start  time.Time
	step   time.Duration
	ok     histogram // recordAtomic
	counts [5]atomic.Int64
	buck   []stepBucket
	other  atomic.Pointer[string]
}

type stepBucket struct {
	ok, refused atomic.Int64
	hist        coarseHist
	limSum      atomic.Int64
	limN        atomic.Int64
}

// coarseHist is an atomic log-linear histogram, 8 buckets per power of two of µs.
type coarseHist struct {
	n     [320]atomic.Uint32
	total atomic.Uint32
}

func coarseIndex(d time.Duration) int {
	v := uint64(max(d, 0)) >> 10
	if v < 8 {
		return int(v)
	}
	e := 63 - leadingZeros(v) - 3
	return min((e+1)*8+int(v>>e)&7, 319)
}

func leadingZeros(v uint64) int {
	n := 0
	for v&(1<<63) == 0 {
		v <<= 1
		n++
	}
	return n
}

func coarseValue(i int) time.Duration {
	if i < 8 {
		return time.Duration(i)<<10 + 512
	}
	e := i/8 - 1
	m := uint64(8 + i%8)
	return time.Duration((m<<e + (1<<e)/2) << 10)
}

func (h *coarseHist) add(d time.Duration) {
	h.n[coarseIndex(d)].Add(1)
	h.total.Add(1)
}

func (h *coarseHist) merge(o *coarseHist) {
	for i := range o.n {
		h.n[i].Add(o.n[i].Load())
	}
	h.total.Add(o.total.Load())
}

func (h *coarseHist) quantile(q float64) time.Duration {
	total := h.total.Load()
	if total == 0 {
		return 0
	}
	rank := uint32(math.Ceil(q * float64(total)))
	var seen uint32
	for i := range h.n {
		if seen += h.n[i].Load(); seen >= rank {
			return coarseValue(i)
		}
	}
	return coarseValue(len(h.n) - 1)
}

const (
	cSuccess = iota
	cLate
	cRefused
	cDeadline
	cOther
)

func newRecorder(start time.Time, d, step time.Duration) *recorder {
	return &recorder{start: start, step: step, buck: make([]stepBucket, int(d/step)+2)}
}

func (r *recorder) bucket(t time.Time) *stepBucket {
	i := int(t.Sub(r.start) / r.step)
	if i < 0 || i >= len(r.buck) {
		return nil
	}
	return &r.buck[i]
}

// record classifies one arrival's outcome.
func (r *recorder) record(end time.Time, d, deadline time.Duration, err, ctxErr error) {
	bk := r.bucket(end)
	switch {
	case err == nil && d <= deadline:
		r.counts[cSuccess].Add(1)
		r.ok.recordAtomic(d)
		if bk != nil {
			bk.ok.Add(1)
			bk.hist.add(d)
		}
	case err == nil:
		r.counts[cLate].Add(1)
	case gated.IsRejected(err) || errors.Is(err, errPeerRefused):
		r.counts[cRefused].Add(1)
		if bk != nil {
			bk.refused.Add(1)
		}
	case ctxErr != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		r.counts[cDeadline].Add(1)
	default:
		r.counts[cOther].Add(1)
		s := err.Error()
		r.other.CompareAndSwap(nil, &s)
	}
}

// phaseLoad is one stretch of a run: its length, its offered rate, and the work.
type phaseLoad struct {
	d    time.Duration
	rate float64
	work workFn
	// at, when set, runs in its own goroutine at the start of the phase (the drop scenario's
	// competing load); the phase waits for it to return before the next begins.
	at func(ctx context.Context, d time.Duration)
}

// offer runs t through phases of open-loop Poisson arrivals from stream; a warm-up of b.ac.warmup at
// the first phase's rate and work precedes the measurement when warm is set.
func (b *bench) offer(ctx context.Context, t *adTarget, phases []phaseLoad, stream uint64, warm bool) (runResult, error) {
	if warm && b.ac.warmup > 0 {
		b.arrivals(ctx, t, []phaseLoad{{d: b.ac.warmup, rate: phases[0].rate, work: phases[0].work}}, stream^0x5eed, nil)
	}
	var total time.Duration
	for _, p := range phases {
		total += p.d
	}
	start := time.Now()
	rec := newRecorder(start, total+b.ac.deadline+time.Second, b.ac.step)
	stop := make(chan struct{})
	var swg sync.WaitGroup
	swg.Add(1)
	go func() { // the limit, sampled four times per step
		defer swg.Done()
		tk := time.NewTicker(b.ac.step / 4)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-tk.C:
				if bk := rec.bucket(now); bk != nil {
					bk.limSum.Add(int64(t.limit()))
					bk.limN.Add(1)
				}
			}
		}
	}()
	arrived := b.arrivals(ctx, t, phases, stream, rec)
	close(stop)
	swg.Wait()
	if err := ctx.Err(); err != nil {
		return runResult{}, err
	}
	res := runResult{Contender: t.name, Arrivals: arrived,
		Success: rec.counts[cSuccess].Load(), Late: rec.counts[cLate].Load(), Refused: rec.counts[cRefused].Load(),
		Deadline: rec.counts[cDeadline].Load(), Other: rec.counts[cOther].Load()}
	if s := rec.other.Load(); s != nil {
		res.FirstOther = *s
	}
	res.Goodput = float64(res.Success) / total.Seconds()
	res.P50, res.P99 = rec.ok.quantile(0.5), rec.ok.quantile(0.99)
	steps := int(total / b.ac.step)
	for i := 0; i < steps && i < len(rec.buck); i++ {
		bk := &rec.buck[i]
		p := point1{T: (time.Duration(i) * b.ac.step).Seconds(), Goodput: float64(bk.ok.Load()) / b.ac.step.Seconds(),
			P99: bk.hist.quantile(0.99), Refused: bk.refused.Load(), hist: &bk.hist}
		if n := bk.limN.Load(); n > 0 {
			p.Limit = float64(bk.limSum.Load()) / float64(n)
		}
		res.Series = append(res.Series, p)
	}
	sleep(ctx, 300*time.Millisecond) // the server finishes cancelled work
	return res, nil
}

// arrivals offers the phases' arrivals to t, records them in rec (when not nil) and returns how
// many arrived, after the last one ended.
func (b *bench) arrivals(ctx context.Context, t *adTarget, phases []phaseLoad, stream uint64, rec *recorder) int64 {
	rng := rand.New(rand.NewPCG(stream, 0x9e3779b97f4a7c15))
	var wg sync.WaitGroup
	var n int64
	const maxInflight = 20000
	var inflight atomic.Int64
	for _, ph := range phases {
		if ctx.Err() != nil {
			break
		}
		start := time.Now()
		end := start.Add(ph.d)
		if ph.at != nil {
			wg.Add(1)
			go func() { defer wg.Done(); ph.at(ctx, ph.d) }()
		}
		next := start
		for ctx.Err() == nil {
			now := time.Now()
			for !next.After(now) && next.Before(end) {
				n++
				if inflight.Add(1) > maxInflight {
					inflight.Add(-1)
					if rec != nil {
						rec.counts[cOther].Add(1)
					}
				} else {
					wg.Add(1)
					go func(w workFn) {
						defer wg.Done()
						defer inflight.Add(-1)
						cctx, cancel := context.WithTimeout(ctx, b.ac.deadline)
						t0 := time.Now()
						err := t.do(cctx, w)
						t1 := time.Now()
						cerr := cctx.Err()
						cancel()
						if rec != nil {
							rec.record(t1, t1.Sub(t0), b.ac.deadline, err, cerr)
						}
					}(ph.work)
				}
				next = next.Add(time.Duration(rng.ExpFloat64() / ph.rate * float64(time.Second)))
			}
			if !next.Before(end) {
				break
			}
			if d := time.Until(next); d > 0 {
				time.Sleep(d)
			}
		}
		// Arrivals of the next phase start where this one's schedule ended.
		if d := time.Until(end); d > 0 {
			sleep(ctx, d)
		}
	}
	wg.Wait()
	return n
}

// rounds runs every contender in ts once per round, in an order that rotates from round to round,
// and returns the results by contender.
func (b *bench) rounds(ctx context.Context, ts []*adTarget, load float64, phases func() []phaseLoad, stream uint64, label string) (map[string][]runResult, error) {
	out := map[string][]runResult{}
	for r := range b.ac.rounds {
		for i := range ts {
			t := ts[(i+r)%len(ts)]
			res, err := b.offer(ctx, t, phases(), stream+uint64(r), true)
			if err != nil {
				return nil, err
			}
			res.Load, res.Round = load, r
			out[t.name] = append(out[t.name], res)
			b.printf("%s round %d %s: goodput %.0f/s p99 %v refused %d deadline %d other %d limit %.1f %s",
				label, r+1, t.name, res.Goodput, res.P99.Round(10*time.Microsecond), res.Refused, res.Deadline, res.Other, meanLimit(res.Series), res.FirstOther)
			if err := b.quiesce(ctx, t); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// quiesce waits until the server runs nothing more of t: a contender whose callers gave up
// mid-transaction may leave backends that still hold the hot row's lock or the CPU for a while,
// and the next contender must not pay for them.
func (b *bench) quiesce(ctx context.Context, t *adTarget) error {
	conn, err := pgx.Connect(ctx, b.ac.url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	deadline := time.Now().Add(10 * time.Second)
	for {
		var busy int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND state <> 'idle'", t.app).Scan(&busy); err != nil {
			return err
		}
		if busy == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			b.printf("%s: %d backends still busy 10s after its run", t.name, busy)
			return nil
		}
		sleep(ctx, 20*time.Millisecond)
	}
}

func meanLimit(s []point1) float64 {
	var sum float64
	var n int
	for _, p := range s {
		if p.Limit > 0 {
			sum += p.Limit
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// measureBase measures a scenario's capacity (closed loop on t, plain) and its unloaded p99 for
// work w, and prints both under the scenario's name.
func (b *bench) measureBase(ctx context.Context, name string, t *adTarget, w workFn) (float64, time.Duration, error) {
	capacity, err := b.capacity(ctx, t, w)
	if err != nil {
		return 0, 0, err
	}
	unl, err := b.unloadedP99(ctx, t, capacity, w)
	if err != nil {
		return 0, 0, err
	}
	b.printf("%s: capacity %.0f/s, unloaded p99 %v", name, capacity, unl)
	return capacity, unl, nil
}

// unloadedP99 measures the p99 of successes of t at 0.1× rate: the median of three runs, since
// one run's p99 is the few slowest of some hundred operations and varied by 2× between runs.
func (b *bench) unloadedP99(ctx context.Context, t *adTarget, rate float64, w workFn) (time.Duration, error) {
	var p99s []float64
	for i := range 3 {
		res, err := b.offer(ctx, t, []phaseLoad{{d: max(b.ac.duration, 3*time.Second), rate: rate / 10, work: w}}, 77+uint64(i), i == 0)
		if err != nil {
			return 0, err
		}
		p99s = append(p99s, float64(res.P99))
	}
	st := statOf(p99s)
	b.printf("unloaded p99 of %s: %v (%v–%v)", t.name, time.Duration(st.Median), time.Duration(st.Min), time.Duration(st.Max))
	return time.Duration(st.Median), nil
}

func (b *bench) cpuScenario(ctx context.Context, rep *adaptiveReport) error {
	fixed := make([]int, b.ac.P)
	for i := range fixed {
		fixed[i] = i + 1
	}
	ts, err := b.openSet(fixed, true)
	if err != nil {
		return err
	}
	defer closeAll(ts)
	w := cpuWork(b.ac.cpuRows)
	plain := ts[len(ts)-2]
	capacity, unl, err := b.measureBase(ctx, "cpu", plain, w)
	if err != nil {
		return err
	}
	res, err := b.rounds(ctx, ts, 5, func() []phaseLoad { return []phaseLoad{{d: b.ac.duration, rate: 5 * capacity, work: w}} }, 100, "cpu 5×")
	if err != nil {
		return err
	}
	rep.add(&scenarioResult{Name: "cpu", Title: fmt.Sprintf("CPU-bound query (sum over generate_series(1, %d)) at 5× capacity", b.ac.cpuRows),
		Capacity: capacity, Unloaded: unl, Loads: []float64{5}, Runs: res, Order: names(ts)})
	return nil
}

func (b *bench) sleepScenario(ctx context.Context, rep *adaptiveReport) error {
	ts, err := b.openSet([]int{b.ac.P}, true)
	if err != nil {
		return err
	}
	defer closeAll(ts)
	plain := ts[len(ts)-2]
	capacity, unl, err := b.measureBase(ctx, "sleep", plain, sleepWork)
	if err != nil {
		return err
	}
	sr := &scenarioResult{Name: "sleep", Title: "SELECT pg_sleep(0.005)", Capacity: capacity, Unloaded: unl, Runs: map[string][]runResult{}, Order: names(ts)}
	for li, load := range []float64{1, 5, 10} {
		res, err := b.rounds(ctx, ts, load, func() []phaseLoad { return []phaseLoad{{d: b.ac.duration, rate: load * capacity, work: sleepWork}} }, 200+uint64(li)*10, fmt.Sprintf("sleep %g×", load))
		if err != nil {
			return err
		}
		for k, v := range res {
			sr.Runs[k] = append(sr.Runs[k], v...)
		}
		sr.Loads = append(sr.Loads, load)
	}
	rep.add(sr)
	return nil
}

func (b *bench) lockScenario(ctx context.Context, rep *adaptiveReport) error {
	admin, err := pgx.Connect(ctx, b.ac.url)
	if err != nil {
		return err
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, "DROP TABLE IF EXISTS gatedbench_hot; CREATE TABLE gatedbench_hot (id int PRIMARY KEY, n bigint NOT NULL); INSERT INTO gatedbench_hot VALUES (1, 0)"); err != nil {
		return err
	}
	defer admin.Exec(context.Background(), "DROP TABLE IF EXISTS gatedbench_hot")
	ts, err := b.openSet([]int{b.ac.P}, true)
	if err != nil {
		return err
	}
	defer closeAll(ts)
	plain := ts[len(ts)-2]
	capacity, unl, err := b.measureBase(ctx, "lock", plain, lockWork)
	if err != nil {
		return err
	}
	res, err := b.rounds(ctx, ts, 5, func() []phaseLoad { return []phaseLoad{{d: b.ac.duration, rate: 5 * capacity, work: lockWork}} }, 300, "lock 5×")
	if err != nil {
		return err
	}
	rep.add(&scenarioResult{Name: "lock", Title: "one hot row: BEGIN; UPDATE … WHERE id = 1; COMMIT", Capacity: capacity, Unloaded: unl, Loads: []float64{5}, Runs: res, Order: names(ts)})
	return nil
}

// competingLoad runs n sessions of a CPU-bound query on the server for d. The statements are
// short (competeRows: 0.16 s alone on the test machine) and each runs with a statement_timeout
// of the time the phase has left, so that the load ends with the phase: pgx only stops waiting
// when its context ends, and a backend left running a long statement would go on taking the
// server's CPU after it, and after the benchmark if it dies.
func (b *bench) competingLoad(n int) func(ctx context.Context, d time.Duration) {
	return func(ctx context.Context, d time.Duration) {
		var wg sync.WaitGroup
		end := time.Now().Add(d)
		for range n {
			wg.Go(func() {
				conn, err := pgx.Connect(ctx, b.ac.url)
				if err != nil {
					b.printf("competing load: %v", err)
					return
				}
				defer conn.Close(context.Background())
				cctx, cancel := context.WithDeadline(ctx, end)
				defer cancel()
				for cctx.Err() == nil {
					left := max(time.Until(end).Milliseconds(), 1)
					if _, err := conn.Exec(cctx, "SELECT set_config('statement_timeout', $1, false)", strconv.FormatInt(left, 10)); err != nil {
						return
					}
					conn.Exec(cctx, fmt.Sprintf("SELECT sum(i) FROM generate_series(1, %d) AS s(i)", competeRows))
				}
			})
		}
		wg.Wait()
	}
}

// competeRows is the size of the competing load's statement.
const competeRows = 1000000

func (b *bench) dropScenario(ctx context.Context, rep *adaptiveReport) error {
	fixed := append(append([]int{1}, b.ac.dropFixed...), b.ac.P)
	ts, err := b.openSet(fixed, true)
	if err != nil {
		return err
	}
	defer closeAll(ts)
	// And B=1 without a queue: one operation at a time, none waiting, the lowest latency any
	// limit can give on the slowed server.
	floor, err := b.openGated("B=1 Q=0", "1", "gate_queue", "0")
	if err != nil {
		return err
	}
	defer floor.close()
	w := cpuWork(b.ac.cpuRows)
	// openSet's order: the fixed B, auto, plain, the peer.
	plain, peer := ts[len(ts)-2], ts[len(ts)-1]
	capacity, unl, err := b.measureBase(ctx, "drop", plain, w)
	if err != nil {
		return err
	}
	phase := 4 * b.ac.duration
	rate := 3 * capacity
	phases := func() []phaseLoad {
		return []phaseLoad{{d: phase, rate: rate, work: w}, {d: phase, rate: rate, work: w, at: b.competingLoad(b.ac.compete)}, {d: phase, rate: rate, work: w}}
	}
	// B=1 Q=0, the fixed B, auto, the peer; not plain.
	keep := append(append([]*adTarget{floor}, ts[:len(ts)-2]...), peer)
	if b.ac.dropOnly != "" {
		only, all := strings.Split(b.ac.dropOnly, ","), names(keep)
		for _, n := range only {
			if !slices.Contains(all, n) {
				return fmt.Errorf("-drop-contenders: no contender %q (there are %q)", n, all)
			}
		}
		keep = slices.DeleteFunc(keep, func(t *adTarget) bool { return !slices.Contains(only, t.name) })
	}
	saved := b.ac.rounds
	b.ac.rounds = max(1, saved/2)
	res, err := b.rounds(ctx, keep, 3, phases, 400, "drop 3×")
	b.ac.rounds = saved
	if err != nil {
		return err
	}
	rep.add(&scenarioResult{Name: "drop", Title: fmt.Sprintf("capacity drop: CPU-bound query at 3×; %d competing CPU-bound sessions from %v to %v", b.ac.compete, phase, 2*phase),
		Capacity: capacity, Unloaded: unl, Loads: []float64{3}, Runs: res, Order: names(keep), Phase: phase})
	return nil
}

func (b *bench) failScenario(ctx context.Context, rep *adaptiveReport) error {
	t, err := b.openGated("auto", b.ac.auto, "gate_statement_timeout", "50ms")
	if err != nil {
		return err
	}
	defer t.close()
	w := cpuWork(b.ac.cpuRows)
	capacity, err := b.capacity(ctx, t, w)
	if err != nil {
		return err
	}
	phase := 2 * b.ac.duration
	res, err := b.offer(ctx, t, []phaseLoad{
		{d: phase, rate: 2 * capacity, work: w},
		{d: phase, rate: 2 * capacity, work: failWork},
		{d: phase, rate: 2 * capacity, work: timeoutWork},
	}, 500, true)
	if err != nil {
		return err
	}
	res.Contender, res.Load = "auto", 2
	b.printf("fail: %+v", res.Series)
	rep.add(&scenarioResult{Name: "fail", Title: "auto on the CPU-bound query at 2×, then failing at once (1/0), then timing out (pg_sleep(1), gate_statement_timeout=50ms)",
		Capacity: capacity, Loads: []float64{2}, Runs: map[string][]runResult{"auto": {res}}, Order: []string{"auto"}, Phase: phase})
	return nil
}

func (b *bench) steadyScenario(ctx context.Context, rep *adaptiveReport) error {
	t, err := b.openGated("auto", b.ac.auto)
	if err != nil {
		return err
	}
	defer t.close()
	plain, err := b.openPlainTarget()
	if err != nil {
		return err
	}
	defer plain.close()
	w := cpuWork(b.ac.cpuRows)
	// Plain's, as in the other scenarios: a closed loop on auto would measure its cold start
	// (the descent from its ceiling), not the server.
	capacity, err := b.capacity(ctx, plain, w)
	if err != nil {
		return err
	}
	saved := b.ac.step
	b.ac.step = time.Second
	res, err := b.offer(ctx, t, []phaseLoad{{d: b.ac.steady, rate: 2 * capacity, work: w}}, 600, true)
	b.ac.step = saved
	if err != nil {
		return err
	}
	res.Contender, res.Load = "auto", 2
	rep.add(&scenarioResult{Name: "steady", Title: fmt.Sprintf("steady 2× overload on the CPU-bound query for %v", b.ac.steady),
		Capacity: capacity, Loads: []float64{2}, Runs: map[string][]runResult{"auto": {res}}, Order: []string{"auto"}})
	return nil
}

// lendScenario: web (B 6, default workload) and batch (B 2) on P = 8. Web is offered sleep
// queries at 2× its capacity at B 6; batch is idle, then saturated with pg_sleep(0.05) at 10×
// its capacity. Contenders: lending off and on.
func (b *bench) lendScenario(ctx context.Context, rep *adaptiveReport) error {
	if b.ac.P != 8 {
		return errors.New("the lend scenario needs -P 8")
	}
	type variant struct {
		name string
		wl   string
	}
	variants := []variant{{"no lending", "batch:2:2:" + b.ac.deadline.String()}, {"lending", "batch:2:2:" + b.ac.deadline.String() + ":lend"}}
	var ts []*adTarget
	for _, v := range variants {
		t, err := b.openGated(v.name, "6", "gate_workloads", v.wl, "gate_queue", "6")
		if err != nil {
			closeAll(ts)
			return err
		}
		ts = append(ts, t)
	}
	defer closeAll(ts)
	webRate := 2 * 6 / 0.0055
	batchRate := 10 * 2 / 0.05
	batchWork := func(ctx context.Context, db *sql.DB) error {
		return queryWork("SELECT 1::bigint FROM pg_sleep($1)", 0.05)(gated.WithWorkload(ctx, "batch"), db)
	}
	sr := &scenarioResult{Name: "lend", Title: "web (B 6, pg_sleep(0.005) at 2× its capacity) beside batch (B 2), P = 8", Runs: map[string][]runResult{}, Loads: []float64{2}}
	for _, batch := range []bool{false, true} {
		label := "batch idle"
		if batch {
			label = "batch saturated"
		}
		for r := range b.ac.rounds {
			for i := range ts {
				t := ts[(i+r)%len(ts)]
				var stopBatch func()
				if batch {
					stopBatch = b.background(ctx, t, batchRate, batchWork)
				}
				res, err := b.offer(ctx, t, []phaseLoad{{d: b.ac.duration, rate: webRate, work: sleepWork}}, 700+uint64(r), true)
				if stopBatch != nil {
					stopBatch()
				}
				if err != nil {
					return err
				}
				res.Contender, res.Load = t.name+", "+label, 2
				sr.Runs[res.Contender] = append(sr.Runs[res.Contender], res)
				b.printf("lend %s round %d: goodput %.0f/s p99 %v refused %d", res.Contender, r+1, res.Goodput, res.P99, res.Refused)
			}
		}
		for _, t := range ts {
			sr.Order = append(sr.Order, t.name+", "+label)
		}
	}
	rep.add(sr)
	return nil
}

// background offers work to t at rate until the returned function is called, which waits for it.
func (b *bench) background(ctx context.Context, t *adTarget, rate float64, w workFn) func() {
	bctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.arrivals(bctx, t, []phaseLoad{{d: time.Hour, rate: rate, work: w}}, 99, nil)
	}()
	sleep(ctx, 500*time.Millisecond) // batch's queue fills before web's measurement
	return func() { cancel(); <-done }
}

func (b *bench) overheadScenario(ctx context.Context, rep *adaptiveReport) error {
	fixed, err := b.openGated("B=P", strconv.Itoa(b.ac.P), "gate_queue", "64")
	if err != nil {
		return err
	}
	defer fixed.close()
	auto, err := b.openGated("auto", b.ac.auto, "gate_queue", "64")
	if err != nil {
		return err
	}
	defer auto.close()
	sel := queryWork("SELECT $1::bigint", 1)
	or := &overheadResult{}
	for _, g := range []int{1, 32} {
		var ratios []float64
		var fops, aops []float64
		var lims [2]limitMean
		for r := range 2 * b.ac.rounds {
			var ops [2]float64
			for i := range 2 {
				t := []*adTarget{fixed, auto}[(i+r)%2]
				workers := make([]workerState, g)
				stop := b.limitSampler(t, &lims[(i+r)%2])
				lr, err := closedLoop(ctx, func(ctx context.Context, _ int) error { return t.do(ctx, sel) }, workers, 200*time.Millisecond, b.ac.overheadRun)
				stop()
				if err != nil {
					return err
				}
				ops[(i+r)%2] = lr.sample().OpsPerSec
			}
			fops, aops = append(fops, ops[0]), append(aops, ops[1])
			ratios = append(ratios, ops[0]/ops[1])
		}
		or.Rows = append(or.Rows, overheadRow{Goroutines: g, Fixed: statOf(fops), Auto: statOf(aops), Ratio: statOf(ratios), AutoLimit: lims[1].mean(), AutoLimitMin: lims[1].min})
		b.printf("overhead %d goroutines: auto/fixed time per op %v; auto's limit mean %.2f, lowest %d", g, statOf(ratios), lims[1].mean(), lims[1].min)
	}
	rep.overhead = or
	return nil
}

// A limitMean accumulates samples of a contender's limit.
type limitMean struct {
	sum, n int
	min    int
}

func (m *limitMean) mean() float64 {
	if m.n == 0 {
		return 0
	}
	return float64(m.sum) / float64(m.n)
}

// limitSampler samples t's limit every millisecond into m until the returned stop is called.
func (b *bench) limitSampler(t *adTarget, m *limitMean) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				l := t.limit()
				if m.n == 0 || l < m.min {
					m.min = l
				}
				m.sum, m.n = m.sum+l, m.n+1
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

func names(ts []*adTarget) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.name)
	}
	return out
}
