package gated

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatedsql/gated/internal/fleet"
	"github.com/gatedsql/gated/internal/pgtest"
)

// TestPoolSetMaxClosesIdleAtOnceAndInUseOnReturn: lowering P closes the idle connections above
// it at once, refuses to open past it, and closes a connection in use above it when it comes
// back; raising it opens again.
func TestPoolSetMaxClosesIdleAtOnceAndInUseOnReturn(t *testing.T) {
	runPG(t, "gate_max_conns=4&gate_concurrent=4", func(t *testing.T, e *pgEnv) {
		ctx := context.Background()
		p := e.c.pool
		var held []*physConn
		for range 4 {
			pc, err := p.get(ctx)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, pc)
		}
		for _, pc := range held[:2] {
			if !p.put(pc) {
				t.Fatal("put refused a connection within P")
			}
		}
		p.setMax(1)
		waitFor(t, "the idle connections closed", func() bool {
			var s PoolStats
			p.stats(&s)
			return s.Open == 2 && s.Idle == 0
		})
		if p.withinMax() {
			t.Fatal("withinMax with 2 in use above P=1")
		}
		if p.put(held[2]) {
			t.Fatal("put kept a connection above the lowered P")
		}
		p.destroy(held[2])
		if !p.withinMax() {
			t.Fatal("not withinMax with 1 open under P=1")
		}
		openCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if _, err := p.get(openCtx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("get at the lowered P: %v, want it to wait for a slot", err)
		}
		p.setMax(4)
		pc, err := p.get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		p.put(pc)
		p.put(held[3])
		var s PoolStats
		p.stats(&s)
		if s.Open != 2 || s.ClosedShrunk != 3 {
			t.Fatalf("after raising P again: open %d, closed for the share %d; want 2 and 3", s.Open, s.ClosedShrunk)
		}
	})
}

// TestFleetRealInstanceHoldsItsShareUnderLoad: a gated instance with gate_fleet=on, under load,
// beside members with fake targets. Alone it runs with all 8 connections (its lease connection is
// one more, outside the share); when another member joins it shrinks to 4 (pool 4, B 2 of the
// default workload and 1 of the batch workload), and
// when that member leaves it grows back. pg_stat_activity is the
// ground truth: at no sample do the instance's backends and what the other member holds add up to
// more than the total and the instance's lease connection. With gate_concurrent=auto the default
// workload's B is its ceiling, P less batch's 2: 6 alone, 3 beside the other member. The limit
// stays within 1 and 3 there, climbs back to 6 under load once the share has grown back, and
// when another member joins an idle instance, it is 3 at once.
func TestFleetRealInstanceHoldsItsShareUnderLoad(t *testing.T) {
	for _, concurrent := range []string{"4", "auto"} {
		for _, drv := range innerDrivers {
			t.Run("gate_concurrent="+concurrent+"/"+drv, func(t *testing.T) {
				testFleetRealInstanceUnderLoad(t, drv, concurrent)
			})
		}
	}
}

