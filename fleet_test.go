package gated

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatedsql/gated/internal/drivers"
	"github.com/gatedsql/gated/internal/faultproxy"
	"github.com/gatedsql/gated/internal/fleet"
	"github.com/gatedsql/gated/internal/pgtest"
	"github.com/gatedsql/gated/internal/testwait"
)

// The coordination of gate_fleet=on against the real PostgreSQL, several members in one process,
// each on its own lease connection, with fake targets that hold exactly the share they are moved
// to. Two invariants are checked all along: the shares the instances hold add up to at most the
// totals at every instant (checked on every growth, the only move that adds), and the shares the
// live rows declare do too (sampled from the table).

// A fakeFleet is the instances of one test: what each holds.
type fakeFleet struct {
	t      testing.TB
	totals fleet.Share

	mu         sync.Mutex
	held       map[*fakeTarget]fleet.Share
	violations []string
	// lower holds the totals of members configured with less than totals: while such a member
	// holds anything, the instances must hold no more than its totals.
	lower map[string]fleet.Share // by the member's name
}

func newFakeFleet(t testing.TB, totals fleet.Share) *fakeFleet {
	f := &fakeFleet{t: t, totals: totals, held: map[*fakeTarget]fleet.Share{}}
	t.Cleanup(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, v := range f.violations {
			t.Error(v)
		}
	})
	return f
}

// A fakeTarget is one instance: it holds what it is moved to. While stuck is set, ShrinkTo
// waits, as an instance whose connections are all in use does.
type fakeTarget struct {
	f      *fakeFleet
	name   string
	stuck  atomic.Bool
	zeroed atomic.Int64 // times it went from a seat to nothing: fenced, or gone
	held   atomic.Int64 // ShrinkTo calls that found it stuck
}

func (tg *fakeTarget) ShrinkTo(ctx context.Context, s fleet.Share) error {
	if tg.stuck.Load() {
		tg.held.Add(1)
	}
	for tg.stuck.Load() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	tg.set(s)
	return nil
}

func (tg *fakeTarget) GrowTo(s fleet.Share) { tg.set(s) }

func (tg *fakeTarget) set(s fleet.Share) {
	f := tg.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if b := fleet.Sum(s.Concurrent); b > s.DataConns() {
		f.violations = append(f.violations, fmt.Sprintf("%s moved to %v: B %d above its %d data connections", tg.name, s, b, s.DataConns()))
	}
	if prev, ok := f.held[tg]; ok && prev.Conns > 0 && s.Conns == 0 {
		tg.zeroed.Add(1)
	}
	f.held[tg] = s.Clone()
	total := fleet.ZeroShare(len(f.totals.Concurrent))
	for _, h := range f.held {
		total.Conns += h.Conns
		for i := range h.Concurrent {
			total.Concurrent[i] += h.Concurrent[i]
			total.Queue[i] += h.Queue[i]
		}
	}
	if !total.Within(f.totals) {
		f.violations = append(f.violations, fmt.Sprintf("after %s moved to %v the instances hold %v, above the totals %v", tg.name, s, total, f.totals))
	}
	for low, h := range f.held {
		if lt, ok := f.lower[low.name]; ok && h.Conns > 0 && !total.Within(lt) {
			f.violations = append(f.violations, fmt.Sprintf("after %s moved to %v the instances hold %v while %s, configured with %v, holds %v",
				tg.name, s, total, low.name, lt, h))
		}
	}
}

// gone is a crashed instance: it holds nothing any more.
func (tg *fakeTarget) gone() { tg.set(fleet.ZeroShare(len(tg.f.totals.Concurrent))) }

func (tg *fakeTarget) holds() fleet.Share {
	tg.f.mu.Lock()
	defer tg.f.mu.Unlock()
	if s, ok := tg.f.held[tg]; ok {
		return s.Clone()
	}
	return fleet.ZeroShare(len(tg.f.totals.Concurrent))
}

// fleetTest is one test's fleet: a table of its own, a name, a TTL.
type fleetTest struct {
	t       *testing.T
	f       *fakeFleet
	table   string
	name    string
	ttl     time.Duration
	refresh time.Duration
	adm     *sql.DB
	db      *sql.DB                          // where the fleet's table is, when not on adm's server
	log     func(member string) *slog.Logger // the members' loggers, when set before they start
	seq     int
	logBuf  *logLines // the members' log when not verbose (failureLog)
}

func newFleetTest(t *testing.T, totals fleet.Share, ttl, refresh time.Duration) *fleetTest {
	adm := admin(t)
	ft := &fleetTest{
		t: t, f: newFakeFleet(t, totals), adm: adm, ttl: ttl, refresh: refresh,
		table: fmt.Sprintf("gated_test_fleet_%d_%d", time.Now().UnixNano()%1e9, objSeq.Add(1)),
		// Unique across processes too: the advisory locks of a gate_name are the database's.
		name: fmt.Sprintf("fleet_%d_%d", time.Now().UnixNano()%1e9, appSeq.Add(1)),
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, drop := range []string{"FUNCTION IF EXISTS " + ft.table + "_refresh", "FUNCTION IF EXISTS " + ft.table + "_live", "TABLE IF EXISTS " + ft.table} {
			if _, err := adm.ExecContext(ctx, "DROP "+drop); err != nil {
				t.Errorf("drop %s: %v", drop, err)
			}
		}
	})
	return ft
}

// dialer returns a lease dialer on the server at base ("" for the test server), with an
// application_name of its own, which it returns.
func (ft *fleetTest) dialer(base string) (func(context.Context) (fleet.Conn, error), string) {
	return ft.dialerWith("pgx", base)
}

// dialerWith is dialer with the inner driver drv.
func (ft *fleetTest) dialerWith(drv, base string) (func(context.Context) (fleet.Conn, error), string) {
	if base == "" {
		base = pgtest.URL(ft.t)
	}
	dsn, app := pgDSN(ft.t, base, drv, "")
	u, _ := url.Parse(dsn)
	q := u.Query()
	q.Del("gate_driver")
	u.RawQuery = q.Encode()
	connector, wrap, err := drivers.New(drv, u.String(), drivers.Options{})
	if err != nil {
		ft.t.Fatal(err)
	}
	return func(ctx context.Context) (fleet.Conn, error) { return dialLease(ctx, connector, wrap) }, app
}

