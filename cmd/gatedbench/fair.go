package main

// gatedbench fair: tenants (gated.WithTenant) and priorities (gated.WithPriority) inside one
// workload's gate, on PostgreSQL. One gated *sql.DB with gate_max_conns = gate_concurrent = P,
// gate_queue = Q and gate_queue_wait (8, 8 and 50ms by default) serves every phase but the
// lockstep ones, which open their own; every call has a deadline of its own (1 s). Each round
// runs, in this order:
//
//   - unloaded: one worker alone, SELECT pg_sleep(0.02), no tenant: the p99 the others are judged
//     against.
//   - noisy: the tenant "noisy" alone with 64 closed-loop workers that retry at once after any
//     error (its goodput is the reference), then the same 64 beside seven tenants "small-1" ..
//     "small-7" of one worker each, which pause 20 ms after a failure. The mixed load runs twice,
//     in an order that alternates between rounds: with every context carrying its tenant
//     ("tenants"), and with no context carrying one ("no tenants", the single FIFO queue).
//   - priority: one worker whose context carries gated.PriorityHigh (pausing 20 ms after a
//     failure) beside 64 workers of normal priority that never back off; beside it the same load
//     with no priority set ("no priority").
//   - lockstep: the same 64 workers and query, each arriving at a random moment within the
//     warm-up, once on plain database/sql (SetMaxOpenConns(P)) and once on a gated *sql.DB whose
//     queue holds them all (gate_queue = 64, gate_queue_wait = the deadline), so that nobody is
//     refused: how the successes are spaced in time. Permits come back only as often as queries
//     end; when the P connections end their queries together, a caller that just missed a
//     release waits for the next group of them, whatever the gate's order.
//   - cardinality: N distinct tenant keys (200,000), one SELECT 1 each, from 64 workers, so that
//     calls queue: the heap (HeapAlloc after runtime.GC) before and after, with the *sql.DB open
//     throughout, so that whatever the gate keeps of the keys is counted; beside it the same calls
//     with no tenant. The keys differ from round to round. With more workers than B+Q most calls
//     find admission full and are refused at once; -card-workers 16 (B+Q) makes every call wait
//     for a permit or run.
//
// Every phase also reports how its successes are spaced: the share that ended within 1 ms of the
// one before, and the gaps between them. For the small tenants and the high-priority worker it
// gives, beside their wait in the gate, the least wait any order of service could have given
// them (a permit comes back with the next release at the earliest) and their statement's time
// inside the driver.
//
// Every call ends as a success or as one failure kind: displaced (gated.ErrAdmissionDisplaced),
// full (ErrAdmissionFull), timeout (ErrAdmissionTimeout), deadline (the call's own deadline) or
// other. The report gives medians over rounds with min–max (fair.md in -out, and stdout).
//
// The full measurement (about four minutes; run it with the machine otherwise idle):
//
//	go run ./cmd/gatedbench fair -rounds 5 -phase 5s
//
// A smoke run: go run ./cmd/gatedbench fair -rounds 1 -phase 2s

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
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
)

// fairScenarios are the scenarios of gatedbench fair, in run order.
var fairScenarios = []string{"noisy", "priority", "lockstep", "cardinality"}

// Contenders: the same load with and without the classes in the callers' contexts.
const (
	withTenants = "tenants"
	noTenants   = "no tenants"
	withHigh    = "high"
	noPriority  = "no priority"
	onPlain     = "plain database/sql"
	onGated     = "gated"
)

// Groups of callers in a phase.
const (
	noisyGroup  = "noisy"
	highGroup   = "high"
	normalGroup = "normal"
	aloneGroup  = "alone"
	lockGroup   = "lockstep"
)

type fairConfig struct {
	url, out  string
	P, Q      int
	queueWait time.Duration // gate_queue_wait
	deadline  time.Duration // every call's own deadline
	phase     time.Duration // measured time of a phase
	warmup    time.Duration // unmeasured time before it, extended until every worker's first call ended
	rounds    int
	noisy     int           // workers that never back off: the noisy tenant's and the normal-priority ones
	cardW     int           // cardinality: workers
	small     int           // small tenants, one worker each
	pause     time.Duration // what a small tenant's (and the high-priority) worker waits after a failure
	sleep     time.Duration // pg_sleep of the query of the noisy and priority scenarios
	keys      int           // cardinality: distinct tenant keys, one call each
	scenarios []string
	note      string
	command   string
}

