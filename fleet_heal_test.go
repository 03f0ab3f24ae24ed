package gated

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatedsql/gated/internal/fleet"
	"github.com/gatedsql/gated/internal/pgtest"
)

// What the fleet does when its schema or its membership is disturbed from outside: the table
// dropped, truncated or a row deleted, the refresh function dropped, a role that may not create
// them, a lease connection killed in the middle of a refresh. In each the instances never hold,
// and the live rows never declare, more than the totals (the fake targets check every growth,
// watchDeclared samples the table), and the fleet serves again once the schema is back.

// healTTL and healRefresh keep these tests short: a member fences two thirds of a TTL (4 s)
// after its last successful refresh, so a member that did not keep its share shows within it,
// while a loaded machine's slow refreshes do not make one fence. A statement on the lease
// connection may take a third of a TTL: with 3 s (1 s each) a member fenced now and then while the
// whole suite and two busy loops ran on two cores, its question whether it held its lock timed
// out, as it must when the answer is late.
const (
	healTTL     = 6 * time.Second
	healRefresh = 200 * time.Millisecond
)

// openPlain opens a plain pgx *sql.DB on the server at u and closes it at cleanup.
func openPlain(t testing.TB, u string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", u)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(2)
	t.Cleanup(func() { db.Close() })
	return db
}

// freezer parks a member's loop at the start of its turns while frozen: the instance holds its
// share and its lease connection (and lock) stays open, but it does not refresh.
type freezer struct {
	frozen  atomic.Bool
	parked  chan struct{}
	release chan struct{}
}

func newFreezer(t *testing.T) *freezer {
	z := &freezer{parked: make(chan struct{}, 1), release: make(chan struct{})}
	t.Cleanup(func() { z.thaw() }) // before the members' cleanups, which wait for their loops
	return z
}

func (z *freezer) step() {
	if z.frozen.Load() {
		select {
		case z.parked <- struct{}{}:
		default:
		}
		<-z.release
	}
}

// freeze returns once the member's loop is parked.
func (z *freezer) freeze() {
	z.frozen.Store(true)
	<-z.parked
}

func (z *freezer) thaw() {
	if z.frozen.Swap(false) {
		close(z.release)
	}
}

// shareChanges is the sum of the members' share changes: unchanged while none of them shrank,
// fenced or grew.
func shareChanges(ms ...*fleet.Member) int64 {
	var n int64
	for _, m := range ms {
		n += m.Stats().ShareChanges
	}
	return n
}

// exists reports whether the object the regclass or regprocedure text names exists.
func (ft *fleetTest) exists(kind, name string) bool {
	var ok bool
	err := ft.adm.QueryRow("SELECT to_"+kind+"($1) IS NOT NULL", name).Scan(&ok)
	return err == nil && ok
}

// TestFleetHealsADroppedTable: the lease table is dropped under a running fleet (an operator, a
// migration tool, a restore of an older dump; the functions survive it). The members' lease
// connections still hold their locks, which prove their membership: they keep their shares, the
// next turn of a member whose role may create the table recreates it, each declares again what
// it holds, and a newcomer started afterwards joins. Nobody fences.
func TestFleetHealsADroppedTable(t *testing.T) {
	forEachDriver(t, func(t *testing.T, drv string) {
		ft := newFleetTest(t, totals12, healTTL, healRefresh)
		defer ft.watchDeclared()()
		dial, _ := ft.dialerWith(drv, "")
		a, ta, b, tb := ft.twoSeated(dial)
		changes := shareChanges(a, b)
		dropped := time.Now()
		if _, err := ft.adm.Exec("DROP TABLE " + ft.table); err != nil {
			t.Fatal(err)
		}
		ft.waitShares("after the table was dropped", []*fakeTarget{ta, tb}, 6, 6)
		t.Logf("the table was back with both rows %v after the drop", time.Since(dropped))
		// Kept for two TTLs more: a member that only kept its share until it fenced would show.
		waitFor(t, "two TTLs after the drop", func() bool { return time.Since(dropped) > 2*ft.ttl })
		ft.waitShares("two TTLs after the drop", []*fakeTarget{ta, tb}, 6, 6)
		if c := shareChanges(a, b); c != changes {
			t.Errorf("the shares changed %d times after the drop, want none: the members were to keep them", c-changes)
		}
		_, tc := ft.member(dial, nil)
		ft.waitShares("a newcomer after the drop", []*fakeTarget{ta, tb, tc}, 4, 4, 4)
	})
}

