// Command gatedbench measures gated against a real PostgreSQL server and writes the results as a
// Markdown table, a CSV file and two PNG charts.
//
// It compares, side by side in one run:
//
//   - Overhead: SELECT 1 (QueryRowContext) and a short write transaction, closed loop at several
//     goroutine counts, for plain database/sql+pgx (MaxOpenConns = P), gated (B = P, Q large
//     enough that nothing is refused) and pgxpool used natively. The three run interleaved, in
//     several short rounds, so that machine noise hits them alike; medians over rounds are
//     reported with their min–max.
//   - Overload: a query whose cost the server pays (pg_sleep and a CPU-bound query), a deadline
//     per request, and open-loop Poisson arrivals at multiples of the measured capacity, for plain
//     database/sql and gated: goodput, latency of successes and refusals, and the peaks of
//     goroutines, heap, server connections and gated's waiting operations.
//
// gatedbench fair (fair.go), a subcommand apart from the main run, measures tenants and
// priorities inside one workload's gate (B = P = 8, Q = 8, gate_queue_wait 50ms, pg_sleep(0.02)
// under a 1 s deadline): a noisy tenant of 64 workers that never back off beside seven small
// tenants of one worker each (each small tenant's success rate and p99 against the unloaded p99,
// and the goodput of all against the noisy tenant's alone); one high-priority worker beside 64
// normal ones; and the heap kept after 200,000 distinct tenant keys. Each load runs with the
// tenants or the priority in the callers' contexts and, side by side in the same round, without,
// over several rounds (medians with min–max, in fair.md and on stdout). Its lockstep scenario
// shows how the successes of 64 workers on 8 connections are spaced in time, on plain
// database/sql and on gated.
//
// The server is the one in -url, else DATABASE_URL, else the one the tests find
// (internal/pgtest: GATED_TEST_DATABASE_URL, 127.0.0.1:5432, a private cluster). Progress goes to
// stderr. -quick is a smoke run of under a minute; the default run takes about six minutes.
//
//	go run ./cmd/gatedbench                 # full run, results in ./gatedbench-out
//	go run ./cmd/gatedbench -quick
//	go run ./cmd/gatedbench -publish .      # also rewrite BENCHMARKS.md and docs/bench/*.png
//	go run ./cmd/gatedbench fair -rounds 5 -phase 5s   # tenants and priorities, about four minutes
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gatedsql/gated/internal/pgtest"
	"github.com/jackc/pgx/v5"
)

// config is everything a run depends on. Zero B means P; negative Q means B.
type config struct {
	URL string // base URL or keyword/value DSN of the server
	Out string // output directory

	P, B, Q  int           // physical connections, execution permits, extra admission permits
	Order    string        // gated's gate_queue_order in the overload runs
	Deadline time.Duration // per-request deadline in the overload runs

	Goroutines []int         // overhead: closed-loop goroutine counts
	Rounds     int           // overhead: interleaved rounds per cell
	Cell       time.Duration // overhead: measured time per contender, cell and round
	Warmup     time.Duration // overhead: unmeasured time before each measurement

	Loads       []float64     // overload: offered load as multiples of the measured capacity
	Duration    time.Duration // overload: arrivals per load level and contender
	CapacityFor time.Duration // overload: closed-loop capacity measurement
	Unloaded    float64       // overload: fraction of capacity used to measure unloaded latency
	MaxInflight int           // overload: arrivals in flight beyond this are dropped (and counted)
	Sleep       time.Duration // overload: pg_sleep argument of the sleep query
	CPURows     int           // overload: rows summed by the CPU-bound query
	ArrivalSeed int64         // overload: source of the random arrival process

	Queries            []string // overload queries to run (names of overloadQueries)
	Auto               bool     // overload: also gated with gate_concurrent=auto
	Overhead, Overload bool     // sections to run
	Observe            string   // overhead: what is attached to gated ("", "metrics", "traces"; observe.go)
	Quick              bool     // smoke run
	Note               string   // free text for the report (for example "machine shared")
	CPUProfile         string   // write a CPU profile of the whole run here
	MutexProfile       string   // write a mutex contention profile of the whole run here
	Command            string   // the command line, for the report
}