// member starts a member with a fake target on the lease dialer dial (nil: the test server's).
func (ft *fleetTest) member(dial func(context.Context) (fleet.Conn, error), beforeStep func()) (*fleet.Member, *fakeTarget) {
	return ft.memberWith(ft.f.totals, dial, beforeStep)
}

// twoSeated starts two members on the lease dialer dial (nil: the test server's) and waits until
// they hold 6 and 6 of totals12.
func (ft *fleetTest) twoSeated(dial func(context.Context) (fleet.Conn, error)) (a *fleet.Member, ta *fakeTarget, b *fleet.Member, tb *fakeTarget) {
	ft.t.Helper()
	a, ta = ft.member(dial, nil)
	b, tb = ft.member(dial, nil)
	ft.waitShares("two", []*fakeTarget{ta, tb}, 6, 6)
	return a, ta, b, tb
}

// memberWith is member configured with totals of its own.
func (ft *fleetTest) memberWith(totals fleet.Share, dial func(context.Context) (fleet.Conn, error), beforeStep func()) (*fleet.Member, *fakeTarget) {
	ft.seq++
	tg := &fakeTarget{f: ft.f, name: fmt.Sprintf("member %d", ft.seq)}
	if dial == nil {
		dial, _ = ft.dialer("")
	}
	var log *slog.Logger
	if ft.log != nil {
		log = ft.log(tg.name)
	} else if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil)).With("member", tg.name)
	} else {
		log = ft.failureLog().With("member", tg.name)
	}
	m := fleet.New(fleet.Config{Name: ft.name, Table: ft.table, TTL: ft.ttl, Refresh: ft.refresh, Totals: totals, Info: tg.name}, dial, tg, log)
	m.BeforeStep = beforeStep
	m.Start()
	ft.t.Cleanup(m.Close) // returns at once when the test closed it
	return m, tg
}

// failureLog returns the logger of the test's members when it does not run verbosely: what they
// logged (each share change, each fence, each failed refresh) is written to the test's output if
// it fails, so that a failure says how the shares moved.
func (ft *fleetTest) failureLog() *slog.Logger {
	if ft.logBuf == nil {
		ft.logBuf = new(logLines)
		ft.t.Cleanup(func() {
			if ft.t.Failed() {
				ft.t.Logf("the members' log:\n%s", ft.logBuf.String())
			}
		})
	}
	return slog.New(slog.NewTextHandler(ft.logBuf, nil))
}