func fairDefaults() fairConfig {
	return fairConfig{out: "gatedbench-out", P: 8, Q: 8, queueWait: 50 * time.Millisecond, deadline: time.Second,
		phase: 5 * time.Second, warmup: 500 * time.Millisecond, rounds: 5, noisy: 64, cardW: 64, small: 7,
		pause: 20 * time.Millisecond, sleep: 20 * time.Millisecond, keys: 200000, scenarios: fairScenarios}
}

// parseFairFlags turns the arguments of "gatedbench fair" into a fairConfig.
func parseFairFlags(args []string, log io.Writer) (fairConfig, error) {
	fc := fairDefaults()
	fs := flag.NewFlagSet("gatedbench fair", flag.ContinueOnError)
	fs.SetOutput(log)
	fs.StringVar(&fc.url, "url", os.Getenv("DATABASE_URL"), "PostgreSQL URL (default $DATABASE_URL, then the server the tests find)")
	fs.StringVar(&fc.out, "out", fc.out, "output `dir` for fair.md")
	fs.IntVar(&fc.P, "P", fc.P, "physical connections and execution permits (gate_max_conns = gate_concurrent)")
	fs.IntVar(&fc.Q, "Q", fc.Q, "gated's gate_queue")
	fs.DurationVar(&fc.queueWait, "queue-wait", fc.queueWait, "gated's gate_queue_wait")
	fs.DurationVar(&fc.deadline, "deadline", fc.deadline, "every call's own deadline")
	fs.DurationVar(&fc.phase, "phase", fc.phase, "measured time of each phase")
	fs.DurationVar(&fc.warmup, "warmup", fc.warmup, "unmeasured time before each phase, at its load")
	fs.IntVar(&fc.rounds, "rounds", fc.rounds, "rounds; the report gives medians over them")
	fs.IntVar(&fc.noisy, "noisy", fc.noisy, "workers that never back off: the noisy tenant's and the normal-priority ones")
	fs.IntVar(&fc.cardW, "card-workers", fc.cardW, "cardinality: workers; with more than P+Q most calls are refused at once, with P+Q or fewer every call waits or runs")
	fs.IntVar(&fc.small, "small", fc.small, "small tenants of one worker each")
	fs.DurationVar(&fc.pause, "pause", fc.pause, "what a small tenant's worker, and the high-priority one, waits after a failure")
	fs.DurationVar(&fc.sleep, "sleep", fc.sleep, "pg_sleep of the query of the noisy and priority scenarios")
	fs.IntVar(&fc.keys, "keys", fc.keys, "cardinality: distinct tenant keys, one call each")
	fs.StringVar(&fc.note, "note", "", "a note printed at the top of the report, for example about a shared machine")
	scen := fs.String("scenarios", strings.Join(fairScenarios, ","), "scenarios: "+strings.Join(fairScenarios, ","))
	if err := fs.Parse(args); err != nil {
		return fc, err
	}
	if fs.NArg() > 0 {
		return fc, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	fc.scenarios = nil
	for s := range strings.SplitSeq(*scen, ",") {
		s = strings.TrimSpace(s)
		if !slices.Contains(fairScenarios, s) {
			return fc, fmt.Errorf("-scenarios: unknown scenario %q (%s)", s, strings.Join(fairScenarios, ", "))
		}
		if !slices.Contains(fc.scenarios, s) {
			fc.scenarios = append(fc.scenarios, s)
		}
	}
	switch {
	case fc.P < 1 || fc.Q < 0:
		return fc, errors.New("-P must be at least 1 and -Q at least 0")
	case fc.rounds < 1:
		return fc, errors.New("-rounds must be at least 1")
	case fc.noisy < 1 || fc.cardW < 1 || fc.small < 1 || fc.keys < 1:
		return fc, errors.New("-noisy, -card-workers, -small and -keys must be at least 1")
	case fc.phase <= 0 || fc.deadline <= 0 || fc.queueWait < 0 || fc.warmup < 0 || fc.pause < 0 || fc.sleep < 0:
		return fc, errors.New("-phase and -deadline must be positive; -queue-wait, -warmup, -pause and -sleep not negative")
	}
	fc.command = commandLine(append([]string{"fair"}, args...))
	return fc, nil
}

func (fc fairConfig) runs(s string) bool { return slices.Contains(fc.scenarios, s) }

// estimate is the time of fc's phases, the cardinality runs (a fixed number of calls) left out.
func (fc fairConfig) estimate() time.Duration {
	phases := 0
	if fc.runs("noisy") || fc.runs("priority") {
		phases++ // unloaded
	}
	if fc.runs("noisy") {
		phases += 3
	}
	if fc.runs("priority") {
		phases += 2
	}
	if fc.runs("lockstep") {
		phases += 2
	}
	return time.Duration(fc.rounds*phases) * (fc.phase + fc.warmup)
}

// smallNames are the small tenants' names: small-1 .. small-n.
func smallNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "small-" + strconv.Itoa(i+1)
	}
	return out
}