// defaults returns the configuration of a full run.
func defaults() config {
	return config{
		Out: "gatedbench-out", P: 8, B: 0, Q: -1, Deadline: 100 * time.Millisecond,
		Goroutines: []int{1, 8, 32, 256}, Rounds: 10, Cell: 500 * time.Millisecond, Warmup: 100 * time.Millisecond,
		Loads: []float64{1, 2, 5, 10}, Duration: 10 * time.Second, CapacityFor: 3 * time.Second,
		Unloaded: 0.1, MaxInflight: 20000, Sleep: 5 * time.Millisecond, CPURows: 20000, ArrivalSeed: 1,
		Queries: []string{"sleep", "cpu"}, Overhead: true, Overload: true, Auto: true,
	}
}

// quickDefaults are the values -quick uses for the flags not given explicitly.
var quickDefaults = map[string]string{
	"rounds": "2", "cell": "200ms",
	"duration": "1s", "capacity": "1s",
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "workloads" {
		os.Exit(runWorkloadsCmd(os.Args[2:], os.Stdout, os.Stderr)) // workload isolation and deadline cost (workloads.go)
	}
	if len(os.Args) > 1 && os.Args[1] == "adaptive" {
		os.Exit(runAdaptiveCmd(os.Args[2:], os.Stdout, os.Stderr)) // gate_concurrent=auto and lending (adaptive.go)
	}
	if len(os.Args) > 1 && os.Args[1] == "fair" {
		os.Exit(runFairCmd(os.Args[2:], os.Stdout, os.Stderr)) // tenants and priorities inside one gate (fair.go)
	}
	cfg, publish, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gatedbench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := 0
	if err := runMain(ctx, cfg, publish, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "gatedbench:", err)
		code = 1
	}
	stop()
	pgtest.Cleanup()
	os.Exit(code)
}