func testFleetRealInstanceUnderLoad(t *testing.T, drv, concurrent string) {
	auto, b := concurrent == "auto", 4 // the default workload's B; auto's ceiling, P less batch's B
	if auto {
		b = 6
	}
	totals := fleet.Share{Conns: 8, Concurrent: []int{b, 2}, Queue: []int{6, 2}}
	ft := newFleetTest(t, totals, 2*time.Second, 100*time.Millisecond)
	defer ft.watchDeclared()()
	params := fmt.Sprintf("gate_fleet=on&gate_name=%s&gate_fleet_table=%s&gate_fleet_ttl=2s&gate_fleet_refresh=100ms"+
		"&gate_max_conns=8&gate_concurrent=%s&gate_queue=6&gate_queue_wait=50ms&gate_workloads=batch:2:2", ft.name, ft.table, concurrent)
	db, c, app := openPGAt(t, pgtest.URL(t), drv, params)
	waitFor(t, "the instance alone to hold everything", func() bool { return c.Stats().Fleet.Conns == 8 })
	batch := func() Stats { s, _ := c.WorkloadStats("batch"); return s }
	if s, bs := c.Stats(), batch(); s.Concurrent != b || s.Queue != 6 || s.Pool.MaxConns != 8 || s.Fleet.Members != 1 ||
		s.Fleet.TotalConcurrent != b || bs.Concurrent != 2 || bs.Fleet.TotalConcurrent != 2 {
		t.Fatalf("alone: B %d, Q %d, P %d, fleet %+v; batch B %d, fleet %+v", s.Concurrent, s.Queue, s.Pool.MaxConns, s.Fleet, bs.Concurrent, bs.Fleet)
	}

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var served, refused atomic.Int64
	for i := range 10 {
		wctx := ctx
		if i >= 8 {
			wctx = WithWorkload(ctx, "batch")
		}
		wg.Go(func() {
			for ctx.Err() == nil {
				_, err := db.ExecContext(wctx, "SELECT pg_sleep(0.01)")
				switch {
				case err == nil:
					served.Add(1)
				case IsRejected(err):
					refused.Add(1)
					time.Sleep(time.Millisecond)
				case ctx.Err() == nil:
					t.Errorf("an operation failed: %v", err)
					return
				}
			}
		})
	}
	var worst atomic.Int64
	var samples atomic.Int64
	var other *fakeTarget
	var otherMu sync.Mutex
	sampler := repeat(func() bool {
		otherMu.Lock()
		o := other
		otherMu.Unlock()
		held := 0
		if o != nil {
			held = o.holds().Conns // before the backends: a growth it makes later cannot be counted twice
		}
		n := backends(t, ft.adm, app) + held
		storeMax(&worst, int64(n))
		samples.Add(1)
		time.Sleep(5 * time.Millisecond)
		return true
	})

	waitFor(t, "samples under load alone", func() bool { return samples.Load() >= 20 })
	m, tg := ft.member(nil, nil)
	otherMu.Lock()
	other = tg
	otherMu.Unlock()
	waitFor(t, "the instance to shrink to its half", func() bool { return c.Stats().Fleet.Conns == 4 && tg.holds().Conns == 4 })
	if s, bs := c.Stats(), batch(); s.Concurrent > b/2 || s.Concurrent < 1 || !auto && s.Concurrent != b/2 || bs.Concurrent != 1 || s.Pool.MaxConns != 4 || s.Fleet.Members != 2 {
		t.Fatalf("beside another member: B %d and batch %d, P %d, fleet %+v", s.Concurrent, bs.Concurrent, s.Pool.MaxConns, s.Fleet)
	}
	waitFor(t, "the instance's backends within its share and its lease", func() bool { return backends(t, ft.adm, app) <= 4+1 })
	at := samples.Load()
	waitFor(t, "samples under load beside the other", func() bool { return samples.Load() >= at+20 })
	m.Close()
	tg.gone()
	waitFor(t, "the instance to grow back", func() bool { return c.Stats().Fleet.Conns == 8 })
	// A fixed B is the share's at once; auto's limit climbs to it under the load.
	waitFor(t, "the default workload's B back at the whole", func() bool { return c.Stats().Concurrent == b })
	at = samples.Load()
	waitFor(t, "samples under load alone again", func() bool { return samples.Load() >= at+20 })
	sampler()
	stop()
	wg.Wait()
	if auto {
		// Idle, the limiter learns nothing: the share alone must bound its limit, at once.
		m, tg := ft.member(nil, nil)
		waitFor(t, "the idle instance to shrink to its half", func() bool { return c.Stats().Fleet.Conns == 4 && tg.holds().Conns == 4 })
		if s := c.Stats(); s.Concurrent != b/2 {
			t.Errorf("idle beside another member: the default workload's limit %d, want its share's %d", s.Concurrent, b/2)
		}
		m.Close()
		tg.gone()
	}
	// The instance's lease connection is outside the total; the fake member has none.
	if w := worst.Load(); w > int64(totals.Conns)+1 {
		t.Errorf("at worst the instance's backends and the other member's share added up to %d, above %d and the instance's lease (%d samples)", w, totals.Conns, samples.Load())
	}
	t.Logf("%d samples, at worst %d of %d; %d operations served, %d refused", samples.Load(), worst.Load(), totals.Conns, served.Load(), refused.Load())
	if served.Load() == 0 {
		t.Error("no operation was served")
	}
	checkQuiet(t, db, c, 0)
}