// sleepQuery is the query of the noisy and priority scenarios.
func (fc fairConfig) sleepQuery() string {
	return fmt.Sprintf("SELECT pg_sleep(%g)", fc.sleep.Seconds())
}

// runFairCmd is "gatedbench fair". It returns the process's exit code.
func runFairCmd(args []string, out, log io.Writer) int {
	fc, err := parseFairFlags(args, log)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(log, "gatedbench fair:", err)
		return 2
	}
	defer pgtest.Cleanup()
	if fc.url == "" {
		u, err := pgtest.Lookup()
		if err != nil {
			fmt.Fprintln(log, "gatedbench fair: no server:", err)
			return 1
		}
		fc.url = u
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := os.MkdirAll(fc.out, 0o755); err != nil {
		fmt.Fprintln(log, "gatedbench fair:", err)
		return 1
	}
	rep, err := runFair(ctx, fc, log)
	if err != nil {
		fmt.Fprintln(log, "gatedbench fair:", err)
		return 1
	}
	if err := rep.write(out); err != nil {
		fmt.Fprintln(log, "gatedbench fair:", err)
		return 1
	}
	return 0
}

// Failure kinds of a call.
const (
	kindDisplaced = iota
	kindFull
	kindTimeout
	kindDeadline
	kindOther
	numKinds
)

var kindNames = [numKinds]string{"displaced", "full", "timeout", "deadline", "other"}

// failKind classifies the error of a failed call; ctxErr is the error of the call's context
// when it returned.
func failKind(err, ctxErr error) int {
	switch {
	case errors.Is(err, gated.ErrAdmissionDisplaced):
		return kindDisplaced
	case errors.Is(err, gated.ErrAdmissionFull):
		return kindFull
	case errors.Is(err, gated.ErrAdmissionTimeout):
		return kindTimeout
	case ctxErr != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return kindDeadline
	}
	return kindOther
}

// A tally counts the calls of one worker or group: how each ended, and the latency of the
// successes.
type tally struct {
	Calls, OK  int64
	Fail       [numKinds]int64
	Hist       histogram // successes
	Wait       histogram // the gate's wait of the calls admitted (EventAdmitted), when observed
	Next       histogram // of the successes: the least any order of service could have made them wait (toNextRelease), when observed
	Stmt       histogram // of the successes: the time inside the driver of their statement (EventStatement), when observed
	FirstOther string    // the first error of kind other
}

// add counts one call that took d and returned err, its context's error being ctxErr.
func (t *tally) add(err, ctxErr error, d time.Duration) {
	t.Calls++
	if err == nil {
		t.OK++
		t.Hist.record(d)
		return
	}
	k := failKind(err, ctxErr)
	t.Fail[k]++
	if k == kindOther && t.FirstOther == "" {
		t.FirstOther = err.Error()
	}
}