// TestFleetKeepsItsShareWhileTheSchemaCannotBeMadeInTime: the table is dropped while another
// session holds the lock under which the schema is made (a slow server, a migration), for longer
// than a member may go without proving its membership. Each attempt to make the table waits
// until the server's statement_timeout ends it, short of the member's own deadline: the lease
// connection survives with its lock, the member proves it again and keeps its share, and the
// table is made once the lock is free. A deadline of the member's that interrupted the attempt
// would cut the lease connection, and with it the lock that counts the member.
func TestFleetKeepsItsShareWhileTheSchemaCannotBeMadeInTime(t *testing.T) {
	forEachDriver(t, func(t *testing.T, drv string) {
		keepsSharesWhileHeld(t, drv, func(ft *fleetTest) string {
			return "SELECT pg_advisory_xact_lock(hashtext('gated_fleet_schema'))"
		}, func(ft *fleetTest) {
			if _, err := ft.adm.Exec("DROP TABLE " + ft.table); err != nil {
				t.Fatal(err)
			}
		}, func(ft *fleetTest, _ int64) {
			if ft.exists("regclass", ft.table) {
				t.Fatal("the table was made while the schema lock was held")
			}
		})
	})
}

// TestFleetKeepsItsShareWhileAMigrationLocksTheTable: another session locks the fleet's table
// (a migration in a long transaction) for longer than a member may go without proving its
// membership. Every refresh waits behind the lock until the server's statement_timeout on the
// lease connection ends it, short of the member's own deadline: the connection survives with its
// lock, the member proves it and keeps its share, and the refreshes go on once the lock is gone.
func TestFleetKeepsItsShareWhileAMigrationLocksTheTable(t *testing.T) {
	forEachDriver(t, func(t *testing.T, drv string) {
		keepsSharesWhileHeld(t, drv, func(ft *fleetTest) string {
			return "LOCK TABLE " + ft.table + " IN ACCESS EXCLUSIVE MODE"
		}, func(*fleetTest) {}, func(ft *fleetTest, failed int64) {
			if failed == 0 {
				t.Fatal("no refresh failed while the table was locked: the lock did not hold them up")
			}
		})
	})
}

// keepsSharesWhileHeld starts two members of a new fleet over drv and, once they hold 6 and 6,
// runs hold's statement in a transaction of the test's, then disturb. The transaction stays open
// for a TTL, beyond the fence interval after the members' last refresh, and meanwhile neither
// member's share may change; check then looks at the fleet, given how many refreshes failed
// meanwhile. Once the transaction has ended, both members must refresh again and hold 6 and 6,
// their shares never changed.
func keepsSharesWhileHeld(t *testing.T, drv string, hold func(*fleetTest) string, disturb func(*fleetTest), check func(ft *fleetTest, failed int64)) {
	t.Helper()
	// The default TTL: every attempt runs into the server's statement_timeout, and the answer,
	// the rollback and the question about the lock must then fit in what is left of the
	// member's deadline, as they do for a user; with healTTL's third of that, a loaded machine
	// (the whole suite and two busy loops on two cores) was too slow for them now and then.
	ft := newFleetTest(t, totals12, defaultFleetTTL, healRefresh)
	defer ft.watchDeclared()()
	dial, _ := ft.dialerWith(drv, "")
	a, ta, b, tb := ft.twoSeated(dial)
	changes, errs := shareChanges(a, b), a.Stats().RefreshErrors+b.Stats().RefreshErrors
	tx, err := ft.adm.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec(hold(ft)); err != nil {
		t.Fatal(err)
	}
	held := time.Now()
	disturb(ft)
	waitFor(t, "a TTL", func() bool { return time.Since(held) > ft.ttl })
	if c := shareChanges(a, b); c != changes {
		t.Fatalf("the shares changed %d times while the transaction held, want none: the members were to keep them", c-changes)
	}
	check(ft, a.Stats().RefreshErrors+b.Stats().RefreshErrors-errs)
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	ft.refreshes(ta.name, 2)
	ft.refreshes(tb.name, 2)
	ft.waitShares("after the transaction", []*fakeTarget{ta, tb}, 6, 6)
	if c := shareChanges(a, b); c != changes {
		t.Errorf("the shares changed %d times after the transaction, want none", c-changes)
	}
}

