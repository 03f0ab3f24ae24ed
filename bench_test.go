package gated

import (
	"context"
	"database/sql"
	"fmt"
	"runtime"
	"testing"

	"github.com/gatedsql/gated/internal/fakedb"
	"github.com/gatedsql/gated/internal/pgtest"
	"golang.org/x/sync/semaphore"
)

// permits is the interface both the gate and golang.org/x/sync/semaphore are measured behind.
type permits interface {
	acquire(ctx context.Context) error
	release()
}

type gatePermits struct{ g *gate }

func (p gatePermits) acquire(ctx context.Context) error { _, err := p.g.acquire(ctx); return err }
func (p gatePermits) release()                          { p.g.release(nil) }

type semPermits struct{ s *semaphore.Weighted }

func (p semPermits) acquire(ctx context.Context) error { return p.s.Acquire(ctx, 1) }
func (p semPermits) release()                          { p.s.Release(1) }

// BenchmarkPermits compares the gate with x/sync/semaphore, uncontended (permits ≥ goroutines)
// and contended (4 permits for GOMAXPROCS×8 goroutines).
func BenchmarkPermits(b *testing.B) {
	for _, tc := range []struct {
		name    string
		permits int
		par     int // RunParallel goroutines per GOMAXPROCS
	}{
		{"uncontended", 1 << 20, 1},
		{"contended", 4, 8},
	} {
		impls := []struct {
			name string
			p    permits
		}{
			{"gate", gatePermits{newTestGate(tc.permits, 1<<20, 1<<62)}},
			{"semaphore", semPermits{semaphore.NewWeighted(int64(tc.permits))}},
		}
		for _, impl := range impls {
			b.Run(tc.name+"/"+impl.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetParallelism(tc.par)
				ctx := context.Background()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := impl.p.acquire(ctx); err != nil {
							b.Error(err)
							return
						}
						impl.p.release()
					}
				})
			})
		}
	}
}

// BenchmarkBindUnbind measures one virtual connection binding and unbinding on the fake driver:
// the wrapper's fixed cost per operation, without database/sql; with a fixed B and with
// gate_concurrent=auto, whose limiter takes a sample at every unbind.
func BenchmarkBindUnbind(b *testing.B) {
	for _, tc := range []struct{ name, dsn string }{
		{"fixed", "gate_max_conns=1"},
		{"auto", "gate_max_conns=1 gate_concurrent=auto"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			_, c, _ := openFake(b, tc.dsn)
			cn := &conn{c: c}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := cn.bind(ctx); err != nil {
					b.Fatal(err)
				}
				cn.unbind()
			}
		})
	}
}

// BenchmarkQueryRowFake compares QueryRowContext through database/sql on the fake driver, plain
// and gated (B = P = 4, Q large enough that nothing is refused), isolating the wrapper's cost.
func BenchmarkQueryRowFake(b *testing.B) {
	for _, par := range []int{1, 8} {
		for _, kind := range []string{"plain", "gated"} {
			b.Run(fmt.Sprintf("%s/par=%d", kind, par), func(b *testing.B) {
				var db *sql.DB
				if kind == "plain" {
					fd := fakedb.New()
					var err error
					if db, err = sql.Open(fd.Register(), ""); err != nil {
						b.Fatal(err)
					}
					db.SetMaxOpenConns(4)
					db.SetMaxIdleConns(4)
					b.Cleanup(func() { db.Close() })
				} else {
					db, _, _ = openFake(b, "gate_max_conns=4 gate_concurrent=4 gate_queue=1024 gate_queue_wait=1m")
				}
				benchQueryRow(b, db, par, "SELECT 1")
			})
		}
	}
}

// BenchmarkQueryRowPG compares plain database/sql over pgx (MaxOpenConns = P) with gated
// (B = P, and gate_concurrent=auto, whose every release hands the limiter a sample) on
// QueryRowContext("SELECT 1") against the test server, at 1 and 32 goroutines.
func BenchmarkQueryRowPG(b *testing.B) {
	const p = 10
	base := pgtest.URL(b)
	for _, par := range []int{1, 32} {
		for _, kind := range []string{"plain", "gated", "auto"} {
			b.Run(fmt.Sprintf("%s/goroutines=%d", kind, par), func(b *testing.B) {
				var db *sql.DB
				if kind == "plain" {
					var err error
					if db, err = sql.Open("pgx", base); err != nil {
						b.Fatal(err)
					}
					db.SetMaxOpenConns(p)
					db.SetMaxIdleConns(p)
					b.Cleanup(func() { db.Close() })
				} else {
					params := fmt.Sprintf("gate_max_conns=%d&gate_queue=64&gate_queue_wait=1m", p)
					if kind == "auto" {
						params += "&gate_concurrent=auto"
					}
					db, _, _ = openPG(b, "pgx", params)
				}
				benchQueryRow(b, db, par, "SELECT 1")
			})
		}
	}
}

// benchQueryRow runs QueryRowContext(query) on db from exactly goroutines goroutines.
func benchQueryRow(b *testing.B, db *sql.DB, goroutines int, query string) {
	ctx := context.Background()
	var v int
	for range 2 * goroutines { // warm both pools
		if err := db.QueryRowContext(ctx, query).Scan(&v); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	if goroutines == 1 {
		for b.Loop() {
			if err := db.QueryRowContext(ctx, query).Scan(&v); err != nil {
				b.Fatal(err)
			}
		}
		return
	}
	b.SetParallelism((goroutines + procs() - 1) / procs())
	b.RunParallel(func(pb *testing.PB) {
		var v int
		for pb.Next() {
			if err := db.QueryRowContext(ctx, query).Scan(&v); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func procs() int { return runtime.GOMAXPROCS(0) }