func (t *tally) merge(o *tally) {
	t.Calls += o.Calls
	t.OK += o.OK
	for k := range t.Fail {
		t.Fail[k] += o.Fail[k]
	}
	t.Hist.merge(&o.Hist)
	t.Wait.merge(&o.Wait)
	t.Next.merge(&o.Next)
	t.Stmt.merge(&o.Stmt)
	if t.FirstOther == "" {
		t.FirstOther = o.FirstOther
	}
}

// successRate is the share of the calls that succeeded (0 without calls).
func (t *tally) successRate() float64 {
	if t.Calls == 0 {
		return 0
	}
	return float64(t.OK) / float64(t.Calls)
}

func (t *tally) p99() time.Duration { return t.Hist.quantile(0.99) }

// A fairWorker is one closed-loop caller of a phase.
type fairWorker struct {
	group string                                // the tally it counts in
	class func(context.Context) context.Context // adds its tenant or priority; nil for none
	pause time.Duration                         // wait after a failure; 0 retries at once
	start time.Duration                         // wait before its first call
}

// workers returns n workers of group, with class and pause.
func workers(n int, group string, class func(context.Context) context.Context, pause time.Duration) []fairWorker {
	return slices.Repeat([]fairWorker{{group: group, class: class, pause: pause}}, n)
}

func tenant(key string) func(context.Context) context.Context {
	return func(ctx context.Context) context.Context { return gated.WithTenant(ctx, key) }
}

func priority(p gated.Priority) func(context.Context) context.Context {
	return func(ctx context.Context) context.Context { return gated.WithPriority(ctx, p) }
}

// phaseResult is one measured phase: a tally per group, the length of the window, and how the
// successes of all groups were spaced in it.
type phaseResult struct {
	Elapsed time.Duration
	Groups  map[string]*tally
	Spacing spacing
}

// spacing says how the successes of a phase were spaced in time: the share of them that ended
// within 1 ms of the success before, and the quantiles of the gaps between successive ones.
// Evenly spaced, every gap would be Even, the window over the successes.
type spacing struct {
	Close         float64
	P50, P90, P99 time.Duration
	Even          time.Duration
}

// spacingOf is the spacing of the successes that ended at ends (in any order) within a window
// of length window.
func spacingOf(ends []time.Time, window time.Duration) spacing {
	if len(ends) < 2 {
		return spacing{}
	}
	ends = slices.SortedFunc(slices.Values(ends), time.Time.Compare)
	var gaps histogram
	close := 0
	for i := 1; i < len(ends); i++ {
		g := ends[i].Sub(ends[i-1])
		gaps.record(g)
		if g < time.Millisecond {
			close++
		}
	}
	return spacing{Close: float64(close) / float64(len(ends)-1), P50: gaps.quantile(0.5), P90: gaps.quantile(0.9),
		P99: gaps.quantile(0.99), Even: window / time.Duration(len(ends))}
}

// goodput is the successes per second of the groups named (all groups when none are).
func (p *phaseResult) goodput(groups ...string) float64 {
	if p == nil || p.Elapsed <= 0 {
		return 0
	}
	var ok int64
	for name, t := range p.Groups {
		if len(groups) == 0 || slices.Contains(groups, name) {
			ok += t.OK
		}
	}
	return float64(ok) / p.Elapsed.Seconds()
}

// group returns the tally of name (an empty one when the phase has none).
func (p *phaseResult) group(name string) *tally {
	if t := p.Groups[name]; t != nil {
		return t
	}
	return &tally{}
}

// workerKey is the context key of a fairPhase worker's index, for its Observer.
type workerKey struct{}

