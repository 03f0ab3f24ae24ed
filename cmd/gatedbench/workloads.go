package main

// gatedbench workloads: the figures for workload isolation and deadline cost, apart from the main run.
//
//   - isolation: a batch workload (B=2) offered pg_sleep(0.2) at 10× its capacity beside the
//     default workload offered short queries at 2× its capacity, against the default workload
//     alone at the same load. Reported: the default workload's success p99 in both (median and
//     min–max over rounds), the most batch backends seen in pg_stat_activity, db.Stats().WaitCount,
//     and per-workload invariant samples (running ≤ B, running + waiting ≤ B+Q, all back at the end).
//   - cost: closed loop at 1 goroutine, SELECT 1 and a write transaction, gated with
//     gate_statement_timeout=deadline against gated with it off, both calls under a 1 s deadline,
//     interleaved rounds; the time-per-operation ratio as median and min–max over rounds.
//
//	go run ./cmd/gatedbench workloads [-url URL] [-driver pgx|postgres] [-rounds 5] [-cell 2s] [-phase 4s]

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatedsql/gated"
	"github.com/gatedsql/gated/internal/pgtest"
	"github.com/jackc/pgx/v5"
)

type workloadsConfig struct {
	url, driver  string
	rounds       int
	cell, phase  time.Duration
	short, batch time.Duration // pg_sleep of the default's short query and of batch's query
}

// runWorkloadsCmd is "gatedbench workloads". It returns the process's exit code.
func runWorkloadsCmd(args []string, out, log io.Writer) int {
	wc := workloadsConfig{short: 10 * time.Millisecond, batch: 200 * time.Millisecond}
	fs := flag.NewFlagSet("gatedbench workloads", flag.ContinueOnError)
	fs.StringVar(&wc.url, "url", os.Getenv("DATABASE_URL"), "PostgreSQL URL (default $DATABASE_URL, then the server the tests find)")
	fs.StringVar(&wc.driver, "driver", "pgx", "gated's inner driver: pgx or postgres")
	fs.IntVar(&wc.rounds, "rounds", 5, "interleaved rounds")
	fs.DurationVar(&wc.cell, "cell", 2*time.Second, "cost: measured time per contender, workload and round")
	fs.DurationVar(&wc.phase, "phase", 4*time.Second, "isolation: arrivals per phase and round; 0 skips the isolation scenario")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if wc.url == "" {
		u, err := pgtest.Lookup()
		if err != nil {
			fmt.Fprintln(log, "gatedbench workloads: no server:", err)
			return 1
		}
		wc.url = u
	}
	ctx := context.Background()
	fmt.Fprintf(out, "# gatedbench workloads (driver %s, %d rounds)\n\n", wc.driver, wc.rounds)
	if wc.phase > 0 { // -phase 0 measures the cost only
		if err := isolation(ctx, wc, out, log); err != nil {
			fmt.Fprintln(log, "gatedbench workloads:", err)
			return 1
		}
	}
	if err := timeoutCost(ctx, wc, out, log); err != nil {
		fmt.Fprintln(log, "gatedbench workloads:", err)
		return 1
	}
	return 0
}

