package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// A Member is one instance's membership: a goroutine that keeps its lease (lease.go), computes
// its fair share (share.go) and moves its gates and pool to it through a Target.
//
// The rules that keep the fleet within its totals at every instant:
//
//   - A member shrinks before it declares less: shrinkTo returns once connections above the new
//     share are closed and running operations are within the new B, and only the next refresh
//     declares the smaller share.
//   - A member grows only into what the database granted it, under the fleet's growth lock, from
//     what the others' declarations leave free; it declares first and grows after the grant is
//     committed.
//   - A newcomer holds nothing (its gates refuse every operation) until its first grant; its
//     lease connection is the only one it has open meanwhile.
//   - When coordination fails the member keeps its share and never grows, until its lease may
//     have expired by the database's reckoning (its last successful refresh was sent more than
//     fenceAfter of the TTL ago): then it fences itself, shrinking to nothing, because the others
//     may soon count its share as free. A member whose row the database no longer counts fences
//     and joins again.
//   - A live lock is a live member, row or none: while the lease connection holds the member's
//     lock, a failed refresh keeps the share (the table or a function dropped: the next turn
//     creates what is missing), and a member whose row is gone declares again what it holds.
//     Without the lock and without the row, nothing counts the member: it fences at once.

// A Target is what a member controls: its instance's gates and pool.
type Target interface {
	// ShrinkTo lowers the instance to s (fitted) and returns nil once it is within s: no more
	// physical connections open than s.DataConns(), and no gate running more than its new B. It
	// never takes a permit from a running operation: it waits for operations to end. When ctx
	// ends first it returns ctx's error; the limits stay lowered and a later call waits again.
	ShrinkTo(ctx context.Context, s Share) error
	// GrowTo raises the instance to s (fitted), which is nowhere below what it holds.
	GrowTo(s Share)
}

// Config is a member's configuration, from the instance's.
type Config struct {
	Name    string // gate_name
	Table   string // gate_fleet_table, a name ValidTable accepts
	TTL     time.Duration
	Refresh time.Duration
	Totals  Share  // gate_max_conns, and each gate's B and Q: the default workload first
	Info    string // shown in the fleet table (gatedbudget -live): host and process (Info)
}

// fenceAfter is the part of the TTL after the last successful refresh was sent at which a member
// that cannot refresh fences itself: the rest of the TTL is left for running operations to end
// before the others may reclaim its share.
const fenceAfter = 2.0 / 3

// pendingRefreshDiv divides the refresh interval while a member waits for a grant it has asked
// for, so that a newcomer gets its seat soon after the others made room.
const pendingRefreshDiv = 4

// lapseMargin is how long after another member's lease expires, by the database's clock as the
// last refresh read it, a member refreshes to take its share over: room for the two clocks to
// drift apart over a TTL. A refresh sent too early finds the lease live and is sent again at its
// expiry.
const lapseMargin = 10 * time.Millisecond

// A Member is the membership of one gate set in its fleet.
type Member struct {
	cfg    Config
	key    int32
	dial   func(ctx context.Context) (Conn, error)
	target Target
	log    *slog.Logger
	stop   chan struct{}
	halt   context.Context // ends with stop: bounds the wait for a notification
	cancel context.CancelFunc
	done   chan struct{}
	// channel is the fleet's notification channel (notify.go).
	channel string
	bg      sync.WaitGroup // lease connections being closed in the background

	// The loop's own state, touched only by run.
	conn       Conn
	waiter     Waiter // conn's, once it listens to the channel; nil: wait by the clock alone
	listening  bool   // LISTEN was tried on conn
	declared   Share  // what the last refresh that succeeded declared the instance held
	id         int32
	joined     bool      // the database holds a live row of ours
	have       Share     // what the instance holds now; declared by the next refresh
	validUntil time.Time // monotonic: until when our lease (our row) is certainly counted; zero once the row is known gone
	// Monotonic: until when the lock our lease connection was last seen to hold keeps us counted,
	// row or none; zero once that connection is dropped. See proveLock.
	lockedUntil time.Time
	schemaOK    bool  // the table and this version's functions were there when last looked for
	lastTarget  Share // the fair share computed from the last refresh; valid when joined
	// When the last refresh saw leases of others that only their TTL keeps counted (their lock
	// is gone: a crashed instance), lapseAt is when the earliest expires, plus lapseMargin: the
	// next refresh is sent then if that comes before the regular one. afterLive and afterTarget
	// are the others expected live once it has expired and the fair share in that fleet, which
	// the refresh asks for should the fleet be that (afterLive nil: no expectation).
	lapseAt     time.Time
	afterLive   []int
	afterTarget Share
	// The backend of the lease connection last refreshed on, and of the one before it while the
	// current connection has not refreshed yet: the server may still hold that one open.
	leasePID   int64
	leaseStart time.Time
	prevPID    int64
	prevStart  time.Time
	lastErr    string // what failed in the current streak of failures and whether the lease connection was kept, logged once; "" after a success

	// Tests only: Skew (ns) moves the database's clock as this member's refreshes read it;
	// BeforeStep, when set before Start, runs at the start of every turn; Crashed makes Close
	// drop the lease connection without leaving, as a killed process would.
	Skew       atomic.Int64
	BeforeStep func()
	Crashed    atomic.Bool

	closeOnce sync.Once

	mu sync.Mutex
	// Guarded by mu: what Stats reports.
	status Stats
}