// parseFlags turns the command line into a config and the -publish directory.
func parseFlags(args []string) (config, string, error) {
	cfg := defaults()
	fs := flag.NewFlagSet("gatedbench", flag.ContinueOnError)
	fs.StringVar(&cfg.URL, "url", "", "PostgreSQL URL or keyword/value DSN (default $DATABASE_URL, then the server the tests find)")
	fs.StringVar(&cfg.Out, "out", cfg.Out, "output `dir` for results.md, results.csv, overhead.png, overload.png")
	fs.IntVar(&cfg.P, "P", cfg.P, "physical connections: MaxOpenConns of plain, gate_max_conns of gated, pool_max_conns of pgxpool")
	fs.IntVar(&cfg.B, "B", cfg.B, "gated execution permits (gate_concurrent) in the overload runs; 0 means P (the overhead runs always use B = P)")
	fs.IntVar(&cfg.Q, "Q", cfg.Q, "gated extra admission permits (gate_queue) in the overload runs; -1 means B (the overhead runs use at least the goroutine count)")
	fs.StringVar(&cfg.Order, "queue-order", "fifo", "gated's gate_queue_order in the overload runs: fifo or adaptive")
	fs.DurationVar(&cfg.Deadline, "deadline", cfg.Deadline, "per-request deadline in the overload runs (also gated's gate_queue_wait)")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "arrivals per overload level and contender")
	fs.DurationVar(&cfg.Cell, "cell", cfg.Cell, "measured time per overhead cell, contender and round")
	fs.DurationVar(&cfg.Warmup, "warmup", cfg.Warmup, "unmeasured warm-up before each closed-loop measurement (overhead cells, capacity), extended until every worker's first operation ended")
	fs.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "interleaved overhead rounds")
	fs.StringVar(&cfg.Observe, "observe", cfg.Observe, "attach to gated in the overhead cells: `metrics` (gatedprom's collector and gatedotel's Observer) or traces (the same, and every contender's operations in sampled spans); empty for nothing")
	fs.DurationVar(&cfg.CapacityFor, "capacity", cfg.CapacityFor, "closed-loop capacity measurement per overload query")
	fs.Float64Var(&cfg.Unloaded, "unloaded", cfg.Unloaded, "offered load, as a fraction of capacity, of the unloaded-latency measurement")
	fs.IntVar(&cfg.MaxInflight, "max-inflight", cfg.MaxInflight, "cap on overload arrivals in flight; arrivals beyond it are dropped and counted")
	fs.DurationVar(&cfg.Sleep, "sleep", cfg.Sleep, "pg_sleep duration of the sleep query")
	fs.IntVar(&cfg.CPURows, "cpu-rows", cfg.CPURows, "rows summed by the CPU-bound query (generate_series)")
	fs.Int64Var(&cfg.ArrivalSeed, "arrivals", cfg.ArrivalSeed, "random source of the Poisson arrival process (the same value gives the same arrivals)")
	fs.StringVar(&cfg.Note, "note", "", "a note printed at the top of the report, for example about a shared machine")
	fs.StringVar(&cfg.CPUProfile, "cpuprofile", "", "write a CPU profile of the run to `file` (all contenders: use pprof -focus)")
	fs.StringVar(&cfg.MutexProfile, "mutexprofile", "", "write a mutex contention profile of the run to `file`")
	fs.BoolVar(&cfg.Auto, "auto", cfg.Auto, "overload: also run gated with gate_concurrent=auto (a row beside gated's)")
	fs.BoolVar(&cfg.Quick, "quick", false, "smoke run of under a minute: "+quickSummary())
	goroutines := fs.String("goroutines", "1,8,32,256", "overhead goroutine counts")
	loads := fs.String("loads", "1,2,5,10", "overload levels as multiples of the measured capacity")
	sections := fs.String("sections", "overhead,overload", "sections to run")
	queries := fs.String("queries", "sleep,cpu", "overload queries: sleep (pg_sleep), cpu (generate_series)")
	publish := fs.String("publish", "", "repository `root`: also write BENCHMARKS.md there and copy the charts to docs/bench/")
	if err := fs.Parse(args); err != nil {
		return cfg, "", err
	}
	if fs.NArg() > 0 {
		return cfg, "", fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if cfg.Quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for name, v := range quickDefaults {
			if !set[name] {
				if err := fs.Set(name, v); err != nil {
					return cfg, "", err
				}
			}
		}
	}
	var err error
	if cfg.Goroutines, err = parseList(*goroutines, strconv.Atoi); err != nil {
		return cfg, "", fmt.Errorf("-goroutines: %w", err)
	}
	if cfg.Loads, err = parseList(*loads, func(s string) (float64, error) { return strconv.ParseFloat(s, 64) }); err != nil {
		return cfg, "", fmt.Errorf("-loads: %w", err)
	}
	slices.Sort(cfg.Goroutines)
	slices.Sort(cfg.Loads)
	cfg.Goroutines, cfg.Loads = slices.Compact(cfg.Goroutines), slices.Compact(cfg.Loads)
	cfg.Overhead, cfg.Overload = false, false
	for _, s := range strings.Split(*sections, ",") {
		switch strings.TrimSpace(s) {
		case "overhead":
			cfg.Overhead = true
		case "overload":
			cfg.Overload = true
		default:
			return cfg, "", fmt.Errorf("-sections: unknown section %q (overhead, overload)", s)
		}
	}
	cfg.Queries = nil
	for _, s := range strings.Split(*queries, ",") {
		cfg.Queries = append(cfg.Queries, strings.TrimSpace(s))
	}
	cfg.Command = commandLine(args)
	return cfg, *publish, cfg.validate()
}

func quickSummary() string {
	return "-rounds 2 -cell 200ms -duration 1s -capacity 1s unless given"
}