// TestFleetConfigurationErrors: gate_fleet=on without gate_name is a *DSNError naming gate_fleet, from
// sql.Open as from NewConnector; so are a driver other than pgx and lib/pq, a transaction pooler,
// a bad table name and a refresh above a third of the TTL.
func TestFleetConfigurationErrors(t *testing.T) {
	cfg, err := ParseDSN("postgres://db/app?gate_fleet=on")
	if err != nil {
		t.Fatal(err)
	}
	_, err = NewConnector(cfg)
	var de *DSNError
	if !errors.As(err, &de) || de.Key != keyFleet {
		t.Fatalf("NewConnector: %v, want a *DSNError for %s", err, keyFleet)
	}
	if _, err := sql.Open(DriverName, "postgres://db/app?gate_fleet=on"); !errors.As(err, &de) || de.Key != keyFleet {
		t.Fatalf("sql.Open: %v, want a *DSNError for %s", err, keyFleet)
	}
	for _, dsn := range []string{
		"postgres://db/app?gate_fleet=on&gate_name=a&gate_driver=mysql",
		"postgres://db/app?gate_fleet=on&gate_name=a&gate_fleet_table=Bad-Name",
		"postgres://db/app?gate_fleet=on&gate_name=a&gate_fleet_ttl=3s&gate_fleet_refresh=2s",
		"postgres://db/app?gate_fleet=yes&gate_name=a",
		"postgres://db/app?gate_fleet=on&gate_name=a&gate_pooler=transaction&default_query_exec_mode=exec",
	} {
		if _, err := ParseDSN(dsn); !errors.As(err, &de) {
			t.Errorf("ParseDSN(%q): %v, want a *DSNError", dsn, err)
		}
	}
	u, _ := url.Parse("postgres://db/app?gate_fleet=on&gate_name=a&gate_fleet_ttl=30s&gate_fleet_refresh=2s")
	if _, err := ParseDSN(u.String()); err != nil {
		t.Errorf("ParseDSN(%q): %v", u, err)
	}
}

// TestFleetBehindPgBouncerInSessionMode: through a PgBouncer in session mode each client
// connection keeps one server connection, so the lease and its lock work as against the server:
// an instance behind the pooler and a member straight on the server share the totals, and the
// instance shrinks when the other joins.
func TestFleetBehindPgBouncerInSessionMode(t *testing.T) {
	ft := newFleetTest(t, fleet.Share{Conns: 8, Concurrent: []int{6}, Queue: []int{6}}, 2*time.Second, 100*time.Millisecond)
	defer ft.watchDeclared()()
	bouncer := startPgBouncerMode(t, "session", 20)
	params := fmt.Sprintf("gate_fleet=on&gate_name=%s&gate_fleet_table=%s&gate_fleet_ttl=2s&gate_fleet_refresh=100ms&gate_max_conns=8&gate_concurrent=6&gate_queue=6",
		ft.name, ft.table)
	db, c, _ := openPGAt(t, bouncer, "pgx", params)
	waitFor(t, "the instance behind PgBouncer to hold everything", func() bool { return c.Stats().Fleet.Conns == 8 })
	_, tg := ft.member(nil, nil)
	waitFor(t, "the instance to shrink to its half", func() bool { return c.Stats().Fleet.Conns == 4 && tg.holds().Conns == 4 })
	if _, err := db.Exec("SELECT 1"); err != nil {
		t.Fatal(err)
	}
	checkQuiet(t, db, c, 0)
}