// Stats is a member's place in its fleet, field for field the root's FleetStats, which documents
// each. TotalConcurrent and TotalQueue are left zero: they are a gate's, which the caller fills in
// from Totals.
type Stats struct {
	Members         int
	Conns           int
	TotalConns      int
	TotalConcurrent int
	TotalQueue      int
	Seated          bool
	ShareChanges    int64
	RefreshErrors   int64
	SchemaMissing   bool
}

// New returns the membership of an instance in the fleet of cfg, not started: it dials its lease
// connections with dial, moves the instance with target and logs to log (nil: not at all). The
// instance is to hold nothing when it starts.
func New(cfg Config, dial func(context.Context) (Conn, error), target Target, log *slog.Logger) *Member {
	m := &Member{
		cfg: cfg, key: Key(cfg.Name), dial: dial, target: target, log: log,
		stop: make(chan struct{}), done: make(chan struct{}), channel: NotifyChannel(cfg.Table, cfg.Name),
		have: ZeroShare(len(cfg.Totals.Concurrent)), declared: ZeroShare(len(cfg.Totals.Concurrent)),
	}
	m.halt, m.cancel = context.WithCancel(context.Background())
	m.status.TotalConns = cfg.Totals.Conns
	return m
}

// Start runs the member's loop until Close.
func (m *Member) Start() { go m.run() }

// Close leaves the fleet: it stops the loop, and once the instance holds nothing (the caller has
// closed its pool), deletes the member's row so that its share is free at once. Without that,
// the share comes back when the lease expires. A second Close waits for the first.
func (m *Member) Close() {
	m.closeOnce.Do(func() {
		close(m.stop)
		m.cancel()
	})
	<-m.done
}

func (m *Member) run() {
	defer close(m.done)
	defer m.leave()
	for {
		select {
		case <-m.stop:
			return
		default:
		}
		if !m.wait(m.step()) {
			return
		}
	}
}