// parseList parses a comma-separated list of positive numbers.
func parseList[T int | float64](s string, parse func(string) (T, error)) ([]T, error) {
	var out []T
	for _, f := range strings.Split(s, ",") {
		v, err := parse(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		if v <= 0 {
			return nil, fmt.Errorf("%v is not positive", v)
		}
		out = append(out, v)
	}
	return out, nil
}

// commandLine renders the invocation as a command a reader can paste.
func commandLine(args []string) string {
	parts := []string{"go run ./cmd/gatedbench"}
	for _, a := range args {
		if strings.ContainsAny(a, " \t'\"$&;|<>()*?") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		parts = append(parts, a)
	}
	return strings.Join(parts, " ")
}

func (c *config) validate() error {
	if c.B == 0 {
		c.B = c.P
	}
	if c.Q < 0 {
		c.Q = c.B
	}
	switch {
	case c.Observe != observeNone && c.Observe != observeMetrics && c.Observe != observeTraces:
		return fmt.Errorf("-observe: %q is not metrics, traces or empty", c.Observe)
	case c.P < 1:
		return errors.New("-P must be at least 1")
	case c.B < 1 || c.B > c.P:
		return errors.New("-B must be between 1 and P")
	case c.Deadline <= 0 || c.Duration <= 0 || c.Cell <= 0 || c.CapacityFor <= 0:
		return errors.New("-deadline, -duration, -cell and -capacity must be positive")
	case c.Rounds < 1:
		return errors.New("-rounds must be at least 1")
	case c.Unloaded <= 0 || c.Unloaded > 1:
		return errors.New("-unloaded must be in (0, 1]")
	case c.MaxInflight < 1:
		return errors.New("-max-inflight must be at least 1")
	}
	for _, name := range c.Queries {
		if !slices.ContainsFunc(overloadQueries(*c), func(q querySpec) bool { return q.Name == name }) {
			return fmt.Errorf("-queries: unknown query %q (sleep, cpu)", name)
		}
	}
	return nil
}

// environment describes where a run happened, for the report.
type environment struct {
	Start      time.Time
	Elapsed    time.Duration
	GoVersion  string
	OS, Arch   string
	CPUs       int
	Server     string // PostgreSQL version()
	ServerConn int    // max_connections
	LoadAvg    string // /proc/loadavg at the start, a hint of other load on the machine
}

// results is everything a run measured.
type results struct {
	Config   config
	Env      environment
	Overhead []overheadSummary
	Overload []overloadQuery
}

// runMain runs the benchmark and writes its outputs (and publishes them when publish is set).
func runMain(ctx context.Context, cfg config, publish string, log io.Writer) error {
	if cfg.URL == "" {
		cfg.URL = os.Getenv("DATABASE_URL")
	}
	if cfg.URL == "" {
		u, err := pgtest.Lookup()
		if err != nil {
			return fmt.Errorf("no server: set -url or DATABASE_URL (%w)", err)
		}
		cfg.URL = u
	}
	stopProfiles, err := startProfiles(cfg)
	if err != nil {
		return err
	}
	res, err := run(ctx, cfg, log)
	if perr := stopProfiles(); err == nil {
		err = perr
	}
	if err != nil {
		return err
	}
	if err := writeOutputs(res, cfg.Out); err != nil {
		return err
	}
	fmt.Fprintf(log, "gatedbench: wrote %s/{results.md,results.csv,overhead.png,overload.png} in %v\n", cfg.Out, res.Env.Elapsed.Round(time.Second))
	if publish != "" {
		if err := publishResults(res, cfg.Out, publish); err != nil {
			return err
		}
		fmt.Fprintf(log, "gatedbench: published to %s/BENCHMARKS.md and %s/docs/bench/\n", publish, publish)
	}
	return nil
}

// run measures the sections cfg selects against the server at cfg.URL.
func run(ctx context.Context, cfg config, log io.Writer) (*results, error) {
	res := &results{Config: cfg, Env: environment{
		Start: time.Now(), GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH,
		CPUs: runtime.NumCPU(), LoadAvg: loadAvg(),
	}}
	admin, err := pgx.Connect(ctx, cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("connecting to the server: %w", err)
	}
	defer admin.Close(context.Background())
	if err := admin.QueryRow(ctx, "SELECT version(), current_setting('max_connections')::int").Scan(&res.Env.Server, &res.Env.ServerConn); err != nil {
		return nil, fmt.Errorf("asking the server its version: %w", err)
	}
	if need := 3*cfg.P + 2; need > res.Env.ServerConn {
		return nil, fmt.Errorf("the server allows %d connections; -P %d needs about %d", res.Env.ServerConn, cfg.P, need)
	}
	p := newProgress(log, cfg)
	if cfg.Overhead {
		if res.Overhead, err = runOverhead(ctx, cfg, admin, p); err != nil {
			return nil, err
		}
	}
	if cfg.Overload {
		if res.Overload, err = runOverload(ctx, cfg, p); err != nil {
			return nil, err
		}
	}
	res.Env.Elapsed = time.Since(res.Env.Start)
	return res, nil
}

// startProfiles starts the profiles cfg asks for and returns the function that writes them.
func startProfiles(cfg config) (stop func() error, err error) {
	var cpu *os.File
	if cfg.CPUProfile != "" {
		if cpu, err = os.Create(cfg.CPUProfile); err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(cpu); err != nil {
			cpu.Close()
			return nil, err
		}
	}
	if cfg.MutexProfile != "" {
		runtime.SetMutexProfileFraction(5)
	}
	return func() error {
		var errs []error
		if cpu != nil {
			pprof.StopCPUProfile()
			errs = append(errs, cpu.Close())
		}
		if cfg.MutexProfile != "" {
			errs = append(errs, writeFile(cfg.MutexProfile, func(w io.Writer) error {
				return pprof.Lookup("mutex").WriteTo(w, 0)
			}))
		}
		return errors.Join(errs...)
	}, nil
}

// loadAvg returns the first three fields of /proc/loadavg, or "" where there is none.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// withParams returns dsn with the parameters kv (key, value, key, value, ...) set, in dsn's own
// form: query parameters for a postgres:// URL, key=value pairs for the keyword/value form.
// Values must not contain spaces or quotes.
func withParams(dsn string, kv ...string) (string, error) {
	if strings.Contains(dsn, "://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("parsing the server URL: %w", err) // url.Error redacts the password
		}
		q := u.Query()
		for i := 0; i+1 < len(kv); i += 2 {
			q.Set(kv[i], kv[i+1])
		}
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	var b strings.Builder
	b.WriteString(dsn)
	for i := 0; i+1 < len(kv); i += 2 {
		fmt.Fprintf(&b, " %s=%s", kv[i], kv[i+1])
	}
	return b.String(), nil
}

// progress prints one line per finished measurement to stderr, with the time since the start.
type progress struct {
	w     io.Writer
	start time.Time
}

func newProgress(w io.Writer, cfg config) *progress {
	p := &progress{w: w, start: time.Now()}
	p.printf("P=%d B=%d Q=%d deadline=%v; overhead %v, overload %v; estimated %v",
		cfg.P, cfg.B, cfg.Q, cfg.Deadline, cfg.Overhead, cfg.Overload, estimate(cfg).Round(time.Second))
	return p
}

func (p *progress) printf(format string, args ...any) {
	el := time.Since(p.start).Round(100 * time.Millisecond)
	fmt.Fprintf(p.w, "[%7s] %s\n", el, fmt.Sprintf(format, args...))
}

// estimate is the expected run time of cfg, for the first progress line.
func estimate(cfg config) time.Duration {
	var d time.Duration
	if cfg.Overhead {
		cells := len(overheadWorkloads) * len(cfg.Goroutines) * cfg.Rounds * 3
		d += time.Duration(cells) * (cfg.Cell + cfg.Warmup + 50*time.Millisecond)
	}
	if cfg.Overload {
		perQuery := cfg.CapacityFor + 2*cfg.Warmup + 2*(unloadedFor(cfg)+settle(cfg)+cfg.Deadline) +
			time.Duration(2*len(cfg.Loads))*(cfg.Duration+settle(cfg)+cfg.Deadline)
		d += time.Duration(len(cfg.Queries)) * perQuery
	}
	return d
}