func isolation(ctx context.Context, wc workloadsConfig, out, log io.Writer) error {
	const defB, batchB = 4, 2
	app := fmt.Sprintf("gatedbench_iso_%d", os.Getpid())
	dsn, err := withParams(wc.url, "application_name", app, "gate_driver", wc.driver,
		"gate_max_conns", "6", "gate_concurrent", "4", "gate_queue", "4", "gate_queue_wait", "100ms",
		"gate_workloads", "batch:2:2:100ms")
	if err != nil {
		return err
	}
	db, err := gated.Open(dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	c, _ := gated.FromDB(db)
	admin, err := pgx.Connect(ctx, wc.url)
	if err != nil {
		return err
	}
	defer admin.Close(context.Background())

	defRate := 2 * float64(defB) / wc.short.Seconds()      // 2× the default's capacity
	batchRate := 10 * float64(batchB) / wc.batch.Seconds() // 10× batch's capacity
	shortQ := fmt.Sprintf("SELECT pg_sleep(%g)", wc.short.Seconds())
	batchQ := fmt.Sprintf("SELECT pg_sleep(%g) /* batch */", wc.batch.Seconds())
	deadline := 100 * time.Millisecond
	fmt.Fprintf(out, "## Isolation: default B=%d (%s) at %.0f/s, batch B=%d (%s) at %.0f/s, P=6, deadline %v\n\n",
		defB, shortQ, defRate, batchB, batchQ, batchRate, deadline)

	var alone, shared []float64
	var maxBatchBackends, maxBatchRunning int64
	var violations atomic.Int64
	for r := range wc.rounds {
		for _, withBatch := range []bool{r%2 == 1, r%2 == 0} {
			var stopBatch func() batchResult
			if withBatch {
				stopBatch = openLoopBatch(ctx, db, batchQ, batchRate, deadline)
			}
			stopSample := sampleWorkloads(ctx, c, admin, app, &maxBatchBackends, &maxBatchRunning, &violations)
			h, ok, refused := openLoopDefault(ctx, db, shortQ, defRate, deadline, wc.phase)
			stopSample()
			line := fmt.Sprintf("isolation round %d/%d batch=%v: default %d ok, %d failed (refused or past the deadline), p99 %v", r+1, wc.rounds, withBatch, ok, refused, h.quantile(0.99))
			p99 := float64(h.quantile(0.99)) / float64(time.Millisecond)
			if withBatch {
				b := stopBatch()
				line += fmt.Sprintf("; batch %d ok, %d refused, %d other errors", b.ok, b.refused, b.other)
				shared = append(shared, p99)
			} else {
				alone = append(alone, p99)
			}
			fmt.Fprintln(log, line)
		}
	}
	for _, name := range c.Workloads() {
		s, _ := c.WorkloadStats(name)
		if s.Running != 0 || s.Waiting != 0 {
			violations.Add(1)
			fmt.Fprintf(log, "workload %s not quiet at the end: running %d, waiting %d\n", name, s.Running, s.Waiting)
		}
	}
	ratios := make([]float64, len(shared))
	for i := range shared {
		ratios[i] = shared[i] / alone[i]
	}
	fmt.Fprintf(out, "| | median | min–max |\n|---|---|---|\n")
	fmt.Fprintf(out, "| default success p99 alone (ms) | %s |\n", medMinMax(alone))
	fmt.Fprintf(out, "| default success p99 beside batch (ms) | %s |\n", medMinMax(shared))
	fmt.Fprintf(out, "| ratio, round by round | %s |\n\n", medMinMax(ratios))
	fmt.Fprintf(out, "Most batch backends in pg_stat_activity: %d (B=2); most batch running: %d; db.Stats().WaitCount: %d; invariant violations sampled: %d.\n\n",
		maxBatchBackends, maxBatchRunning, db.Stats().WaitCount, violations.Load())
	return nil
}

// medMinMax formats the median and min–max of vs (sorted in place) as two table cells.
func medMinMax(vs []float64) string {
	if len(vs) == 0 {
		return "– | –"
	}
	slices.Sort(vs)
	return fmt.Sprintf("%.3g | %.3g–%.3g", vs[len(vs)/2], vs[0], vs[len(vs)-1])
}

type batchResult struct{ ok, refused, other int64 }

// openLoopBatch offers q under the batch workload as Poisson arrivals at rate per second until
// the returned function is called.
func openLoopBatch(ctx context.Context, db *sql.DB, q string, rate float64, deadline time.Duration) func() batchResult {
	var res struct{ ok, refused, other atomic.Int64 }
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		rng := rand.New(rand.NewSource(2))
		bctx := gated.WithWorkload(ctx, "batch")
		next := time.Now()
		for {
			next = next.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
			select {
			case <-stop:
				return
			case <-time.After(time.Until(next)):
			}
			wg.Go(func() {
				cctx, cancel := context.WithTimeout(bctx, deadline+3*time.Second) // batch is slow by design
				defer cancel()
				_, err := db.ExecContext(cctx, q)
				switch {
				case err == nil:
					res.ok.Add(1)
				case gated.IsRejected(err):
					res.refused.Add(1)
				default:
					res.other.Add(1)
				}
			})
		}
	})
	return func() batchResult {
		close(stop)
		wg.Wait()
		return batchResult{res.ok.Load(), res.refused.Load(), res.other.Load()}
	}
}

// openLoopDefault offers q under the default workload at rate per second for d and returns the
// latency histogram of the successes and the counts.
func openLoopDefault(ctx context.Context, db *sql.DB, q string, rate float64, deadline, d time.Duration) (*histogram, int64, int64) {
	var mu sync.Mutex
	h := &histogram{}
	var ok, refused atomic.Int64
	var wg sync.WaitGroup
	rng := rand.New(rand.NewSource(1))
	end := time.Now().Add(d)
	for next := time.Now(); next.Before(end); next = next.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second))) {
		time.Sleep(time.Until(next))
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, deadline)
			defer cancel()
			t0 := time.Now()
			_, err := db.ExecContext(cctx, q)
			if err != nil {
				refused.Add(1)
				return
			}
			el := time.Since(t0)
			mu.Lock()
			h.record(el)
			mu.Unlock()
			ok.Add(1)
		})
	}
	wg.Wait()
	return h, ok.Load(), refused.Load()
}