// wait waits d, or less when another member's notification arrives first on the lease
// connection: it joined, declared less or left, and a refresh now takes the room it made or
// makes the room it needs. It returns false when the member was closed meanwhile.
func (m *Member) wait(d time.Duration) bool {
	if d <= 0 {
		return true
	}
	if m.waiter != nil {
		ctx, cancel := context.WithTimeout(m.halt, d)
		err := m.waiter.WaitNotify(ctx, strconv.Itoa(int(m.id)))
		cancel()
		switch {
		case m.halt.Err() != nil:
			return false
		case err == nil || ctx.Err() != nil:
			return true
		case errors.Is(err, ErrNoWait):
			m.waiter = nil // and wait by the clock
		default:
			m.dropConn() // broken: the next turn dials another
			return true
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-m.stop:
		return false
	case <-t.C:
		return true
	}
}

// step is one turn of the loop: fence if the lease may have lapsed, refresh, grow into a grant,
// shrink towards the fair share. It returns how long to wait before the next turn: the turn's
// own wait, or less when another lease is to expire sooner.
func (m *Member) step() time.Duration {
	if m.BeforeStep != nil {
		m.BeforeStep()
	}
	wait := m.turn()
	if !m.lapseAt.IsZero() {
		wait = min(wait, max(time.Until(m.lapseAt), 0))
	}
	return wait
}

// turn is step's work.
func (m *Member) turn() time.Duration {
	// Set again by a refresh that succeeds: what a refresh saw is stale once one failed.
	afterLive := m.afterLive
	m.lapseAt, m.afterLive = time.Time{}, nil
	if m.mustFence() {
		m.fence("its lease may have expired (no refresh succeeded for " + fmt.Sprint(time.Duration(float64(m.cfg.TTL)*fenceAfter)) +
			", or its row is gone) and no lock proves its membership")
	}
	if m.conn == nil {
		if err := m.connect(); err != nil {
			if m.halt.Err() != nil {
				return 0 // closed meanwhile: the loop ends
			}
			return m.failed("connecting", err, false)
		}
	}
	pctx, pcancel := context.WithTimeout(context.Background(), m.statementTimeout())
	defer pcancel()
	if !m.schemaOK {
		// Looked for again after every refresh that found something missing: the table may have
		// been dropped (the functions survive it) or a function (the table survives it).
		if err := EnsureSchema(pctx, m.conn, m.cfg.Table); err != nil {
			m.setSchemaMissing(m.conn.SQLState(err) == "42501", err)
			return m.failed("preparing the fleet table", err, m.answered(pctx, err))
		}
		m.schemaOK = true
		m.setSchemaMissing(false, nil)
	}
	// The refresh gets a deadline of its own: what dialing or creating the schema took on a slow
	// server must not leave it too little, since a refresh that its deadline interrupts costs the
	// lease connection, and with it the lock.
	ctx, cancel := context.WithTimeout(context.Background(), m.statementTimeout())
	defer cancel()
	if !m.joined {
		m.id = rand.Int32N(1<<31-1) + 1
	}
	req := &Request{
		Fleet: m.cfg.Name, Key: m.key, Member: m.id, Joining: !m.joined, TTL: m.cfg.TTL, Skew: time.Duration(m.Skew.Load()),
		Have: m.have, Want: m.want(), Totals: m.cfg.Totals, Info: m.cfg.Info,
		PrevPID: m.prevPID, PrevStart: m.prevStart, Reclaim: m.joined,
	}
	if m.joined && afterLive != nil {
		req.AfterLive, req.AfterWant = afterLive, m.have.Join(m.afterTarget)
	}
	sent := time.Now()
	v, err := Refresh(ctx, m.conn, m.cfg.Table, req)
	if err != nil {
		rowGone := false
		switch m.conn.SQLState(err) {
		case "42P01", "3F000": // undefined_table, invalid_schema_name: our row went with it
			m.schemaOK, rowGone = false, true
		case "42883": // undefined_function
			m.schemaOK = false
		}
		wait := m.failed("refreshing the lease", err, m.answered(ctx, err))
		if rowGone {
			// Only the lock counts us now: without it, fence at once.
			m.validUntil = time.Time{}
			if m.mustFence() {
				return 0
			}
		}
		return wait
	}
	m.expectLapse(v, time.Now())
	m.lastErr = ""
	m.leasePID, m.leaseStart, m.prevPID, m.prevStart = v.pid, v.start, 0, time.Time{}
	if !v.mine {
		if m.joined {
			m.fence("the fleet no longer counts it")
			m.joined = false
			return 0
		}
		return 0 // the id was taken: another one at once
	}
	joinedNow := !m.joined
	m.joined = true
	m.validUntil = sent.Add(time.Duration(float64(m.cfg.TTL) * fenceAfter))
	me := v.me()
	// A new lease connection listens once its first refresh has kept the lease: not before, where
	// the round trip would delay the refresh that a member whose connection was given up needs
	// before it must fence; and before the member notifies, so that the answers to a newcomer's
	// notification reach it. Without LISTEN the member only misses the others' notifications: it
	// refreshes at its regular interval.
	if !m.listening {
		m.listening = true // tried once per connection
		if w := m.conn.Waiter(); w != nil && Listen(ctx, m.conn, m.channel) == nil {
			m.waiter = w
		}
	}
	// A member that joined, or declared that it holds less than before, tells the others at once:
	// a newcomer needs them to make room, and the room one made is theirs to take. A grant that
	// the member could not use all of (fit) and declares back is no such change: notifying it
	// would wake the others into refreshes that wake them again.
	if joinedNow || !m.declared.Within(req.Have) {
		Notify(ctx, m.conn, m.channel, m.id) // lost, it costs the wait for the others' next refresh
	}
	m.declared = req.Have
	n, rank, totals := v.rank(m.cfg.Totals)
	if grown := m.have.GrowToward(me.declared); !grown.Equal(m.have) {
		m.target.GrowTo(grown)
		m.changed(grown, n, "granted")
	}
	target := TargetShare(totals, n, rank)
	m.lastTarget = target
	m.setMembers(n)
	if !m.have.Within(target) {
		s := m.have.meet(target)
		sctx, scancel := context.WithTimeout(context.Background(), m.cfg.Refresh)
		err := m.shrinkTo(sctx, s)
		scancel()
		if err != nil {
			// Still above s: keep declaring what is held, refresh, and wait again.
			return m.cfg.Refresh
		}
		m.changed(s, n, "shrunk")
		return 0 // declare the smaller share at once, so that the others can grow into it
	}
	if m.have.Conns == 0 && target.Conns == 0 {
		// No seat for us (more members than connections): hold no connection meanwhile.
		m.dropConn()
		return m.cfg.Refresh
	}
	if !target.Within(m.have) {
		if !target.Within(req.Want) {
			return 0 // the fleet changed since the refresh was sent: ask for the new fair share now
		}
		// Asked, and not granted in full: the others have not made room yet. Each notifies when
		// it does; the shorter interval covers a notification that is lost.
		return m.cfg.Refresh / pendingRefreshDiv
	}
	return m.cfg.Refresh
}

// expectLapse looks in v, which a refresh received at got, for leases of others that only their
// TTL keeps counted, and prepares the refresh at the earliest one's expiry: when to send it, and
// what to ask for in the fleet without those leases, so that the refresh that finds them expired
// also takes the room they free. Nothing when v does not count the member.
func (m *Member) expectLapse(v *View, got time.Time) {
	m.lapseAt, m.afterLive = time.Time{}, nil
	if !v.mine {
		return
	}
	first, ok := time.Duration(0), false
	for _, r := range v.rows {
		if r.lapses() && (!ok || r.left < first) {
			first, ok = r.left, true
		}
	}
	if !ok {
		return
	}
	// The database read its clock before it answered: its lease expires at got+first or sooner.
	m.lapseAt = got.Add(first + lapseMargin)
	after := v.without(func(r *fleetRow) bool { return r.lapses() && r.left <= first })
	n, rank, totals := after.rank(m.cfg.Totals)
	m.afterTarget = TargetShare(totals, n, rank)
	m.afterLive = after.others()
}

// want is what the member asks for: its fair share from the last refresh where that is more
// than it holds, what it holds elsewhere. Nothing more while coordination fails (the loop does
// not get here then).
func (m *Member) want() Share {
	if !m.joined {
		// A newcomer has not seen the others yet: it asks for everything, of which the database
		// grants only what their declarations leave free (all of it to the first instance), and
		// the next refresh, with the view, brings it to its fair share.
		return m.have.Join(TargetShare(m.cfg.Totals, 1, 0))
	}
	return m.have.Join(m.lastTarget)
}

// connect dials the lease connection. The server ends a statement on it that runs too long (a
// refresh that waits behind a migration's lock on the table, on a slow server) before the
// member's deadline would: interrupted by that deadline, the statement would cost the connection
// and the lock that counts the member; ended by the server, it leaves both, and the member proves
// the lock instead (failed).
// A member holding a share dials within statementTimeout, as its statements run: it must not
// wait past its fence. One that holds nothing (a newcomer, or a member fenced or without a seat)
// waits up to a TTL: on a loaded server a backend can take longer to start than a refresh may
// take, and a dial abandoned for another only starts another backend, as slow to start. Closing
// the member ends the wait.
func (m *Member) connect() error {
	timeout := m.statementTimeout()
	if !m.holding() {
		timeout = max(timeout, m.cfg.TTL)
	}
	ctx, cancel := context.WithTimeout(m.halt, timeout)
	defer cancel()
	c, err := m.dial(ctx)
	if err != nil {
		return err
	}
	if err := c.Exec(ctx, fmt.Sprintf("SET statement_timeout = %d", (m.queryTimeout()/2).Milliseconds())); err != nil {
		c.Close()
		return err
	}
	m.conn = c
	return nil
}

// holding reports whether the member has joined and holds a share, which the others count only
// until valid.
func (m *Member) holding() bool {
	return m.joined && !m.have.Equal(ZeroShare(len(m.have.Concurrent)))
}

// statementTimeout bounds a statement on the lease connection: queryTimeout, and for a member
// holding a share the time until it must fence, so that a statement that hangs does not hold the
// loop past that moment.
func (m *Member) statementTimeout() time.Duration {
	timeout := m.queryTimeout()
	if m.holding() {
		timeout = min(timeout, max(time.Until(m.valid()), time.Millisecond))
	}
	return timeout
}

// answered reports whether err, of a statement on the lease connection under ctx, is the
// server's answer on a connection that stays usable: an error with a SQLSTATE other than a lost
// connection's, and no cancel of ours. A statement that ctx interrupted costs the connection (the
// call cuts it), and one canceled so (57014 while ctx has ended) may have left it wedged; the
// server's own statement_timeout (57014 while ctx runs) ends the statement and nothing else.
func (m *Member) answered(ctx context.Context, err error) bool {
	return !m.conn.AnswerLost(err) && (m.conn.SQLState(err) != "57014" || ctx.Err() == nil)
}

// queryTimeout bounds one refresh: QueryTimeout of the member's TTL.
func (m *Member) queryTimeout() time.Duration { return QueryTimeout(m.cfg.TTL) }

// QueryTimeout bounds one refresh of a member whose lease lasts ttl: a third of it, so that a
// hung query leaves time for another attempt before the member fences.
func QueryTimeout(ttl time.Duration) time.Duration { return max(ttl/3, 100*time.Millisecond) }

// retryWait is the wait after a failed turn.
func (m *Member) retryWait() time.Duration { return max(m.cfg.Refresh/2, 10*time.Millisecond) }

// valid returns until when the member is certainly counted by the others: by its row's lease, or
// by the lock its lease connection was last seen to hold.
func (m *Member) valid() time.Time {
	if m.lockedUntil.After(m.validUntil) {
		return m.lockedUntil
	}
	return m.validUntil
}

// mustFence reports whether the member holds a share that the others may no longer count.
func (m *Member) mustFence() bool {
	return m.holding() && time.Now().After(m.valid())
}

// failed records a failed turn and returns the wait before the next. The share is kept. The
// lease connection is kept where the server answered with an error and the connection still
// holds the member's lock (proveLock): that lock keeps the member counted whatever became of its
// row, so a member whose table or function was dropped, or whose privileges were revoked, keeps
// serving from its share. Otherwise the connection is dropped (a new one is dialed next time),
// and with it any lock a failed join may have left on it; the member then fences once its
// lease may have expired, at once when its row is known gone.
func (m *Member) failed(what string, err error, answered bool) time.Duration {
	// Only a connection that answered is asked (answered): asking one that may be wedged
	// would take the time left before fencing.
	keep, lock := false, "not asked"
	if m.conn != nil && m.joined && answered {
		var lockErr error
		keep, lockErr = m.proveLock()
		switch {
		case lockErr != nil:
			lock = "the question failed: " + lockErr.Error()
		case keep:
			lock = "held"
		default:
			lock = "not held"
		}
	}
	if !keep {
		m.dropConn()
	}
	m.mu.Lock()
	m.status.RefreshErrors++
	m.mu.Unlock()
	// One line per streak of failures of one kind, not one per refresh: what failed, and whether
	// the lease connection was kept (a failure that costs it comes before a fence and says why).
	// A schema this role may not create is said once by setSchemaMissing, whatever failed before.
	if kind := fmt.Sprint(what, keep); kind != m.lastErr && m.log != nil && !m.schemaMissing() {
		m.lastErr = kind
		m.log.Warn("gated: fleet: coordination failed; keeping the share, not growing",
			"gate_name", m.cfg.Name, "while", what, "err", err, "share", m.have.String(), "lock", lock)
	}
	if m.mustFence() {
		return 0
	}
	return m.retryWait()
}

// proveLock asks the lease connection whether it holds the member's session lock, and returns
// true when it does: the member is counted, by every version's refresh function while its row
// exists and by this version's even while it does not, for as long as the connection lives. It
// returns the error when the question failed (failed logs it: a member that fences after its
// table went says why its lock was not proven).
// That stands for the rest of the fence interval after the question was sent, as a refresh does:
// should the connection break meanwhile, the next turn finds it broken and drops it, which ends
// what the lock proved.
func (m *Member) proveLock() (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), m.statementTimeout())
	defer cancel()
	sent := time.Now()
	rows, err := m.conn.Query(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted
		AND l.objsubid = 2 AND l.classid = $1::int::oid AND l.objid = $2::int::oid AND l.pid = pg_backend_pid())`,
		int64(m.key), int64(m.id))
	if err != nil {
		return false, err
	}
	if len(rows) != 1 || len(rows[0]) != 1 {
		return false, fmt.Errorf("gated: fleet: %d rows in answer to whether the lease connection holds its lock, want 1", len(rows))
	}
	held, _ := rows[0][0].(bool)
	if held {
		m.lockedUntil = sent.Add(time.Duration(float64(m.cfg.TTL) * fenceAfter))
	}
	return held, nil
}

// dropConn closes the lease connection in the background: closing one that a network partition
// holds may wait for the driver's bounded cleanup.
func (m *Member) dropConn() {
	if m.conn == nil {
		return
	}
	c := m.conn
	m.conn, m.waiter, m.listening = nil, nil, false
	m.lockedUntil = time.Time{}
	if m.leasePID != 0 {
		m.prevPID, m.prevStart = m.leasePID, m.leaseStart
		m.leasePID = 0
	}
	m.bg.Go(c.Close)
}

// fence shrinks the instance to nothing, because the others may count its share as free.
func (m *Member) fence(why string) {
	m.dropConn()
	zero := ZeroShare(len(m.have.Concurrent))
	if m.log != nil {
		m.log.Warn("gated: fleet: fencing, refusing every operation until the instance has joined again",
			"gate_name", m.cfg.Name, "why", why, "share", m.have.String())
	}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), m.cfg.Refresh)
		err := m.shrinkTo(ctx, zero)
		cancel()
		if err == nil {
			break
		}
		select {
		case <-m.stop:
			return
		default:
		}
	}
	// Still a member: the next refresh that succeeds finds the row live (the others never stopped
	// counting it) and declares nothing, or finds it gone and joins again.
	m.changed(zero, 0, "fenced")
}

// leave ends the membership when the loop stops: the instance's pool is closed by then.
func (m *Member) leave() {
	defer m.bg.Wait()
	if m.Crashed.Load() {
		if m.conn != nil {
			m.conn.Close()
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.TTL)
	defer cancel()
	if m.conn != nil && m.joined && m.shrinkTo(ctx, ZeroShare(len(m.have.Concurrent))) == nil {
		if err := leaveFleet(ctx, m.conn, m.cfg.Table, m.cfg.Name, m.key, m.id); err != nil {
			if m.log != nil {
				m.log.Warn("gated: fleet: leaving; the share comes back when the lease expires", "gate_name", m.cfg.Name, "err", err)
			}
		} else {
			Notify(ctx, m.conn, m.channel, m.id) // the others take the share at once
		}
	}
	if m.conn != nil {
		m.conn.Close()
		m.conn = nil
	}
}

// shrinkTo lowers the instance to s (see Target). The gates' B fall at once, before the
// running work has ended: a share without a permit is no seat from that moment, so Stats says so
// before the shrink begins, not once it has ended (changed).
func (m *Member) shrinkTo(ctx context.Context, s Share) error {
	if !s.seated() {
		m.mu.Lock()
		m.status.Seated = false
		m.mu.Unlock()
	}
	return m.target.ShrinkTo(ctx, s)
}

// changed records that the instance now holds s, and logs it.
func (m *Member) changed(s Share, members int, how string) {
	m.have = s
	m.mu.Lock()
	m.status.Conns = s.Conns
	m.status.Seated = s.seated()
	m.status.ShareChanges++
	m.mu.Unlock()
	if m.log != nil {
		m.log.Info("gated: fleet: share changed", "gate_name", m.cfg.Name, "how", how,
			"members", members, "conns", s.Conns, "concurrent", s.Concurrent, "queue", s.Queue)
	}
}

// setSchemaMissing records whether the table or a function is missing and the role may not
// create it.
func (m *Member) setSchemaMissing(missing bool, err error) {
	m.mu.Lock()
	was := m.status.SchemaMissing
	m.status.SchemaMissing = missing
	m.mu.Unlock()
	if missing && !was && m.log != nil {
		m.log.Warn("gated: fleet: coordination failed; the fleet's table or functions are missing and this role may not create them",
			"gate_name", m.cfg.Name, "table", m.cfg.Table, "err", err, "share", m.have.String())
	}
}

func (m *Member) schemaMissing() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.status.SchemaMissing
}

func (m *Member) setMembers(n int) {
	m.mu.Lock()
	m.status.Members = n
	m.mu.Unlock()
}

// Stats returns what the member reports of its place in the fleet.
func (m *Member) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.status
}

// Totals returns the totals the member was configured with; the caller does not modify them.
func (m *Member) Totals() Share { return m.cfg.Totals }

// Info is what a member writes into the fleet table about itself (Config.Info): this host and
// process.
func Info() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s pid %d", host, os.Getpid())
}