// declared samples the table every few milliseconds until stop and records every sum of the
// live rows' declarations that is above the totals.
func (ft *fleetTest) watchDeclared() (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		q := fmt.Sprintf(`SELECT coalesce(sum(conns), 0), coalesce(sum(concurrent[1]), 0), coalesce(sum(queue[1]), 0)
			FROM %[1]s WHERE fleet = $1 AND %[1]s_live($2, member, expires, clock_timestamp())`, ft.table)
		for {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			var c, b, qq int
			if err := ft.adm.QueryRow(q, ft.name, fleet.Key(ft.name)).Scan(&c, &b, &qq); err != nil {
				continue // the table may not exist yet
			}
			if c > ft.f.totals.Conns || b > ft.f.totals.Concurrent[0] || qq > ft.f.totals.Queue[0] {
				ft.f.mu.Lock()
				ft.f.violations = append(ft.f.violations, fmt.Sprintf("the live rows declare conns %d, B %d, Q %d, above the totals %v:\n%s",
					c, b, qq, ft.f.totals, ft.rows()))
				ft.f.mu.Unlock()
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// rows returns the fleet's rows as text, for failure messages.
func (ft *fleetTest) rows() string {
	rs, err := ft.adm.Query(fmt.Sprintf(`SELECT member, info, conns, expires - clock_timestamp(), %[1]s_live($2, member, expires, clock_timestamp())
		FROM %[1]s WHERE fleet = $1 ORDER BY joined`, ft.table), ft.name, fleet.Key(ft.name))
	if err != nil {
		return err.Error()
	}
	defer rs.Close()
	var out string
	for rs.Next() {
		var member, conns int
		var info, left string
		var live bool
		rs.Scan(&member, &info, &conns, &left, &live)
		out += fmt.Sprintf("\tmember %d (%s): conns %d, lease left %s, live %v\n", member, info, conns, left, live)
	}
	return out
}

// waitShares waits until the fleet has settled with the targets holding exactly the conns given,
// in order: each target holds them, and the fleet's table agrees, every live row declaring what
// its target holds and every target with a seat having a live row. What the targets hold alone is
// not enough: a member shrinks first and declares the smaller share at its next refresh, so on a
// loaded machine a test that acts on the holdings alone may act before the others can see the
// room. The table is polled, never sampled once, until the test's deadline is near.
func (ft *fleetTest) waitShares(what string, targets []*fakeTarget, conns ...int) {
	ft.t.Helper()
	limit := testwait.Limit(ft.t)
	start := time.Now()
	for {
		state, ok := ft.sharesAre(targets, conns)
		if ok {
			return
		}
		if time.Since(start) > limit {
			ft.t.Fatalf("%s: after %v %s, want conns %v held and declared", what, limit.Round(time.Second), state, conns)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// sharesAre reports whether the targets hold conns and the table's live rows declare exactly
// that, and describes what it saw.
func (ft *fleetTest) sharesAre(targets []*fakeTarget, conns []int) (string, bool) {
	var got []int
	for _, tg := range targets {
		got = append(got, tg.holds().Conns)
	}
	if !slices.Equal(got, conns) {
		return fmt.Sprintf("the instances hold conns %v", got), false
	}
	declared, err := ft.declaredByInfo()
	if err != nil {
		return fmt.Sprintf("the instances hold conns %v; reading the table: %v", got, err), false
	}
	state := fmt.Sprintf("the instances hold conns %v and the live rows declare %v", got, declared)
	for info, c := range declared {
		i := slices.IndexFunc(targets, func(tg *fakeTarget) bool { return tg.name == info })
		if i < 0 && c > 0 || i >= 0 && got[i] != c {
			return state, false
		}
	}
	for i, tg := range targets {
		if _, ok := declared[tg.name]; !ok && got[i] > 0 {
			return state, false
		}
	}
	return state, true
}

// refreshes waits until the newest row of the member named info has been refreshed n times more
// (its expiry moved n times), by the database's clock.
func (ft *fleetTest) refreshes(info string, n int) {
	ft.t.Helper()
	var last time.Time
	seen := -1
	waitFor(ft.t, fmt.Sprintf("%d refreshes of %s", n, info), func() bool {
		var expires time.Time
		err := ft.adm.QueryRow("SELECT max(expires) FROM "+ft.table+" WHERE fleet = $1 AND info = $2", ft.name, info).Scan(&expires)
		if err == nil && !expires.Equal(last) {
			last = expires
			seen++
		}
		return seen >= n
	})
}

// declaredByInfo returns what the live rows of the fleet declare, by the member's info (the fake
// target's name); an error when the table cannot be read (it may have been dropped) or one member
// has two live rows.
func (ft *fleetTest) declaredByInfo() (map[string]int, error) {
	db := ft.adm
	if ft.db != nil {
		db = ft.db
	}
	rs, err := db.Query(fmt.Sprintf(`SELECT info, conns FROM %[1]s
		WHERE fleet = $1 AND %[1]s_live($2, member, expires, clock_timestamp())`, ft.table), ft.name, fleet.Key(ft.name))
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	out := map[string]int{}
	for rs.Next() {
		var info string
		var c int
		if err := rs.Scan(&info, &c); err != nil {
			return nil, err
		}
		if _, dup := out[info]; dup {
			return nil, fmt.Errorf("%s has two live rows", info)
		}
		out[info] = c
	}
	return out, rs.Err()
}

var totals12 = fleet.Share{Conns: 12, Concurrent: []int{10}, Queue: []int{20}}

// TestFleetMembersShareTheTotals: one member alone holds everything; two more join and all three
// come to their fair shares without the fleet ever holding or declaring more than the totals;
// one leaves and its share is taken over at once (its row is deleted, no TTL to wait for).
func TestFleetMembersShareTheTotals(t *testing.T) {
	ft := newFleetTest(t, totals12, 3*time.Second, 100*time.Millisecond)
	defer ft.watchDeclared()()
	a, ta := ft.member(nil, nil)
	ft.waitShares("alone", []*fakeTarget{ta}, 12)
	if s := ta.holds(); s.Concurrent[0] != 10 || s.Queue[0] != 20 {
		t.Fatalf("alone the member holds %v, want all of %v", s, totals12)
	}
	_, tb := ft.member(nil, nil)
	c, tc := ft.member(nil, nil)
	ft.waitShares("three", []*fakeTarget{ta, tb, tc}, 4, 4, 4)
	// A grant may give connections before permits, which follow at the next grant: poll.
	var seen string
	defer func() {
		if t.Failed() {
			t.Logf("last seen: %s", seen)
		}
	}()
	waitFor(t, "each of three holding B 3 or 4 (the lease is outside the share) and Q 6 or 7", func() bool {
		seen = ""
		ok := true
		for _, tg := range []*fakeTarget{ta, tb, tc} {
			s := tg.holds()
			seen += fmt.Sprintf("%s holds %v; ", tg.name, s)
			ok = ok && s.Conns == 4 && s.Concurrent[0] >= 3 && s.Concurrent[0] <= 4 && s.Queue[0] >= 6 && s.Queue[0] <= 7
		}
		return ok
	})
	// A member records a share change in its stats once its target has made it.
	waitFor(t, "the first member's stats to show three members", func() bool {
		st := a.Stats()
		return st.Members == 3 && st.Conns == 4
	})
	if st := a.Stats(); st.Members != 3 || st.Conns != 4 || !st.Seated || st.TotalConns != 12 {
		t.Errorf("stats of the first member: %+v", st)
	}
	// The rows declare the permits at the members' next refresh after the grant: poll.
	var members []fleet.Record
	waitFor(t, "every live row declaring B 3 or 4", func() bool {
		var err error
		if members, err = fleet.Read(context.Background(), ft.adm, ft.name, ft.table); err != nil {
			t.Fatal(err)
		}
		seen = fmt.Sprintf("%+v", members)
		for _, m := range members {
			if m.Live && (len(m.Concurrent) != 1 || m.Concurrent[0] < 3 || m.Concurrent[0] > 4) {
				return false
			}
		}
		return true
	})
	var infos []string
	for _, m := range members {
		if !m.Live && m.LeaseLeft < 0 {
			// A join whose first refresh timed out on a loaded machine (the row written, the
			// answer late): its lease connection was given up, and its row is listed, not
			// live, until it is deleted ten TTLs after it expired.
			t.Logf("the fleet table lists a row that is not live: %+v", m)
			continue
		}
		infos = append(infos, m.Info)
		if !m.Live || m.Conns != 4 || m.TotalConns != 12 || len(m.Concurrent) != 1 || m.Concurrent[0] < 3 || m.Concurrent[0] > 4 || m.LeaseLeft <= 0 {
			t.Errorf("the fleet table: %+v, want a live member declaring 4 connections and B 3 or 4", m)
		}
	}
	for i := 1; i < len(members); i++ {
		if members[i].Joined.Before(members[i-1].Joined) {
			t.Errorf("the fleet table lists %v out of the order they joined", infos)
		}
	}
	slices.Sort(infos)
	if !slices.Equal(infos, []string{"member 1", "member 2", "member 3"}) {
		t.Errorf("the fleet table lists %v live, want the three members", infos)
	}
	c.Close()
	tc.gone()
	ft.waitShares("after one left", []*fakeTarget{ta, tb}, 6, 6)
}

// TestFleetCrashedMemberShareComesBackAfterItsTTL: a member that dies without leaving (its lease
// connection closed, as the kernel closes a killed process's sockets) keeps its share counted
// until its lease expires by the database's clock; then the others take it over.
func TestFleetCrashedMemberShareComesBackAfterItsTTL(t *testing.T) {
	ft := newFleetTest(t, totals12, 2*time.Second, 100*time.Millisecond)
	defer ft.watchDeclared()()
	_, ta := ft.member(nil, nil)
	_, tb := ft.member(nil, nil)
	c, tc := ft.member(nil, nil)
	ft.waitShares("three", []*fakeTarget{ta, tb, tc}, 4, 4, 4)
	c.Crashed.Store(true)
	c.Close()
	tc.gone()
	crashed := time.Now()
	ft.waitShares("after the crash", []*fakeTarget{ta, tb}, 6, 6)
	if d := time.Since(crashed); d < ft.ttl/2 {
		t.Errorf("the crashed member's share came back %v after the crash, before its lease of %v can have expired", d, ft.ttl)
	}
}

// TestFleetDeadLeaseIsReclaimedByTheFirstRefreshAfterItExpires: a member's lease connection dies
// (its backend is terminated, so its lock goes with it) and the member stops refreshing, as a
// killed process does. Its share is counted until its lease expires by the database's clock, so
// a survivor cannot have it before then; the survivors, which saw that nothing but the TTL held
// that lease any more, refresh when it expires instead of at their next regular refresh, and that
// one refresh both finds it expired and grants them the room it frees. Checked by the database's
// clock, not the test's: the first refresh of each survivor that the database runs after the
// dead lease's expiry leaves the survivor declaring its new fair share.
func TestFleetDeadLeaseIsReclaimedByTheFirstRefreshAfterItExpires(t *testing.T) {
	ft := newFleetTest(t, totals12, 1200*time.Millisecond, 300*time.Millisecond)
	defer ft.watchDeclared()()
	// A survivor's refreshes as the table records them: when the database ran each (its lease's
	// expiry less the TTL) and the connections it declared after it, read by the survivor's loop
	// at the start of every turn, so that no refresh goes unseen. Its newest row: a member that
	// had to join again (a refresh late on a loaded machine fences it) leaves its old row behind.
	type refreshed struct {
		at    time.Time
		conns int
	}
	var mu sync.Mutex
	seen := map[string][]refreshed{}
	record := func(name string) func() {
		return func() {
			var r refreshed
			err := ft.adm.QueryRow("SELECT expires - $3::text::interval, conns FROM "+ft.table+" WHERE fleet = $1 AND info = $2 ORDER BY expires DESC LIMIT 1",
				ft.name, name, fleet.Interval(ft.ttl)).Scan(&r.at, &r.conns)
			if err != nil {
				return // not joined yet
			}
			mu.Lock()
			defer mu.Unlock()
			if s := seen[name]; len(s) == 0 || !s[len(s)-1].at.Equal(r.at) {
				seen[name] = append(s, r)
			}
		}
	}
	// The members are named "member 1", "member 2", … in the order they start.
	_, ta := ft.member(nil, record("member 1"))
	_, tb := ft.member(nil, record("member 2"))
	var frozen atomic.Bool
	parked, release := make(chan struct{}, 1), make(chan struct{})
	dial, app := ft.dialer("")
	// The third refreshes more often, so that its lease expires at any point of the others' cycle.
	ft.refresh = 70 * time.Millisecond
	_, tc := ft.member(dial, func() {
		if frozen.Load() {
			parked <- struct{}{}
			<-release
		}
	})
	ft.refresh = 300 * time.Millisecond
	t.Cleanup(func() { close(release) }) // before the members' cleanups, which wait for their loops
	ft.waitShares("three", []*fakeTarget{ta, tb, tc}, 4, 4, 4)

	frozen.Store(true)
	<-parked // its last refresh is done: its lease expires a TTL after the database ran it
	var expires time.Time
	if err := ft.adm.QueryRow("SELECT expires FROM "+ft.table+" WHERE fleet = $1 AND info = 'member 3' ORDER BY expires DESC LIMIT 1", ft.name).Scan(&expires); err != nil {
		t.Fatal(err)
	}
	var killed time.Time
	if err := ft.adm.QueryRow("SELECT clock_timestamp() FROM pg_stat_activity a, pg_terminate_backend(a.pid) WHERE a.application_name = $1",
		app).Scan(&killed); err != nil {
		t.Fatal(err)
	}
	tc.gone()
	ft.waitShares("after the lease connection died", []*fakeTarget{ta, tb}, 6, 6)
	waitFor(t, "the survivors' loops to record their new shares", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, name := range []string{"member 1", "member 2"} {
			if s := seen[name]; len(s) == 0 || s[len(s)-1].conns != 6 {
				return false
			}
		}
		return true
	})

	mu.Lock()
	defer mu.Unlock()
	for _, name := range []string{"member 1", "member 2"} {
		var after []refreshed
		for _, r := range seen[name] {
			if r.at.After(expires) {
				after = append(after, r)
			}
		}
		if len(after) == 0 {
			t.Fatalf("%s: no refresh recorded after the dead lease expired: %v", name, seen[name])
		}
		first := after[0]
		t.Logf("%s: the first refresh after the dead lease expired ran %v after it (%v after the kill) and declared %d connections",
			name, first.at.Sub(expires), first.at.Sub(killed), first.conns)
		if first.conns != 6 {
			var got []string
			for _, r := range after {
				got = append(got, fmt.Sprintf("%v after: %d", r.at.Sub(expires), r.conns))
			}
			t.Errorf("%s: its first refresh after the dead lease expired left it declaring %d connections, want its new fair share of 6 at once; its refreshes after the expiry: %v",
				name, first.conns, got)
		}
	}
}

// TestFleetMemberThatStopsRefreshingKeepsItsShareCounted: a member whose loop stops (the process
// hangs, its connections stay open) is never counted out while its lease connection lives, even
// long after its lease expired: its session lock proves it may still hold its share. A newcomer
// then finds no room beyond the others' shares.
func TestFleetMemberThatStopsRefreshingKeepsItsShareCounted(t *testing.T) {
	ft := newFleetTest(t, totals12, time.Second, 100*time.Millisecond)
	defer ft.watchDeclared()()
	var frozen atomic.Bool
	release := make(chan struct{})
	_, ta := ft.member(nil, nil)
	_, tb := ft.member(nil, func() {
		if frozen.Load() {
			<-release
		}
	})
	t.Cleanup(func() { close(release) }) // before the members' cleanups, which wait for their loops
	ft.waitShares("two", []*fakeTarget{ta, tb}, 6, 6)
	frozen.Store(true)
	// Three TTLs past its lease's expiry by the database's clock: a TTL-only lease would have
	// handed b's share to a, or to the newcomer.
	waitFor(t, "the frozen member's lease three TTLs past its expiry", func() bool {
		var past bool
		err := ft.adm.QueryRow("SELECT bool_and(expires < clock_timestamp() - 3 * $3::text::interval) FROM "+ft.table+" WHERE fleet = $1 AND info = $2",
			ft.name, tb.name, fleet.Interval(ft.ttl)).Scan(&past)
		return err == nil && past
	})
	ft.refreshes(ta.name, 3) // the others have seen it so
	_, tc := ft.member(nil, nil)
	ft.waitShares("a newcomer beside a frozen member", []*fakeTarget{ta, tb, tc}, 4, 6, 2)
}

// TestFleetDatabaseClockJumpExpiresNoLiveMember: the database's clock jumps an hour ahead for
// every refresh, so that every lease looks long expired. The members' session locks keep them
// counted: nobody grows into another's share, and a newcomer still only gets what is freed for it.
func TestFleetDatabaseClockJumpExpiresNoLiveMember(t *testing.T) {
	ft := newFleetTest(t, totals12, 2*time.Second, 100*time.Millisecond)
	defer ft.watchDeclared()()
	a, ta, b, tb := ft.twoSeated(nil)
	for _, m := range []*fleet.Member{a, b} {
		m.Skew.Store(int64(time.Hour))
	}
	c, tc := ft.member(nil, nil)
	c.Skew.Store(int64(time.Hour))
	ft.waitShares("three after the jump", []*fakeTarget{ta, tb, tc}, 4, 4, 4)
	// And back: the leases written during the jump now look an hour younger, which would only
	// delay a crashed member's return by that hour; once every member has refreshed on the
	// clock as it is, a crash is reclaimed after the TTL again.
	for _, m := range []*fleet.Member{a, b, c} {
		m.Skew.Store(0)
	}
	waitFor(t, "every lease refreshed after the jump back", func() bool {
		var late bool
		err := ft.adm.QueryRow("SELECT bool_or(expires > clock_timestamp() + $2::interval) FROM "+ft.table+" WHERE fleet = $1",
			ft.name, fleet.Interval(ft.ttl)).Scan(&late)
		return err == nil && !late
	})
	b.Crashed.Store(true)
	b.Close()
	tb.gone()
	ft.waitShares("after a crash", []*fakeTarget{ta, tc}, 6, 6)
}

// TestFleetBlackholedCoordinationKeepsTheTotals: one member's lease connection goes through a
// proxy that stops forwarding. Its refreshes hang and time out; it keeps its share without
// growing until its lease may have expired, then fences itself to nothing. The others never
// take its share meanwhile: its lease backend, held open by the partition, keeps its lock. Once
// the network heals it gets its share back under the same row, and terminates that backend.
func TestFleetBlackholedCoordinationKeepsTheTotals(t *testing.T) {
	forEachDriver(t, testFleetBlackholed)
}

func testFleetBlackholed(t *testing.T, drv string) {
	ft := newFleetTest(t, totals12, 1500*time.Millisecond, 100*time.Millisecond)
	defer ft.watchDeclared()()
	p, base := proxied(t)
	dial, app := ft.dialerWith(drv, base)
	_, ta := ft.member(nil, nil)
	b, tb := ft.member(dial, nil)
	ft.waitShares("two", []*fakeTarget{ta, tb}, 6, 6)
	p.Blackhole(true)
	waitFor(t, "the partitioned member to fence itself", func() bool { return tb.holds().Conns == 0 })
	// The member records the fence in its stats once its target holds nothing.
	waitFor(t, "the partitioned member's stats to show the fence", func() bool { return !b.Stats().Seated })
	if st := b.Stats(); st.RefreshErrors == 0 || st.Seated {
		t.Errorf("stats of the partitioned member: %+v", st)
	}
	if s := ta.holds(); s.Conns != 6 {
		t.Errorf("during the partition the other member holds %v, want its 6 connections and no more", s)
	}
	p.Blackhole(false)
	ft.waitShares("healed", []*fakeTarget{ta, tb}, 6, 6)
	// The lease connection given up during the partition is still open on the server (the
	// proxy holds it, as a partitioned network does until TCP keepalive ends it): the member's
	// new lease connection terminates it.
	waitFor(t, "the given-up lease connection terminated", func() bool { return backends(t, ft.adm, app) == 1 })
}

// TestFleetNewcomerWhoseServerIsSlowToConnectIsSeated: on a loaded server a new backend can take
// longer to start than a refresh may take. A newcomer holds nothing that a slow dial could keep
// past a fence, so it waits for the connection instead of abandoning it and starting another
// backend, which a loaded server would be as slow to start.
func TestFleetNewcomerWhoseServerIsSlowToConnectIsSeated(t *testing.T) {
	ft := newFleetTest(t, totals12, 3*time.Second, 100*time.Millisecond)
	defer ft.watchDeclared()()
	dial, _ := ft.dialer("")
	slow := 3 * fleet.QueryTimeout(ft.ttl) / 2
	var dials atomic.Int32
	_, ta := ft.member(func(ctx context.Context) (fleet.Conn, error) {
		dials.Add(1)
		timer := time.NewTimer(slow)
		defer timer.Stop()
		select {
		case <-timer.C:
			return dial(ctx)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}, nil)
	ft.waitShares("a newcomer whose every dial takes "+slow.String(), []*fakeTarget{ta}, 12)
	if n := dials.Load(); n != 1 {
		t.Errorf("the newcomer dialed %d times, want once", n)
	}
}

// TestFleetFailingCoordinationKeepsTheShareThenFences: every refresh of one member is cut by the
// network before it reaches the server (a reset). It keeps its share while its lease is valid,
// fences itself before the lease can expire, and the others take its share only after that.
// (Were the refreshes cut after reaching the server, the server would go on renewing the lease of
// a member that declares nothing once fenced: the others keep their fair shares, and nobody holds
// more than the totals either.)
func TestFleetFailingCoordinationKeepsTheShareThenFences(t *testing.T) {
	ft := newFleetTest(t, totals12, 1500*time.Millisecond, 100*time.Millisecond)
	defer ft.watchDeclared()()
	p, base := proxied(t)
	dial, _ := ft.dialer(base)
	_, ta := ft.member(nil, nil)
	var failing atomic.Bool
	var tb *fakeTarget
	_, tb = ft.member(dial, func() {
		if failing.Load() {
			// The member's name is in every refresh's parameters (pgx sends the statement's
			// text only when it prepares it).
			p.Arm(faultproxy.Rule{Match: []byte(tb.name), How: faultproxy.RST, When: faultproxy.BeforeRequest})
		}
	})
	ft.waitShares("two", []*fakeTarget{ta, tb}, 6, 6)
	failing.Store(true)
	ft.waitShares("failing", []*fakeTarget{ta, tb}, 12, 0)
	failing.Store(false)
	ft.waitShares("recovered", []*fakeTarget{ta, tb}, 6, 6)
}

// TestFleetShrinkWaitsForRunningWork: a member whose operations do not end cannot shrink, so it
// keeps declaring its share, and the newcomer waits for it; once the work ends the shares move.
func TestFleetShrinkWaitsForRunningWork(t *testing.T) {
	ft := newFleetTest(t, totals12, 2*time.Second, 100*time.Millisecond)
	defer ft.watchDeclared()()
	_, ta := ft.member(nil, nil)
	ft.waitShares("alone", []*fakeTarget{ta}, 12)
	ta.stuck.Store(true)
	_, tb := ft.member(nil, nil)
	ft.refreshes(tb.name, 5) // five refreshes of the newcomer, each refused the room
	if s := tb.holds(); s.Conns != 0 {
		t.Fatalf("the newcomer holds %v while the other cannot shrink", s)
	}
	ta.stuck.Store(false)
	ft.waitShares("after the work ended", []*fakeTarget{ta, tb}, 6, 6)
}

// TestFleetLeavingMemberIsNoSeatWhileItsWorkDrains: an instance that leaves lowers its B to 0 at
// once and then waits for its running work; from that moment its Stats say it is not seated,
// since it can run nothing (a seated instance always has a permit).
func TestFleetLeavingMemberIsNoSeatWhileItsWorkDrains(t *testing.T) {
	ft := newFleetTest(t, totals12, 2*time.Second, 100*time.Millisecond)
	m, ta := ft.member(nil, nil)
	ft.waitShares("alone", []*fakeTarget{ta}, 12)
	if !m.Stats().Seated {
		t.Fatal("a member holding the whole total is not seated")
	}
	ta.stuck.Store(true)
	closed := make(chan struct{})
	go func() { m.Close(); close(closed) }()
	testwait.For(t, "the leaving member's shrink", func() bool { return ta.held.Load() > 0 })
	if s := m.Stats(); s.Seated {
		t.Errorf("while its shrink to nothing waits for running work the member's stats say seated (%+v)", s)
	}
	ta.stuck.Store(false)
	<-closed
}

// TestFleetMoreMembersThanConnections: with 3 connections and 5 members, the first three hold a
// seat of one working connection and one permit each (their lease connection is outside the
// share), the last two hold nothing and keep no connection open; when two seated members leave,
// the waiting ones get the seats.
func TestFleetMoreMembersThanConnections(t *testing.T) {
	ft := newFleetTest(t, fleet.Share{Conns: 3, Concurrent: []int{3}, Queue: []int{3}}, 2*time.Second, 100*time.Millisecond)
	defer ft.watchDeclared()()
	var ms []*fleet.Member
	var ts []*fakeTarget
	for range 5 {
		m, tg := ft.member(nil, nil)
		ms, ts = append(ms, m), append(ts, tg)
		waitFor(t, "the member to join", func() bool { return m.Stats().Members == len(ms) })
	}
	ft.waitShares("five", ts, 1, 1, 1, 0, 0)
	for _, tg := range ts {
		if s := tg.holds(); s.Conns > 0 && s.Concurrent[0] != 1 || s.Conns == 0 && s.Concurrent[0] != 0 {
			t.Errorf("%s holds %v, want one permit with its seat and none without", tg.name, s)
		}
	}
	ms[0].Close()
	ts[0].gone()
	ms[1].Close()
	ts[1].gone()
	ft.waitShares("three left", ts[2:], 1, 1, 1)
}

// BenchmarkFleetRefresh measures one refresh, the only coordination query, in a fleet of six
// members: a steady one (declares what it holds), one that asks to grow (takes the growth lock
// and reads the others' declarations), and one that asks to grow in the fleet it expects once
// another lease has expired (the fleet is that: it reads who is live, then grows).
func BenchmarkFleetRefresh(b *testing.B) {
	for _, bc := range []struct {
		name        string
		grow, lapse bool
	}{{"grow=false", false, false}, {"grow=true", true, false}, {"lapse", false, true}} {
		b.Run(bc.name, func(b *testing.B) {
			totals := fleet.Share{Conns: 60, Concurrent: []int{48}, Queue: []int{48}}
			adm := admin(b)
			table := fmt.Sprintf("gated_bench_fleet_%d", time.Now().UnixNano()%1e9)
			b.Cleanup(func() {
				for _, drop := range []string{"FUNCTION IF EXISTS " + table + "_refresh", "FUNCTION IF EXISTS " + table + "_live", "TABLE IF EXISTS " + table} {
					adm.Exec("DROP " + drop)
				}
			})
			connector, wrap, err := drivers.New("pgx", pgtest.URL(b), drivers.Options{})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			var conns []fleet.Conn
			for i := range 6 {
				c, err := dialLease(ctx, connector, wrap)
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				if i == 0 {
					if err := fleet.EnsureSchema(ctx, c, table); err != nil {
						b.Fatal(err)
					}
				}
				conns = append(conns, c)
				have := fleet.TargetShare(totals, 6, i)
				have.Conns-- // leave room to grow into
				req := &fleet.Request{Fleet: "bench", Key: fleet.Key("bench"), Member: int32(i + 1), Joining: true, TTL: time.Minute,
					Have: have, Want: have, Totals: totals}
				if _, err := fleet.Refresh(ctx, c, table, req); err != nil {
					b.Fatal(err)
				}
			}
			have := fleet.TargetShare(totals, 6, 0)
			have.Conns--
			req := &fleet.Request{Fleet: "bench", Key: fleet.Key("bench"), Member: 1, TTL: time.Minute, Have: have, Want: have, Totals: totals}
			if bc.grow {
				req.Want = have.Join(fleet.TargetShare(totals, 1, 0))
			}
			if bc.lapse {
				req.AfterLive, req.AfterWant = []int{2, 3, 4, 5, 6}, have.Join(fleet.TargetShare(totals, 1, 0))
			}
			b.ResetTimer()
			for b.Loop() {
				if _, err := fleet.Refresh(ctx, conns[0], table, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestFleetGivenUpLeaseConnectionIsTerminated: one refresh of a member hangs for good on its
// connection (a network that drops that one flow; the server keeps the backend open). The
// member gives the connection up at its timeout, keeps its share on a new lease connection, and
// terminates the old backend, which would otherwise count one above its share (and hold its lock)
// until the server's TCP keepalive ended it.
func TestFleetGivenUpLeaseConnectionIsTerminated(t *testing.T) {
	forEachDriver(t, func(t *testing.T, drv string) {
		// The hung refresh is given up after a third of the TTL and the member must refresh on a
		// new connection before two thirds: a TTL of 4.5 s leaves 1.5 s for that on a loaded
		// machine (with 1.5 s, 0.5 s was sometimes too little, and the member fenced).
		ft := newFleetTest(t, totals12, 4500*time.Millisecond, 100*time.Millisecond)
		defer ft.watchDeclared()()
		p, base := proxied(t)
		dial, app := ft.dialerWith(drv, base)
		_, ta := ft.member(nil, nil)
		b, tb := ft.member(dial, nil)
		ft.waitShares("two", []*fakeTarget{ta, tb}, 6, 6)
		var old int
		if err := ft.adm.QueryRow("SELECT pid FROM pg_stat_activity WHERE application_name = $1", app).Scan(&old); err != nil {
			t.Fatal(err)
		}
		errs := b.Stats().RefreshErrors
		holed := p.Arm(faultproxy.Rule{Match: []byte(tb.name), How: faultproxy.Blackhole, When: faultproxy.BeforeRequest})
		<-holed
		waitFor(t, "the hung refresh given up", func() bool { return b.Stats().RefreshErrors > errs })
		waitFor(t, "the given-up lease connection's backend terminated", func() bool {
			var n int
			return ft.adm.QueryRow("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", old).Scan(&n) == nil && n == 0
		})
		waitFor(t, "one lease connection", func() bool { return backends(t, ft.adm, app) == 1 })
		if s := tb.holds(); s.Conns != 6 {
			t.Errorf("the member holds %v after one hung refresh, want its share of 6 kept", s)
		}
		p.Close() // ends the held flow, so that the member's background close of it need not wait for its bound
	})
}

// TestFleetKeepsToTheSmallestTotals: during a rolling deploy that lowers the budget from 12 to 8
// connections, old and new members run side by side; the fleet keeps to 8 while any member
// configured with 8 lives, and the old members' shares shrink to fit.
func TestFleetKeepsToTheSmallestTotals(t *testing.T) {
	ft := newFleetTest(t, totals12, 2*time.Second, 100*time.Millisecond)
	defer ft.watchDeclared()()
	_, ta := ft.member(nil, nil)
	_, tb := ft.member(nil, nil)
	ft.waitShares("two old", []*fakeTarget{ta, tb}, 6, 6)
	lower := fleet.Share{Conns: 8, Concurrent: []int{6}, Queue: []int{12}}
	ft.f.mu.Lock()
	ft.f.lower = map[string]fleet.Share{"member 3": lower} // the next member's name
	ft.f.mu.Unlock()
	_, tc := ft.memberWith(lower, nil, nil)
	ft.waitShares("two old and one new", []*fakeTarget{ta, tb, tc}, 3, 3, 2)
}

// TestFleetSurvivesAServerRestart: the server restarts under a fleet of two. Their lease
// connections break and their locks go with the server, but their leases are rows: each member
// reconnects, finds its row live, and keeps its share; nobody is ever above the totals.
func TestFleetSurvivesAServerRestart(t *testing.T) {
	cluster := pgtest.NewCluster(t)
	ft := newFleetTest(t, totals12, 20*time.Second, 200*time.Millisecond)
	dial, _ := ft.dialer(cluster.URL())
	// The fleet's table is on the cluster, which the test's admin connection does not reach.
	ft.db = openPlain(t, cluster.URL())
	a, ta, b, tb := ft.twoSeated(dial)
	errs := a.Stats().RefreshErrors + b.Stats().RefreshErrors
	changes := a.Stats().ShareChanges + b.Stats().ShareChanges
	cluster.Restart(t)
	waitFor(t, "refreshes to fail and then succeed again", func() bool {
		return a.Stats().RefreshErrors+b.Stats().RefreshErrors > errs && a.Stats().Members == 2 && b.Stats().Members == 2
	})
	ft.waitShares("after the restart", []*fakeTarget{ta, tb}, 6, 6)
	if c := a.Stats().ShareChanges + b.Stats().ShareChanges; c != changes {
		t.Errorf("the shares changed %d times across the restart, want none: the members were to keep them", c-changes)
	}
}

// The refresh function of gated 0.1.0 (testdata/fleet_schema_0.1.0.sql), called as a 0.1.0
// member calls it.
const (
	fleetRefreshSignature010 = "_refresh(text,int,int,boolean,interval,interval,int,int[],int[],int,int[],int[],int,int[],int[],text,int,timestamptz)"
	fleetRefreshQuery010     = "_refresh($1, $2, $3, $4, $5::text::interval, $6::text::interval, " +
		"$7, $8::text::int[], $9::text::int[], $10, $11::text::int[], $12::text::int[], " +
		"$13, $14::text::int[], $15::text::int[], $16, $17, $18)"
)

// A member010 is a member of gated 0.1.0 on its lease connection, driven by the test: each
// refresh declares what its target holds and asks for want, and its target grows into the grant.
type member010 struct {
	ft     *fleetTest
	id     int32
	conn   fleet.Conn
	target *fakeTarget
	joined bool
}

func (o *member010) refresh(want fleet.Share) {
	o.ft.t.Helper()
	have := o.target.holds()
	rows, err := o.conn.Query(context.Background(), "SELECT * FROM "+o.ft.table+fleetRefreshQuery010,
		o.ft.name, int64(fleet.Key(o.ft.name)), int64(o.id), !o.joined, fleet.Interval(o.ft.ttl), fleet.Interval(0),
		int64(have.Conns), fleet.SQLInts(have.Concurrent), fleet.SQLInts(have.Queue),
		int64(want.Conns), fleet.SQLInts(want.Concurrent), fleet.SQLInts(want.Queue),
		int64(o.ft.f.totals.Conns), fleet.SQLInts(o.ft.f.totals.Concurrent), fleet.SQLInts(o.ft.f.totals.Queue), o.target.name,
		int64(0), nil)
	if err != nil {
		o.ft.t.Fatalf("%s: %v", o.target.name, err)
	}
	for _, row := range rows {
		if len(row) != 13 {
			o.ft.t.Fatalf("%s: the 0.1.0 function returned %d columns", o.target.name, len(row))
		}
		if mine, _ := row[10].(bool); mine {
			o.joined = true
			declared := fleet.Share{Conns: int(row[3].(int64))}
			declared.Concurrent, _ = fleet.ParseInts(fleet.TextValue(row[4]))
			declared.Queue, _ = fleet.ParseInts(fleet.TextValue(row[5]))
			o.target.GrowTo(have.GrowToward(declared))
		}
	}
	if !o.joined {
		o.ft.t.Fatalf("%s: not counted by the fleet", o.target.name)
	}
}

// shrink moves the member to s, then declares it.
func (o *member010) shrink(s fleet.Share) {
	o.target.ShrinkTo(context.Background(), s)
	o.refresh(s)
}

// TestFleetMembersOf010AndThisVersionShareOneTable: the table and functions of gated 0.1.0 are
// in place when an instance of this version starts. It adds its own refresh function beside the
// old one (which stays for the 0.1.0 instances), and members of both versions count each other:
// nobody grows into another's share, each makes room for a newcomer of the other version, and a
// 0.1.0 member's crash is reclaimed at its lease's expiry.
func TestFleetMembersOf010AndThisVersionShareOneTable(t *testing.T) {
	ft := newFleetTest(t, totals12, 1200*time.Millisecond, 100*time.Millisecond)
	old, err := os.ReadFile("testdata/fleet_schema_0.1.0.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ft.adm.Exec(fmt.Sprintf(string(old), ft.table)); err != nil {
		t.Fatal(err)
	}
	// Runs before newFleetTest's cleanup, which drops the functions by name: one overload each.
	t.Cleanup(func() { ft.adm.Exec("DROP FUNCTION IF EXISTS " + ft.table + fleetRefreshSignature010) })
	defer ft.watchDeclared()()
	connector, wrap, err := drivers.New("pgx", pgtest.URL(t), drivers.Options{})
	if err != nil {
		t.Fatal(err)
	}
	old010 := func(id int32, name string) *member010 {
		c, err := dialLease(context.Background(), connector, wrap)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return &member010{ft: ft, id: id, conn: c, target: &fakeTarget{f: ft.f, name: name}}
	}
	fair := func(n, rank int) fleet.Share { return fleet.TargetShare(totals12, n, rank) }

	o1 := old010(1001, "0.1.0 member 1")
	o1.refresh(fair(1, 0)) // joins alone and is granted everything
	if got := o1.target.holds().Conns; got != 12 {
		t.Fatalf("the 0.1.0 member alone holds %d connections, want 12", got)
	}
	// The new member's loop runs late after each shrink, as on a loaded machine: it declares the
	// smaller share a while after it holds it, so the 0.1.0 members' refreshes must wait for the
	// table to show the room, not for the new member to hold less.
	var late atomic.Pointer[fakeTarget]
	held := -1
	_, ta := ft.member(nil, func() {
		if tg := late.Load(); tg != nil {
			c := tg.holds().Conns
			if c < held {
				time.Sleep(300 * time.Millisecond)
			}
			held = c
		}
	})
	late.Store(ta)
	waitFor(t, "the new member to join beside the 0.1.0 one", func() bool {
		var n int
		return ft.adm.QueryRow("SELECT count(*) FROM "+ft.table+" WHERE fleet = $1", ft.name).Scan(&n) == nil && n == 2
	})
	for _, sig := range []string{ft.table + fleetRefreshSignature010, fleet.RefreshSignature(ft.table)} {
		var ok bool
		if err := ft.adm.QueryRow("SELECT to_regprocedure($1) IS NOT NULL", sig).Scan(&ok); err != nil || !ok {
			t.Errorf("%s: exists %v (%v), want both versions' functions", sig, ok, err)
		}
	}
	if got := ta.holds().Conns; got != 0 {
		t.Fatalf("the new member holds %d connections while the 0.1.0 one declares all 12", got)
	}
	o1.shrink(fair(2, 0))
	ft.waitShares("a 0.1.0 member and a new one", []*fakeTarget{o1.target, ta}, 6, 6)

	o2 := old010(1002, "0.1.0 member 2")
	o2.refresh(fair(1, 0)) // a newcomer asks for everything and is granted what is free: nothing
	if got := o2.target.holds().Conns; got != 0 {
		t.Fatalf("the 0.1.0 newcomer holds %d connections, want none before the others make room", got)
	}
	ft.waitShares("the new member making room for the 0.1.0 newcomer", []*fakeTarget{o1.target, ta, o2.target}, 6, 4, 0)
	o1.shrink(fair(3, 0))
	// A 0.1.0 member refreshes until it is granted its share, as its loop does.
	waitFor(t, "the 0.1.0 newcomer granted its share", func() bool {
		o2.refresh(fair(3, 2))
		return o2.target.holds().Conns == 4
	})
	ft.waitShares("three of two versions", []*fakeTarget{o1.target, ta, o2.target}, 4, 4, 4)

	o1.conn.Close() // crashed: its lock is gone, its lease is not
	o1.target.gone()
	ft.waitShares("after the first 0.1.0 member crashed", []*fakeTarget{ta, o2.target}, 6, 4)
}

// TestFleetSchemaRefusesARefreshFunctionOfAnotherResult: a refresh function with this version's
// signature but another result (made by some other version) is neither replaced nor called:
// preparing the fleet table fails and says why.
func TestFleetSchemaRefusesARefreshFunctionOfAnotherResult(t *testing.T) {
	ft := newFleetTest(t, totals12, time.Second, 100*time.Millisecond)
	sig := fleet.RefreshSignature(ft.table)
	args := sig[len(ft.table+"_refresh(") : len(sig)-1]
	if _, err := ft.adm.Exec("CREATE FUNCTION " + ft.table + "_refresh(" + args + ") RETURNS TABLE(r_member int) LANGUAGE sql AS 'SELECT 1'"); err != nil {
		t.Fatal(err)
	}
	dial, _ := ft.dialer("")
	c, err := dial(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = fleet.EnsureSchema(context.Background(), c, ft.table)
	if err == nil || !strings.Contains(err.Error(), "TABLE(r_member integer)") {
		t.Fatalf("EnsureSchema: %v, want an error naming the function's other result", err)
	}
	var result string
	if err := ft.adm.QueryRow("SELECT pg_get_function_result(to_regprocedure($1))", sig).Scan(&result); err != nil || result != "TABLE(r_member integer)" {
		t.Errorf("the function now returns %q (%v), want it left alone", result, err)
	}
}
