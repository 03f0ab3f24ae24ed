// Command workloads shows per-workload budgets: a web-like workload of short queries and a batch
// workload of slow ones share one *sql.DB, and the batch job, however hard it pushes, cannot take
// the execution permits the web requests need.
//
// It needs PostgreSQL in DATABASE_URL:
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable go run ./examples/workloads
//
// The database has P = 8 connections: the default workload (the web requests) gets B = 6, the
// batch workload B = 2 with 2 waiting. Every call carries its deadline into the database
// (gate_statement_timeout=deadline), and the batch job's rows are written with gated.InTx, which
// retries serialization failures and never retries a commit. For -duration it runs 30 batch
// workers that never pause, and web requests at -rate per second, then prints what each workload
// got.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatedsql/gated"
)

const gateParams = "gate_max_conns=8&gate_concurrent=6&gate_queue=6&gate_queue_wait=50ms" +
	"&gate_workloads=batch:2:2:1s&gate_statement_timeout=deadline:30s&gate_name=workloads-example"

func main() {
	rate := flag.Float64("rate", 300, "web requests per second")
	duration := flag.Duration("duration", 5*time.Second, "how long to run")
	flag.Parse()
	if err := run(os.Getenv("DATABASE_URL"), *rate, *duration); err != nil {
		fmt.Fprintln(os.Stderr, "workloads:", err)
		os.Exit(1)
	}
}

func run(base string, rate float64, duration time.Duration) error {
	if base == "" {
		return errors.New("set DATABASE_URL to a PostgreSQL URL")
	}
	dsn, err := withParams(base, gateParams)
	if err != nil {
		return err
	}
	db, err := gated.Open(dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx := context.Background()
	table := fmt.Sprintf("workloads_example_%d", os.Getpid())
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+table+" (id bigserial PRIMARY KEY, n int)"); err != nil {
		return err
	}
	defer db.ExecContext(context.Background(), "DROP TABLE "+table)

	stop := make(chan struct{})
	var batchDone, batchRefused, batchFailed atomic.Int64
	var wg sync.WaitGroup
	batchCtx := gated.WithWorkload(ctx, "batch")
	for range 30 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				err := gated.InTx(batchCtx, db, &gated.TxOptions{Retries: 2}, func(tx *sql.Tx) error {
					if _, err := tx.ExecContext(batchCtx, "SELECT pg_sleep(0.1)"); err != nil {
						return err
					}
					_, err := tx.ExecContext(batchCtx, "INSERT INTO "+table+" (n) VALUES (1)")
					return err
				})
				switch {
				case err == nil:
					batchDone.Add(1)
				case gated.IsRejected(err):
					batchRefused.Add(1)
					time.Sleep(10 * time.Millisecond) // a real batch job backs off too
				default:
					batchFailed.Add(1)
				}
			}
		})
	}

	var mu sync.Mutex
	var latencies []time.Duration
	var webRefused, webFailed atomic.Int64
	var web sync.WaitGroup
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	end := time.After(duration)
loop:
	for {
		select {
		case <-end:
			break loop
		case <-tick.C:
		}
		web.Go(func() {
			rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond) // the request's deadline
			defer cancel()
			start := time.Now()
			var n int
			err := db.QueryRowContext(rctx, "SELECT count(*) FROM (SELECT pg_sleep(0.005)) s").Scan(&n)
			switch {
			case err == nil:
				mu.Lock()
				latencies = append(latencies, time.Since(start))
				mu.Unlock()
			case gated.IsRejected(err):
				webRefused.Add(1) // an HTTP service answers 503 here
			default:
				webFailed.Add(1)
			}
		})
	}
	tick.Stop()
	web.Wait()
	close(stop)
	wg.Wait()

	c, _ := gated.FromDB(db)
	slices.Sort(latencies)
	fmt.Printf("web:   %d served, p50 %v, p99 %v; %d refused, %d failed\n", len(latencies),
		quantile(latencies, 0.5), quantile(latencies, 0.99), webRefused.Load(), webFailed.Load())
	fmt.Printf("batch: %d transactions committed, %d refused, %d failed\n", batchDone.Load(), batchRefused.Load(), batchFailed.Load())
	for _, name := range c.Workloads() {
		s, _ := c.WorkloadStats(name)
		fmt.Printf("gate %-8s B=%d Q=%d admitted %d, refused %d full + %d timed out\n",
			name, s.Concurrent, s.Queue, s.Admitted, s.RejectedFull, s.RejectedTimeout)
	}
	fmt.Printf("physical connections opened: %d (P=%d); database/sql waits: %d\n", c.Stats().Pool.Opened, c.Stats().Pool.MaxConns, db.Stats().WaitCount)
	return nil
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(q*float64(len(sorted)-1))].Round(100 * time.Microsecond)
}

// withParams adds the query parameters params to the URL base.
func withParams(base, params string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", errors.New("DATABASE_URL is not a URL")
	}
	q := u.Query()
	extra, err := url.ParseQuery(params)
	if err != nil {
		return "", err
	}
	for k, v := range extra {
		q[k] = v
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}