// fairPhase runs ws closed loop: each calls call with a context of its own class and a deadline
// of deadline, for warmup and until every worker's first call ended, then for dur; the calls that
// end within dur are counted in their worker's group, and the times the successes ended in the
// phase's spacing. With attach (nil: none), an Observer on the gate adds, for the same calls:
//   - the gate's wait of each admitted one (EventAdmitted);
//   - the time inside the driver of each success's statement (EventStatement);
//   - for each success, the least wait any order of service could have given it
//     (toNextRelease), from the releases of permits by anyone (EventHold, which gated emits just
//     before it gives the permit back).
//
// gated emits EventAdmitted and EventStatement on the calling goroutine. It returns an error
// only when ctx ends.
func fairPhase(ctx context.Context, call op, ws []fairWorker, deadline, warmup, dur time.Duration, attach func(gated.Observer) func()) (*phaseResult, error) {
	var l loopWindow
	tallies := make([]tally, len(ws))
	waited := make([]time.Duration, len(ws)) // the gate's wait of worker i's call (-1: not admitted), set on its goroutine
	stmt := make([]time.Duration, len(ws))   // the time inside the driver of its statement (-1: none), the same
	admitted := make([][]admittedCall, len(ws))
	var relMu sync.Mutex
	var releases []time.Time
	if attach != nil {
		detach := attach(gated.ObserverFunc(func(e gated.Event) {
			switch e.Kind {
			case gated.EventHold:
				now := time.Now()
				relMu.Lock()
				releases = append(releases, now)
				relMu.Unlock()
			case gated.EventAdmitted, gated.EventStatement:
				if e.Context == nil {
					return
				}
				if i, ok := e.Context.Value(workerKey{}).(int); ok {
					if e.Kind == gated.EventAdmitted {
						waited[i] = e.Duration
					} else {
						stmt[i] = e.Duration
					}
				}
			}
		}))
		defer detach()
	}
	wctxs := make([]context.Context, len(ws))
	pauses := make([]*time.Timer, len(ws))
	ends := make([][]time.Time, len(ws))
	wait := func(i int, d time.Duration) {
		if pauses[i] == nil {
			pauses[i] = time.NewTimer(d)
		} else {
			pauses[i].Reset(d)
		}
		select {
		case <-pauses[i].C:
		case <-l.stop:
		case <-ctx.Done():
		}
	}
	for i, w := range ws {
		wctxs[i] = context.WithValue(ctx, workerKey{}, i)
		if w.class != nil {
			wctxs[i] = w.class(wctxs[i])
		}
	}
	started := make([]bool, len(ws))
	elapsed := l.run(ctx, len(ws), warmup, dur, func(i int) {
		w := ws[i]
		if !started[i] {
			started[i] = true
			if w.start > 0 {
				wait(i, w.start)
			}
		}
		cctx, cancel := context.WithTimeout(wctxs[i], deadline)
		waited[i], stmt[i] = -1, -1
		t0 := time.Now()
		err := call(cctx, i)
		end := time.Now()
		ctxErr := cctx.Err()
		cancel()
		if l.measuring() {
			tallies[i].add(err, ctxErr, end.Sub(t0))
			if waited[i] >= 0 {
				tallies[i].Wait.record(waited[i])
			}
			if err == nil {
				ends[i] = append(ends[i], end)
				if stmt[i] >= 0 {
					tallies[i].Stmt.record(stmt[i])
				}
				if waited[i] >= 0 {
					admitted[i] = append(admitted[i], admittedCall{at: t0, wait: waited[i]})
				}
			}
		}
		if err != nil && w.pause > 0 {
			wait(i, w.pause)
		}
	}, nil, nil)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	relMu.Lock()
	slices.SortFunc(releases, time.Time.Compare)
	for i := range admitted {
		toNextRelease(&tallies[i].Next, releases, admitted[i])
	}
	relMu.Unlock()
	res := &phaseResult{Elapsed: elapsed, Groups: map[string]*tally{}, Spacing: spacingOf(slices.Concat(ends...), elapsed)}
	for i, w := range ws {
		g := res.Groups[w.group]
		if g == nil {
			g = &tally{}
			res.Groups[w.group] = g
		}
		g.merge(&tallies[i])
	}
	return res, nil
}

// An admittedCall is a call that got its permit: when it was made, and how long it waited in
// the gate.
type admittedCall struct {
	at   time.Time
	wait time.Duration
}