// sampleWorkloads checks I1 for every workload and counts batch's backends until stopped.
func sampleWorkloads(ctx context.Context, c *gated.Connector, admin *pgx.Conn, app string, maxBackends, maxRunning *int64, violations *atomic.Int64) func() {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			for _, name := range c.Workloads() {
				s, _ := c.WorkloadStats(name)
				if s.Running > s.Concurrent || s.Running+s.Waiting > s.Concurrent+s.Queue {
					violations.Add(1)
				}
				if name == "batch" && int64(s.Running) > *maxRunning {
					*maxRunning = int64(s.Running)
				}
			}
			var n int64
			err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE application_name = $1 AND state <> 'idle' AND strpos(query, '/* batch */') > 0`, app).Scan(&n)
			if err == nil && n > *maxBackends {
				*maxBackends = n
			}
		}
	})
	return func() { close(stop); wg.Wait() }
}

func timeoutCost(ctx context.Context, wc workloadsConfig, out, log io.Writer) error {
	admin, err := pgx.Connect(ctx, wc.url)
	if err != nil {
		return err
	}
	defer admin.Close(context.Background())
	table := fmt.Sprintf("gatedbench_to_%d", os.Getpid())
	if _, err := admin.Exec(ctx, "CREATE TABLE "+table+" (id bigserial PRIMARY KEY, worker int NOT NULL)"); err != nil {
		return err
	}
	defer admin.Exec(context.Background(), "DROP TABLE IF EXISTS "+table)
	insert := "INSERT INTO " + table + " (worker) VALUES ($1)"

	open := func(setting string) (*sql.DB, error) {
		dsn, err := withParams(wc.url, "gate_driver", wc.driver, "gate_max_conns", "2", "gate_statement_timeout", setting)
		if err != nil {
			return nil, err
		}
		return gated.Open(dsn)
	}
	offDB, err := open("off")
	if err != nil {
		return err
	}
	defer offDB.Close()
	dlDB, err := open("deadline")
	if err != nil {
		return err
	}
	defer dlDB.Close()
	withDeadline := func(o op) op {
		return func(ctx context.Context, w int) error {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			return o(cctx, w)
		}
	}
	names := []string{"off", "deadline"}
	dbs := []*sql.DB{offDB, dlDB}
	workers := make([]workerState, 1)
	fmt.Fprintf(out, "## Cost of gate_statement_timeout=deadline (1 goroutine, 1 s deadline on every call, %s)\n\n", wc.driver)
	fmt.Fprintf(out, "| workload | off µs/op | deadline µs/op | ratio median | ratio min–max |\n|---|---|---|---|---|\n")
	ops := func(db *sql.DB, wl string) op {
		if wl == "readtx" {
			// The write transaction without the commit's WAL flush, whose time varies with
			// whatever else the machine writes: BEGIN's cost shows.
			return func(ctx context.Context, _ int) error {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				var n int
				if err := tx.QueryRowContext(ctx, "SELECT 1").Scan(&n); err != nil {
					tx.Rollback()
					return err
				}
				return tx.Commit()
			}
		}
		return sqlOps(db, insert)[wl]
	}
	title := map[string]string{"readtx": "read transaction (BEGIN; SELECT 1; COMMIT)"}
	for _, wl := range append(slices.Clone(overheadWorkloads), "readtx") {
		perOp := make([][]float64, 2)
		var ratios []float64
		for r := range wc.rounds {
			var us [2]float64
			for k := range 2 {
				i := (k + r) % 2
				lr, err := closedLoop(ctx, withDeadline(ops(dbs[i], wl)), workers, 300*time.Millisecond, wc.cell)
				if err != nil {
					return err
				}
				if lr.Errors > 0 {
					return fmt.Errorf("%s %s: %d errors, first: %w", wl, names[i], lr.Errors, lr.FirstErr)
				}
				us[i] = float64(lr.Elapsed.Microseconds()) / float64(lr.Ops)
				perOp[i] = append(perOp[i], us[i])
			}
			ratios = append(ratios, us[1]/us[0])
			fmt.Fprintf(log, "cost %s round %d/%d: off %.1f µs/op, deadline %.1f µs/op\n", wl, r+1, wc.rounds, us[0], us[1])
		}
		off, dl := medMinMax(perOp[0]), medMinMax(perOp[1])
		t := workloadTitle[wl]
		if t == "" {
			t = title[wl]
		}
		fmt.Fprintf(out, "| %s | %s | %s | %s |\n", t, strings.Split(off, " |")[0], strings.Split(dl, " |")[0], medMinMax(ratios))
	}
	fmt.Fprintln(out)
	return nil
}