// TestFleetHealsADroppedRefreshFunction: the refresh function of this version is dropped under a
// running fleet. Every refresh fails until a member's next turn creates it again; the members
// keep their shares meanwhile (their rows and locks count them), and a newcomer joins afterwards.
func TestFleetHealsADroppedRefreshFunction(t *testing.T) {
	forEachDriver(t, func(t *testing.T, drv string) {
		ft := newFleetTest(t, totals12, healTTL, healRefresh)
		defer ft.watchDeclared()()
		dial, _ := ft.dialerWith(drv, "")
		a, ta, b, tb := ft.twoSeated(dial)
		changes, errs := shareChanges(a, b), a.Stats().RefreshErrors+b.Stats().RefreshErrors
		dropped := time.Now()
		if _, err := ft.adm.Exec("DROP FUNCTION " + fleet.RefreshSignature(ft.table)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the refresh function made again", func() bool { return ft.exists("regprocedure", fleet.RefreshSignature(ft.table)) })
		ft.refreshes(ta.name, 2)
		ft.refreshes(tb.name, 2)
		t.Logf("the fleet refreshed again %v after the drop, %d refreshes failed meanwhile",
			time.Since(dropped), a.Stats().RefreshErrors+b.Stats().RefreshErrors-errs)
		waitFor(t, "two TTLs after the drop", func() bool { return time.Since(dropped) > 2*ft.ttl })
		ft.waitShares("two TTLs after the drop", []*fakeTarget{ta, tb}, 6, 6)
		if c := shareChanges(a, b); c != changes {
			t.Errorf("the shares changed %d times after the drop, want none: the members were to keep them", c-changes)
		}
		_, tc := ft.member(dial, nil)
		ft.waitShares("a newcomer after the drop", []*fakeTarget{ta, tb, tc}, 4, 4, 4)
	})
}

// TestFleetTruncatedTableKeepsTheTotals: the table is truncated while one member does not
// refresh (its loop parked; its lease connection, and so its lock, open: it still holds its 6
// connections). The other finds its own row gone: it holds its lock, so it declares again what it
// holds, and may not grow into the parked member's room, which no row declares any more but its
// lock proves held. Once the parked member runs again it declares its share again too. Then the
// table is truncated under both running, and nothing moves either.
func TestFleetTruncatedTableKeepsTheTotals(t *testing.T) {
	ft := newFleetTest(t, totals12, healTTL, healRefresh)
	defer ft.watchDeclared()()
	z := newFreezer(t)
	a, ta := ft.member(nil, nil)
	b, tb := ft.member(nil, z.step)
	ft.waitShares("two", []*fakeTarget{ta, tb}, 6, 6)
	changes := shareChanges(a, b)
	z.freeze()
	if _, err := ft.adm.Exec("TRUNCATE " + ft.table); err != nil {
		t.Fatal(err)
	}
	ft.refreshes(ta.name, 5) // the running member's refreshes after the truncation, each wanting 12 if it could
	if s := ta.holds(); s.Conns != 6 {
		t.Errorf("beside a member whose row was truncated away the other holds %v, want its 6", s)
	}
	z.thaw()
	ft.waitShares("both running again", []*fakeTarget{ta, tb}, 6, 6)
	if _, err := ft.adm.Exec("TRUNCATE " + ft.table); err != nil {
		t.Fatal(err)
	}
	ft.refreshes(ta.name, 2)
	ft.refreshes(tb.name, 2)
	ft.waitShares("truncated under both running", []*fakeTarget{ta, tb}, 6, 6)
	if c := shareChanges(a, b); c != changes {
		t.Errorf("the shares changed %d times across the truncations, want none", c-changes)
	}
	_, tc := ft.member(nil, nil)
	ft.waitShares("a newcomer after the truncations", []*fakeTarget{ta, tb, tc}, 4, 4, 4)
}

// TestFleetDeletedRowKeepsTheTotals: one member's row is deleted while its loop is parked (its
// lock held, its connections open). The other may not take its room; once it runs again it
// declares its share again, without fencing. Then the running member's own row is deleted, and
// it declares its share again at its next refresh.
func TestFleetDeletedRowKeepsTheTotals(t *testing.T) {
	ft := newFleetTest(t, totals12, healTTL, healRefresh)
	defer ft.watchDeclared()()
	z := newFreezer(t)
	a, ta := ft.member(nil, nil)
	b, tb := ft.member(nil, z.step)
	ft.waitShares("two", []*fakeTarget{ta, tb}, 6, 6)
	changes := shareChanges(a, b)
	z.freeze()
	if _, err := ft.adm.Exec("DELETE FROM "+ft.table+" WHERE fleet = $1 AND info = $2", ft.name, tb.name); err != nil {
		t.Fatal(err)
	}
	ft.refreshes(ta.name, 5)
	if s := ta.holds(); s.Conns != 6 {
		t.Errorf("beside a member whose row was deleted the other holds %v, want its 6", s)
	}
	z.thaw()
	ft.waitShares("both running again", []*fakeTarget{ta, tb}, 6, 6)
	if _, err := ft.adm.Exec("DELETE FROM "+ft.table+" WHERE fleet = $1 AND info = $2", ft.name, ta.name); err != nil {
		t.Fatal(err)
	}
	ft.refreshes(ta.name, 2)
	ft.waitShares("the running member's row deleted", []*fakeTarget{ta, tb}, 6, 6)
	if c := shareChanges(a, b); c != changes {
		t.Errorf("the shares changed %d times across the deletions, want none", c-changes)
	}
}

// A logLines is a slog handler's output, safe for the members' goroutines.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// String returns what was written.
func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// count returns how many lines contain every one of subs.
func (l *logLines) count(subs ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range strings.Split(l.buf.String(), "\n") {
		all := line != ""
		for _, s := range subs {
			all = all && strings.Contains(line, s)
		}
		if all {
			n++
		}
	}
	return n
}

// limitedRole makes a role for the test that may log in and use the fleet's table once granted,
// but may not create anything in the schema, and returns it and a URL of the test server for it.
// The role is dropped at cleanup.
func (ft *fleetTest) limitedRole() (role, roleURL string) {
	t := ft.t
	role = fmt.Sprintf("gated_test_role_%d_%d", time.Now().UnixNano()%1e9, objSeq.Add(1))
	if _, err := ft.adm.Exec("CREATE ROLE " + role + " LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The role's sessions first: a role with open sessions may not be dropped cleanly.
		ft.adm.Exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", role)
		for _, q := range []string{"DROP OWNED BY " + role, "DROP ROLE " + role} {
			if _, err := ft.adm.Exec(q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
	})
	// PostgreSQL 15 grants PUBLIC no CREATE on the public schema: USAGE is all the role gets.
	if _, err := ft.adm.Exec("REVOKE CREATE ON SCHEMA public FROM " + role); err != nil {
		t.Fatal(err)
	}
	var may bool
	if err := ft.adm.QueryRow("SELECT has_schema_privilege($1, 'public', 'CREATE')", role).Scan(&may); err != nil || may {
		t.Fatalf("the test role may create in the public schema (%v): the test needs one that may not", err)
	}
	u, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	return role, u.String()
}

// grant grants role what an instance needs on the fleet's table and functions.
func (ft *fleetTest) grant(role string) {
	ft.t.Helper()
	for _, q := range []string{
		"GRANT SELECT, INSERT, UPDATE, DELETE ON " + ft.table + " TO " + role,
		"GRANT EXECUTE ON FUNCTION " + fleet.RefreshSignature(ft.table) + " TO " + role,
	} {
		if _, err := ft.adm.Exec(q); err != nil {
			ft.t.Fatal(err)
		}
	}
}

// createSchema creates the fleet's table and functions as a role that may.
func (ft *fleetTest) createSchema() {
	ft.t.Helper()
	dial, _ := ft.dialer("")
	c, err := dial(context.Background())
	if err != nil {
		ft.t.Fatal(err)
	}
	defer c.Close()
	if err := fleet.EnsureSchema(context.Background(), c, ft.table); err != nil {
		ft.t.Fatal(err)
	}
}

// TestFleetWithoutCreateKeepsItsShareWhileTheSchemaIsGone: the instances' role may use the
// fleet's table but not create it. The table is dropped: the members cannot recreate it, say so
// once each in the log and in their stats, and keep serving from the share they were last
// granted, which their locks keep counted: nobody can be granted anything while the table is
// gone, and once it is back nobody is granted a locked member's room. A newcomer holds nothing
// meanwhile. When an administrator creates the table again and grants it, the members declare
// their shares again and the newcomer is seated.
func TestFleetWithoutCreateKeepsItsShareWhileTheSchemaIsGone(t *testing.T) {
	ft := newFleetTest(t, totals12, healTTL, healRefresh)
	var logs logLines
	ft.log = func(member string) *slog.Logger {
		var w io.Writer = &logs
		if testing.Verbose() {
			w = io.MultiWriter(&logs, os.Stderr)
		}
		return slog.New(slog.NewTextHandler(w, nil)).With("member", member)
	}
	role, roleURL := ft.limitedRole()
	ft.createSchema()
	ft.grant(role)
	defer ft.watchDeclared()()
	dial, _ := ft.dialer(roleURL)
	a, ta, b, tb := ft.twoSeated(dial)

	dropped := time.Now()
	if _, err := ft.adm.Exec("DROP TABLE " + ft.table); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both members to report the table missing", func() bool { return a.Stats().SchemaMissing && b.Stats().SchemaMissing })
	c, tc := ft.member(dial, nil)
	waitFor(t, "the newcomer to report the table missing", func() bool { return c.Stats().SchemaMissing })
	waitFor(t, "three TTLs after the drop", func() bool { return time.Since(dropped) > 3*ft.ttl })
	for _, tg := range []*fakeTarget{ta, tb} {
		if s := tg.holds(); s.Conns != 6 {
			t.Errorf("%s holds %v three TTLs after the table was dropped, want its share of 6 kept", tg.name, s)
		}
	}
	if s := tc.holds(); s.Conns != 0 {
		t.Errorf("the newcomer holds %v while the table is missing, want nothing", s)
	}
	for _, tg := range []*fakeTarget{ta, tb, tc} {
		if n := logs.count("member=\""+tg.name+"\"", "may not create"); n != 1 {
			t.Errorf("%s logged %d times that it may not create the table, want once:\n%s", tg.name, n, logs.String())
		}
	}

	ft.createSchema()
	ft.grant(role)
	back := time.Now()
	ft.waitShares("the table back", []*fakeTarget{ta, tb, tc}, 4, 4, 4)
	t.Logf("the three members held and declared their shares %v after the table was back (TTL %v)", time.Since(back), ft.ttl)
	for _, m := range []*fleet.Member{a, b, c} {
		if m.Stats().SchemaMissing {
			t.Errorf("stats report the table missing once it is back: %+v", m.Stats())
		}
	}
	for _, tg := range []*fakeTarget{ta, tb} {
		if n := tg.zeroed.Load(); n != 0 {
			t.Errorf("%s went to nothing %d times, want never: it was to keep its share", tg.name, n)
		}
	}
	if t.Failed() {
		t.Logf("the members' log:\n%s", logs.String())
	}
}

// TestFleetLeaseConnectionKilledInTheMiddleOfARefresh: refreshes wait on the fleet's growth lock
// (an administrator holds it) when their lease connections are terminated: a newcomer's, whose
// row the killed refresh never committed, and then a seated member's that asked to grow into a
// leaver's room. Each dials again: the newcomer joins afresh, the member finds its row live by its
// TTL and keeps its share; the fleet never exceeds its totals, and settles once the lock is free.
func TestFleetLeaseConnectionKilledInTheMiddleOfARefresh(t *testing.T) {
	ft := newFleetTest(t, totals12, healTTL, healRefresh)
	defer ft.watchDeclared()()
	a, ta := ft.member(nil, nil)
	dial, app := ft.dialer("")
	_, tb := ft.member(dial, nil)
	ft.waitShares("two", []*fakeTarget{ta, tb}, 6, 6)

	// holdGrowth takes the fleet's growth lock in a transaction of the administrator's and returns
	// its release.
	holdGrowth := func() func() {
		tx, err := ft.adm.Begin()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec("SELECT pg_advisory_xact_lock($1, 0)", fleet.Key(ft.name)); err != nil {
			t.Fatal(err)
		}
		return func() { tx.Rollback() }
	}
	// killWaiting terminates the lease backend of app once it waits on the growth lock.
	killWaiting := func(app string) {
		t.Helper()
		waitFor(t, "a refresh of "+app+" waiting on the growth lock", func() bool {
			var n int
			err := ft.adm.QueryRow("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'", app).Scan(&n)
			return err == nil && n == 1
		})
		var ok bool
		if err := ft.adm.QueryRow("SELECT bool_and(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&ok); err != nil || !ok {
			t.Fatalf("terminating the lease backend of %s: %v %v", app, ok, err)
		}
	}

	release := holdGrowth()
	dialC, appC := ft.dialer("")
	_, tc := ft.member(dialC, nil)
	killWaiting(appC)
	release()
	ft.waitShares("the newcomer after its lease connection was killed", []*fakeTarget{ta, tb, tc}, 4, 4, 4)

	release = holdGrowth()
	a.Close() // a leaves: b and c ask to grow into its room, and wait on the lock
	ta.gone()
	killWaiting(app)
	release()
	ft.waitShares("after a seated member's lease connection was killed", []*fakeTarget{tb, tc}, 6, 6)
}

// TestFleetRealInstanceKeepsTheTotalsWhileTheSchemaIsDisturbed: a gated instance under load
// beside a member with a fake target, a fleet of 6 connections, while the table is truncated, a
// row deleted, the refresh function dropped and the table dropped, one after the other.
// pg_stat_activity is the ground truth, sampled all along: the instance's backends and what the
// other member holds never add up to more than 6, and after each disturbance both hold their
// shares again, declared in the table, and the instance serves.
func TestFleetRealInstanceKeepsTheTotalsWhileTheSchemaIsDisturbed(t *testing.T) {
	forEachDriver(t, func(t *testing.T, drv string) {
		ft := newFleetTest(t, fleet.Share{Conns: 6, Concurrent: []int{4}, Queue: []int{4}}, healTTL, healRefresh)
		defer ft.watchDeclared()()
		params := fmt.Sprintf("gate_fleet=on&gate_name=%s&gate_fleet_table=%s&gate_fleet_ttl=%s&gate_fleet_refresh=%s"+
			"&gate_max_conns=6&gate_concurrent=4&gate_queue=4&gate_queue_wait=50ms", ft.name, ft.table, healTTL, healRefresh)
		db, c, app := openPGAt(t, pgtest.URL(t), drv, params)
		waitFor(t, "the instance seated", func() bool { return c.Stats().Fleet.Conns == 6 })
		_, tb := ft.member(nil, nil)
		seated := func() bool {
			if c.Stats().Fleet.Conns != 3 || tb.holds().Conns != 3 {
				return false
			}
			var n, declared int
			err := ft.adm.QueryRow(fmt.Sprintf("SELECT count(*), coalesce(sum(conns), 0) FROM %[1]s WHERE fleet = $1 AND %[1]s_live($2, member, expires, clock_timestamp())", ft.table),
				ft.name, fleet.Key(ft.name)).Scan(&n, &declared)
			return err == nil && n == 2 && declared == 6
		}
		waitFor(t, "both members seated and declared", seated)

		ctx, stop := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var served atomic.Int64
		for range 6 {
			wg.Go(func() {
				for ctx.Err() == nil {
					_, err := db.ExecContext(ctx, "SELECT pg_sleep(0.005)")
					switch {
					case err == nil:
						served.Add(1)
					case IsRejected(err):
						time.Sleep(time.Millisecond)
					case ctx.Err() == nil:
						t.Errorf("an operation failed: %v", err)
						return
					}
				}
			})
		}
		var worst, samples atomic.Int64
		sampler := repeat(func() bool {
			held := tb.holds().Conns // before the backends: a growth it makes later cannot be counted twice
			var n int
			if err := ft.adm.QueryRow("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&n); err == nil {
				storeMax(&worst, int64(n+held))
				samples.Add(1)
			}
			time.Sleep(2 * time.Millisecond)
			return true
		})
		for _, step := range []struct{ what, sql string }{
			{"truncated", "TRUNCATE " + ft.table},
			{"a row deleted", "DELETE FROM " + ft.table + " WHERE member = (SELECT min(member) FROM " + ft.table + " WHERE fleet = '" + ft.name + "')"},
			{"the refresh function dropped", "DROP FUNCTION " + fleet.RefreshSignature(ft.table)},
			{"the table dropped", "DROP TABLE " + ft.table},
		} {
			at := served.Load()
			if _, err := ft.adm.Exec(step.sql); err != nil {
				t.Fatalf("%s: %v", step.what, err)
			}
			disturbed := time.Now()
			waitFor(t, "the schema back and both members seated and declared after: "+step.what, func() bool {
				return ft.exists("regclass", ft.table) && ft.exists("regprocedure", fleet.RefreshSignature(ft.table)) && seated()
			})
			t.Logf("%s: both declared again %v after", step.what, time.Since(disturbed))
			waitFor(t, "operations served after: "+step.what, func() bool { return served.Load() > at+50 })
		}
		sampler()
		stop()
		wg.Wait()
		if w := worst.Load(); w > 6 {
			t.Errorf("at worst the instance's backends and the other member's share added up to %d, above the fleet's 6 (%d samples)", w, samples.Load())
		}
		t.Logf("at most %d connections in %d samples; %d operations served", worst.Load(), samples.Load(), served.Load())
	})
}

// TestFleetGrantCountsARowDeletedWhileItIsComputed: a member asks to grow while another
// member's row is deleted (by hand, as in the test above), and the deletion is committed while
// the grant is being computed. The other member's lease connection holds its lock all along, so
// its share is still its own: the grant must count it either by its row or, once the row is
// gone, by its lock, whichever the grant's reading of the table sees, and never grant its room.
// The table is a view over the real one whose rows, read by the growing member once it holds the
// growth lock, make it wait until the test has deleted the row: the deletion lands, every time,
// after the grant's first read of the table.
func TestFleetGrantCountsARowDeletedWhileItIsComputed(t *testing.T) {
	ft := newFleetTest(t, totals12, healTTL, healRefresh)
	base, pause := ft.table+"_rows", ft.table+"_pause"
	dialA, _ := ft.dialer("")
	dialB, appB := ft.dialer("")
	// pauseKey is a one-key advisory lock (objsubid 1): no fleet lock is one.
	pauseKey := int64(fleet.Key(ft.name)) + 1<<40
	t.Cleanup(func() { // before newFleetTest's, which drops a table of the view's name
		for _, drop := range []string{"VIEW IF EXISTS " + ft.table, "TABLE IF EXISTS " + base, "FUNCTION IF EXISTS " + pause + "()"} {
			if _, err := ft.adm.Exec("DROP " + drop); err != nil {
				t.Errorf("drop %s: %v", drop, err)
			}
		}
	})
	for _, q := range []string{
		`CREATE TABLE ` + base + ` (fleet text NOT NULL, member int NOT NULL, joined timestamptz NOT NULL,
			expires timestamptz NOT NULL, conns int NOT NULL, concurrent int[] NOT NULL, queue int[] NOT NULL,
			total_conns int NOT NULL, total_concurrent int[] NOT NULL, total_queue int[] NOT NULL,
			info text NOT NULL DEFAULT '', PRIMARY KEY (fleet, member))`,
		// Waits, once per transaction, when member B's lease connection reads a row while it
		// holds the growth lock (k, 0) and the test holds pauseKey.
		fmt.Sprintf(`CREATE FUNCTION %s() RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN
	IF current_setting('application_name') = %s AND current_setting('gated_test.paused', true) IS DISTINCT FROM 'y'
		AND EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = pg_backend_pid() AND l.locktype = 'advisory'
			AND l.granted AND l.objsubid = 2 AND l.objid = 0::oid) THEN
		PERFORM set_config('gated_test.paused', 'y', true);
		PERFORM pg_advisory_xact_lock_shared(%d);
	END IF;
	RETURN true;
END $$`, pause, quoteLiteral(appB), pauseKey),
		`CREATE VIEW ` + ft.table + ` AS SELECT * FROM ` + base + ` WHERE ` + pause + `()`,
	} {
		if _, err := ft.adm.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	a, err := dialA(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := dialB(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := fleet.EnsureSchema(ctx, a, ft.table); err != nil {
		t.Fatal(err)
	}
	half := fleet.TargetShare(totals12, 2, 0)
	refresh := func(c fleet.Conn, id int32, joining bool, have, want fleet.Share) {
		t.Helper()
		req := &fleet.Request{Fleet: ft.name, Key: fleet.Key(ft.name), Member: id, Joining: joining, TTL: ft.ttl,
			Have: have, Want: want, Totals: totals12, Reclaim: !joining}
		if _, err := fleet.Refresh(ctx, c, ft.table, req); err != nil {
			t.Fatal(err)
		}
	}
	declared := func(id int32) int {
		t.Helper()
		var n int
		if err := ft.adm.QueryRow("SELECT coalesce(sum(conns), 0) FROM "+base+" WHERE fleet = $1 AND member = $2", ft.name, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	zero := fleet.ZeroShare(1)
	// A and B join and are granted half each; both then hold it.
	refresh(a, 1, true, zero, half)
	refresh(b, 2, true, zero, half)
	if da, db := declared(1), declared(2); da != half.Conns || db != half.Conns {
		t.Fatalf("after joining: A declares %d, B %d, want %d each", da, db, half.Conns)
	}
	refresh(a, 1, false, half, half)

	pin, err := ft.adm.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer pin.Close()
	if _, err := pin.ExecContext(ctx, "SELECT pg_advisory_lock($1)", pauseKey); err != nil {
		t.Fatal(err)
	}
	released := false
	release := func() {
		if !released {
			released = true
			if _, err := pin.ExecContext(ctx, "SELECT pg_advisory_unlock($1)", pauseKey); err != nil {
				t.Error(err)
			}
		}
	}
	defer release()
	// B asks for everything: only what A's declaration leaves free, none, may be granted.
	grown := make(chan error, 1)
	go func() {
		req := &fleet.Request{Fleet: ft.name, Key: fleet.Key(ft.name), Member: 2, TTL: ft.ttl,
			Have: half, Want: half.Join(totals12), Totals: totals12, Reclaim: true}
		_, err := fleet.Refresh(ctx, b, ft.table, req)
		grown <- err
	}()
	waitFor(t, "B's grant paused after its first read of the table", func() bool {
		var n int
		err := ft.adm.QueryRow(`SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
			WHERE a.application_name = $1 AND l.locktype = 'advisory' AND NOT l.granted AND l.objsubid = 1`, appB).Scan(&n)
		return err == nil && n == 1
	})
	if _, err := ft.adm.Exec("DELETE FROM "+base+" WHERE fleet = $1 AND member = 1", ft.name); err != nil {
		t.Fatal(err)
	}
	var locked bool
	if err := ft.adm.QueryRow(`SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2
		AND classid = $1::int::oid AND objid = 1)`, int64(fleet.Key(ft.name))).Scan(&locked); err != nil || !locked {
		t.Fatalf("A's lock is not held (%v): the grant could take its room by right", err)
	}
	release()
	if err := <-grown; err != nil {
		t.Fatal(err)
	}
	if db := declared(2); db != half.Conns {
		t.Errorf("B was granted %d connections while A, its row deleted during the grant and its lock held, holds %d of the %d", db, half.Conns, totals12.Conns)
	}
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