// toNextRelease records in h, for every call, the least any order of service could have made it
// wait: its own wait, or the time from the call to the first of releases (sorted) after it when
// that is shorter. A permit is free at once, or comes back with the next release at the
// earliest, to whichever waiter the gate chooses.
func toNextRelease(h *histogram, releases []time.Time, calls []admittedCall) {
	for _, c := range calls {
		least := c.wait
		if k, _ := slices.BinarySearchFunc(releases, c.at, time.Time.Compare); k < len(releases) {
			least = min(least, releases[k].Sub(c.at))
		}
		h.record(least)
	}
}

// cardResult is one cardinality run.
type cardResult struct {
	Keys    int           // distinct tenant keys (0: no tenant)
	Total   tally         // every call
	Elapsed time.Duration // of the calls
	Growth  int64         // HeapAlloc after the calls minus before, both after runtime.GC
	Waiting int           // the gate's waiting operations after the calls (should be 0)
}

// heapAfterGC returns HeapAlloc right after a garbage collection.
func heapAfterGC() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// cardinality makes n calls of call from nw workers, call i with tenant key prefix+i when
// tenants is set and with none otherwise, and measures the heap before and after. db stays open
// throughout, so that what the gate keeps of the keys is in the second reading.
func cardinality(ctx context.Context, call op, gate *gated.Connector, nw, n int, prefix string, tenants bool, deadline time.Duration) (*cardResult, error) {
	tallies := make([]tally, nw) // allocated before the first reading, and kept alive to the second
	var next atomic.Int64
	var wg sync.WaitGroup
	before := heapAfterGC()
	t0 := time.Now()
	for w := range nw {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				cctx := ctx
				if tenants {
					cctx = gated.WithTenant(ctx, prefix+strconv.FormatInt(i, 10))
				}
				cctx, cancel := context.WithTimeout(cctx, deadline)
				c0 := time.Now()
				err := call(cctx, w)
				d := time.Since(c0)
				ctxErr := cctx.Err()
				cancel()
				tallies[w].add(err, ctxErr, d)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(t0)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	after := heapAfterGC()
	res := &cardResult{Elapsed: elapsed, Growth: int64(after) - int64(before)}
	if tenants {
		res.Keys = n
	}
	for i := range tallies {
		res.Total.merge(&tallies[i])
	}
	runtime.KeepAlive(tallies)
	if gate != nil {
		res.Waiting = gate.Stats().Waiting
	}
	return res, nil
}

// fairRound is what one round measured; a scenario not run leaves its fields nil.
type fairRound struct {
	Unloaded   time.Duration           // p99 of one worker alone
	UnloadedSt time.Duration           // p99 of its statement time
	NoisyAlone *phaseResult            // the noisy tenant alone
	Noisy      map[string]*phaseResult // the mixed load, by contender
	Priority   map[string]*phaseResult // by contender
	Lockstep   map[string]*phaseResult // by contender
	Card       map[string]*cardResult  // by contender
}

// runFair runs every round of fc's scenarios on one gated *sql.DB.
func runFair(ctx context.Context, fc fairConfig, log io.Writer) (*fairReport, error) {
	app := fmt.Sprintf("gatedbench_%d_fair", os.Getpid())
	dsn, err := withParams(fc.url, "application_name", app, "gate_max_conns", strconv.Itoa(fc.P),
		"gate_concurrent", strconv.Itoa(fc.P), "gate_queue", strconv.Itoa(fc.Q), "gate_queue_wait", fc.queueWait.String())
	if err != nil {
		return nil, err
	}
	db, err := gated.Open(dsn)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	gate, _ := gated.FromDB(db)
	rep := &fairReport{cfg: fc, start: time.Now(), load: loadAvg(), cpus: runtime.NumCPU()}
	if err := db.QueryRowContext(ctx, "SHOW server_version").Scan(&rep.server); err != nil {
		return nil, fmt.Errorf("asking the server its version: %w", err)
	}
	p := &progress{w: log, start: time.Now()}
	p.printf("fair: P=B=%d Q=%d gate_queue_wait=%v deadline=%v; %d rounds of %v phases (+%v warm-up); scenarios %s; estimated %v and the cardinality runs",
		fc.P, fc.Q, fc.queueWait, fc.deadline, fc.rounds, fc.phase, fc.warmup, strings.Join(fc.scenarios, ","), fc.estimate().Round(time.Second))

	sleepQ, oneQ := fc.sleepQuery(), "SELECT 1"
	exec := func(q string) op {
		return func(ctx context.Context, _ int) error {
			_, err := db.ExecContext(ctx, q)
			return err
		}
	}
	sleepCall, oneCall := exec(sleepQ), exec(oneQ)
	phase := func(ws []fairWorker) (*phaseResult, error) {
		return fairPhase(ctx, sleepCall, ws, fc.deadline, fc.warmup, fc.phase, gate.Attach)
	}
	small := smallNames(fc.small)
	for r := range fc.rounds {
		var rd fairRound
		// Odd rounds run the contender without classes first.
		order := func(with, without string) []string {
			if r%2 == 1 {
				return []string{without, with}
			}
			return []string{with, without}
		}
		if fc.runs("noisy") || fc.runs("priority") {
			res, err := phase(workers(1, aloneGroup, nil, 0))
			if err != nil {
				return nil, err
			}
			rd.Unloaded, rd.UnloadedSt = res.group(aloneGroup).p99(), res.group(aloneGroup).Stmt.quantile(0.99)
			p.printf("round %d/%d unloaded: p99 %s over %d calls (%d failed)", r+1, fc.rounds, fmtDur(rd.Unloaded),
				res.group(aloneGroup).Calls, res.group(aloneGroup).Calls-res.group(aloneGroup).OK)
		}
		if fc.runs("noisy") {
			if rd.NoisyAlone, err = phase(workers(fc.noisy, noisyGroup, tenant(noisyGroup), 0)); err != nil {
				return nil, err
			}
			p.printf("round %d/%d noisy alone: goodput %.0f/s", r+1, fc.rounds, rd.NoisyAlone.goodput())
			rd.Noisy = map[string]*phaseResult{}
			for _, c := range order(withTenants, noTenants) {
				class := func(key string) func(context.Context) context.Context {
					if c == withTenants {
						return tenant(key)
					}
					return nil
				}
				ws := workers(fc.noisy, noisyGroup, class(noisyGroup), 0)
				for _, s := range small {
					ws = append(ws, workers(1, s, class(s), fc.pause)...)
				}
				res, err := phase(ws)
				if err != nil {
					return nil, err
				}
				rd.Noisy[c] = res
				w := worstSmall(res, small)
				p.printf("round %d/%d noisy %s: worst small success %.2f %% (%s), p99 %s (%s); goodput %.0f/s (noisy %.0f/s)",
					r+1, fc.rounds, c, 100*w.Rate, w.RateOf, fmtDur(w.P99), w.P99Of, res.goodput(), res.goodput(noisyGroup))
			}
		}
		if fc.runs("priority") {
			rd.Priority = map[string]*phaseResult{}
			for _, c := range order(withHigh, noPriority) {
				var class func(context.Context) context.Context
				if c == withHigh {
					class = priority(gated.PriorityHigh)
				}
				res, err := phase(append(workers(1, highGroup, class, fc.pause), workers(fc.noisy, normalGroup, nil, 0)...))
				if err != nil {
					return nil, err
				}
				rd.Priority[c] = res
				h := res.group(highGroup)
				p.printf("round %d/%d priority %s: high success %.2f %% of %d, p99 %s; normal goodput %.0f/s",
					r+1, fc.rounds, c, 100*h.successRate(), h.Calls, fmtDur(h.p99()), res.goodput(normalGroup))
			}
		}
		if fc.runs("lockstep") {
			rd.Lockstep = map[string]*phaseResult{}
			for _, c := range order(onGated, onPlain) {
				res, err := lockstep(ctx, fc, c, app)
				if err != nil {
					return nil, err
				}
				rd.Lockstep[c] = res
				s := res.Spacing
				p.printf("round %d/%d lockstep %s: goodput %.0f/s; %.0f %% of successes within 1 ms of the one before; gaps p90 %s, p99 %s (evenly spaced: %s)",
					r+1, fc.rounds, c, res.goodput(), 100*s.Close, fmtDur(s.P90), fmtDur(s.P99), fmtDur(s.Even))
			}
		}
		if fc.runs("cardinality") {
			rd.Card = map[string]*cardResult{}
			// Warm the pool and the gate in the same shape, with keys of their own.
			if _, err := cardinality(ctx, oneCall, gate, fc.cardW, min(fc.keys, 2000), fmt.Sprintf("warm-%d-", r), true, fc.deadline); err != nil {
				return nil, err
			}
			for _, c := range order(withTenants, noTenants) {
				res, err := cardinality(ctx, oneCall, gate, fc.cardW, fc.keys, fmt.Sprintf("r%d-t-", r), c == withTenants, fc.deadline)
				if err != nil {
					return nil, err
				}
				rd.Card[c] = res
				p.printf("round %d/%d cardinality %s: %d calls in %v, %d refused; heap growth %.2f MiB; waiting after %d",
					r+1, fc.rounds, c, res.Total.Calls, res.Elapsed.Round(time.Millisecond), refused(&res.Total),
					float64(res.Growth)/(1<<20), res.Waiting)
			}
		}
		rep.rounds = append(rep.rounds, rd)
		// Written after every round, so that an interrupted run keeps what it measured.
		if err := rep.write(io.Discard); err != nil {
			return nil, err
		}
	}
	rep.elapsed = time.Since(rep.start)
	return rep, nil
}

// lockstep runs the lockstep phase on contender c (onPlain or onGated), on a *sql.DB of its own
// with P connections: fc.noisy workers, each arriving at a random moment within the warm-up,
// that nobody refuses.
func lockstep(ctx context.Context, fc fairConfig, c, app string) (*phaseResult, error) {
	var db *sql.DB
	var err error
	if c == onPlain {
		db, err = openPlain(config{URL: fc.url, P: fc.P}, app)
	} else {
		var dsn string
		dsn, err = withParams(fc.url, "application_name", app, "gate_max_conns", strconv.Itoa(fc.P), "gate_concurrent", strconv.Itoa(fc.P),
			"gate_queue", strconv.Itoa(fc.noisy), "gate_queue_wait", fc.deadline.String())
		if err == nil {
			db, err = gated.Open(dsn)
		}
	}
	if err != nil {
		return nil, err
	}
	defer db.Close()
	ws := workers(fc.noisy, lockGroup, nil, 0)
	for i := range ws {
		ws[i].start = rand.N(fc.warmup + 1)
	}
	q := fc.sleepQuery()
	return fairPhase(ctx, func(ctx context.Context, _ int) error {
		_, err := db.ExecContext(ctx, q)
		return err
	}, ws, fc.deadline, fc.warmup, fc.phase, nil)
}

// refused is the number of t's calls the gate refused.
func refused(t *tally) int64 {
	return t.Fail[kindDisplaced] + t.Fail[kindFull] + t.Fail[kindTimeout]
}

// worst is the worst of the small tenants of one phase: the lowest success rate and the highest
// success p99, each with the tenant it belongs to.
type worst struct {
	Rate   float64
	RateOf string
	P99    time.Duration
	P99Of  string
	Wait   time.Duration // the highest p99 of the gate's wait
	Next   time.Duration // the highest p99 of the least wait any order of service could have given
	Stmt   time.Duration // the highest p99 of the statement time of a success
}

// worstSmall returns the worst of the tenants named small in p.
func worstSmall(p *phaseResult, small []string) worst {
	w := worst{Rate: 2}
	for _, name := range small {
		t := p.group(name)
		if r := t.successRate(); r < w.Rate {
			w.Rate, w.RateOf = r, name
		}
		if d := t.p99(); w.P99Of == "" || d > w.P99 {
			w.P99, w.P99Of = d, name
		}
		w.Wait = max(w.Wait, t.Wait.quantile(0.99))
		w.Next = max(w.Next, t.Next.quantile(0.99))
		w.Stmt = max(w.Stmt, t.Stmt.quantile(0.99))
	}
	if w.RateOf == "" {
		w.Rate = 0
	}
	return w
}
