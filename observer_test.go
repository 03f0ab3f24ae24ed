package gated

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gatedsql/gated/internal/fakedb"
)

// recorder is an Observer that counts events by kind and keeps the workloads and close reasons
// it saw.
type recorder struct {
	kinds   [EventConnClosed + 1]atomic.Int64
	reasons [numCloseReasons]atomic.Int64
	mu      sync.Mutex
	names   map[string]bool
	errs    []error
}

func (r *recorder) Observe(e Event) {
	r.kinds[e.Kind].Add(1)
	if e.Kind == EventConnClosed {
		r.reasons[e.Reason].Add(1)
	}
	if e.Workload != "" || e.Err != nil {
		r.mu.Lock()
		if r.names == nil {
			r.names = map[string]bool{}
		}
		if e.Workload != "" {
			r.names[e.Workload] = true
		}
		if e.Err != nil && e.Kind != EventStatement && e.Kind != EventConnect {
			r.errs = append(r.errs, e.Err)
		}
		r.mu.Unlock()
	}
}

func (r *recorder) n(k EventKind) int64 { return r.kinds[k].Load() }

// openObserved opens a gated DB on a new fake driver with obs and logger in its Config.
func openObserved(t testing.TB, params string, obs Observer, logger *slog.Logger, opts ...fakedb.Option) (*sql.DB, *Connector, *fakedb.Driver) {
	t.Helper()
	fd := fakedb.New(opts...)
	cfg, err := ParseDSN("gate_driver=" + fd.Register() + " " + params)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Observer, cfg.Logger = obs, logger
	c, err := NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := OpenDB(c)
	t.Cleanup(func() {
		db.Close()
		if s := fd.Stats(); s.Open != 0 {
			t.Errorf("after db.Close the fake has %d connections open", s.Open)
		}
	})
	return db, c, fd
}

// holdPermit runs `BLOCK name` in the background, so that it holds an execution permit until
// fd.Release(name); the returned channel yields its error.
func holdPermit(t *testing.T, db *sql.DB, fd *fakedb.Driver, name string) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := db.Exec("BLOCK " + name)
		done <- err
	}()
	if err := fd.WaitBlocked(context.Background(), name, 1); err != nil {
		t.Fatal(err)
	}
	return done
}

func TestObserverEventsMatchStats(t *testing.T) {
	rec := &recorder{}
	db, c, fd := openObserved(t, "gate_max_conns=1 gate_concurrent=1 gate_queue=1 gate_queue_wait=1m", rec, nil)
	for range 5 {
		if _, err := db.Exec("SELECT 1"); err != nil {
			t.Fatal(err)
		}
	}
	held := holdPermit(t, db, fd, "a")

	// A waiter whose context ends: canceled.
	ctx, cancel := context.WithCancel(context.Background())
	waiter := make(chan error, 1)
	go func() { _, err := db.ExecContext(ctx, "SELECT 1"); waiter <- err }()
	waitFor(t, "one waiter", func() bool { return c.Stats().Waiting == 1 })
	// With one running and one waiting, B+Q is used up: refused at once.
	if _, err := db.Exec("SELECT 1"); !errors.Is(err, ErrAdmissionFull) {
		t.Fatalf("got %v, want ErrAdmissionFull", err)
	}
	cancel()
	if err := <-waiter; !errors.Is(err, context.Canceled) {
		t.Fatalf("waiter: %v", err)
	}
	fd.Release("a")
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("FAIL boom"); err == nil {
		t.Fatal("FAIL succeeded")
	}
	waitIdle(t, c)

	// The same for a timeout, on a gate that never waits.
	db2, c2, fd2 := openObserved(t, "gate_max_conns=1 gate_concurrent=1 gate_queue=1 gate_queue_wait=0", rec, nil)
	held = holdPermit(t, db2, fd2, "b")
	if _, err := db2.Exec("SELECT 1"); !errors.Is(err, ErrAdmissionTimeout) {
		t.Fatalf("got %v, want ErrAdmissionTimeout", err)
	}
	fd2.Release("b")
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	waitIdle(t, c2)

	s, s2 := c.Stats(), c2.Stats()
	for _, tc := range []struct {
		kind EventKind
		want int64
	}{
		{EventAdmitted, s.Admitted + s2.Admitted},
		{EventRejectedFull, s.RejectedFull + s2.RejectedFull},
		{EventRejectedTimeout, s.RejectedTimeout + s2.RejectedTimeout},
		{EventCanceled, s.Canceled + s2.Canceled},
		{EventConnect, s.Admitted + s2.Admitted},
		{EventHold, s.Admitted + s2.Admitted},
		{EventConnOpened, s.Pool.Opened + s2.Pool.Opened},
	} {
		if got := rec.n(tc.kind); got != tc.want {
			t.Errorf("%v events = %d, want %d (from Stats)", tc.kind, got, tc.want)
		}
	}
	if s.Admitted != 7 || s.RejectedFull != 1 || s.Canceled != 1 || s2.RejectedTimeout != 1 {
		t.Errorf("stats = %+v / %+v", s, s2)
	}
	// Five SELECTs, BLOCK, FAIL, and on the second gate BLOCK: one driver call each.
	if got := rec.n(EventStatement); got != 8 {
		t.Errorf("statement events = %d, want 8", got)
	}
	if !rec.names[DefaultWorkload] || len(rec.names) != 1 {
		t.Errorf("workloads seen: %v", rec.names)
	}
}

func TestObserverAddsNoAllocationPerOperation(t *testing.T) {
	var n atomic.Int64
	count := ObserverFunc(func(Event) { n.Add(1) })
	allocs := func(obs Observer) float64 {
		db, _, _ := openObserved(t, "gate_max_conns=2", obs, nil)
		ctx := context.Background()
		var v int
		return testing.AllocsPerRun(500, func() {
			if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&v); err != nil {
				t.Fatal(err)
			}
		})
	}
	without, with := allocs(nil), allocs(count)
	if with != without {
		t.Errorf("QueryRowContext allocates %v times with an Observer, %v without", with, without)
	}
	if n.Load() == 0 {
		t.Error("the Observer saw nothing")
	}

	// The binding itself allocates nothing, observed or not.
	_, c, _ := openObserved(t, "gate_max_conns=1", count, nil)
	cn := &conn{c: c}
	ctx := context.Background()
	if a := testing.AllocsPerRun(1000, func() {
		if err := cn.run(ctx, true, func(pc *physConn) error { return nil }); err != nil {
			t.Fatal(err)
		}
		cn.unbind()
	}); a != 0 {
		t.Errorf("observed bind+run+unbind allocates %v times", a)
	}
}

// hangingConnector is an inner driver whose Connect blocks until its context ends.
type hangingConnector struct{ entered chan struct{} }

func (h *hangingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	h.entered <- struct{}{}
	<-ctx.Done()
	return nil, ctx.Err()
}
func (h *hangingConnector) Driver() driver.Driver                          { return h }
func (h *hangingConnector) Open(string) (driver.Conn, error)               { return nil, errors.New("unused") }
func (h *hangingConnector) OpenConnector(string) (driver.Connector, error) { return h, nil }

var hangingDriver = &hangingConnector{entered: make(chan struct{}, 1)}

func init() { sql.Register("gated-test-hanging", hangingDriver) }

func TestConnectCanceledCountedApartFromConnectErrors(t *testing.T) {
	t.Run("server refuses", func(t *testing.T) {
		rec := &recorder{}
		db, c, fd := openObserved(t, "gate_max_conns=1", rec, nil)
		fd.FailNextConnect(errors.New("connection refused"))
		if err := db.Ping(); err == nil {
			t.Fatal("Ping succeeded")
		}
		if s := c.Stats().Pool; s.ConnectErrors != 1 || s.ConnectCanceled != 0 {
			t.Errorf("pool stats = %+v", s)
		}
		if rec.n(EventConnectFailed) != 1 || rec.n(EventConnectCanceled) != 0 {
			t.Errorf("events: failed %d, canceled %d", rec.n(EventConnectFailed), rec.n(EventConnectCanceled))
		}
	})
	t.Run("caller gives up", func(t *testing.T) {
		rec := &recorder{}
		cfg := &Config{Driver: "gated-test-hanging", MaxConns: 1, Observer: rec}
		c, err := NewConnector(cfg)
		if err != nil {
			t.Fatal(err)
		}
		db := OpenDB(c)
		defer db.Close()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- db.PingContext(ctx) }()
		<-hangingDriver.entered
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want context.Canceled", err)
		}
		if s := c.Stats().Pool; s.ConnectErrors != 0 || s.ConnectCanceled != 1 {
			t.Errorf("pool stats = %+v", s)
		}
		if rec.n(EventConnectFailed) != 0 || rec.n(EventConnectCanceled) != 1 {
			t.Errorf("events: failed %d, canceled %d", rec.n(EventConnectFailed), rec.n(EventConnectCanceled))
		}
	})
}

func TestConnectionsClosedAreCountedByReason(t *testing.T) {
	rec := &recorder{}
	db, c, fd := openObserved(t, "gate_max_conns=2 gate_concurrent=2", rec, nil)
	ctx := context.Background()

	// Broken: a pinned connection with session state whose connection dies.
	pinned, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pinned.ExecContext(ctx, "SET x"); err != nil {
		t.Fatal(err)
	}
	pinned.ExecContext(ctx, "BADCONN")
	pinned.Close()
	waitFor(t, "broken connection closed", func() bool { return c.Stats().Pool.ClosedBroken == 1 })

	// Dead while idle: found so by the reset before reuse.
	if err := db.Ping(); err != nil {
		t.Fatal(err)
	}
	fd.BreakAll()
	if err := db.Ping(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "dead idle connection closed", func() bool { return c.Stats().Pool.ClosedDeadIdle == 1 })
	waitIdle(t, c)

	db.Close()
	s := c.Stats().Pool
	if s.ClosedByClose != 1 || s.ClosedLifetime != 0 || s.ClosedIdleTime != 0 {
		t.Errorf("pool stats = %+v", s)
	}
	if sum := s.ClosedBroken + s.ClosedLifetime + s.ClosedIdleTime + s.ClosedDeadIdle + s.ClosedByClose + s.ClosedCanceled; sum != s.Closed {
		t.Errorf("Closed* add up to %d, Closed = %d", sum, s.Closed)
	}
	for r := range CloseReason(numCloseReasons) {
		if got := rec.reasons[r].Load(); got != c.closedCount(r) {
			t.Errorf("%v: %d events, %d in Stats", r, got, c.closedCount(r))
		}
	}
}

func (c *Connector) closedCount(r CloseReason) int64 {
	c.pool.mu.Lock()
	defer c.pool.mu.Unlock()
	return c.pool.closedBy[r]
}

func TestExpiredConnectionsCountedByLimit(t *testing.T) {
	for _, tc := range []struct {
		params string
		field  func(PoolStats) int64
	}{
		{"gate_max_conn_lifetime=20ms gate_max_conn_idle_time=0", func(s PoolStats) int64 { return s.ClosedLifetime }},
		{"gate_max_conn_lifetime=0 gate_max_conn_idle_time=20ms", func(s PoolStats) int64 { return s.ClosedIdleTime }},
	} {
		t.Run(tc.params, func(t *testing.T) {
			db, c, _ := openFake(t, "gate_max_conns=1 "+tc.params)
			if err := db.Ping(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "expired connection closed", func() bool { return tc.field(c.Stats().Pool) == 1 })
			if s := c.Stats().Pool; s.Closed != 1 {
				t.Errorf("pool stats = %+v", s)
			}
		})
	}
}

// sqlStateError is a server error with a SQLSTATE, as pgconn.PgError and pq.Error are.
type sqlStateError string

func (e sqlStateError) Error() string    { return "server error " + string(e) }
func (e sqlStateError) SQLState() string { return string(e) }

func TestServerTimeoutsCountedBySQLState(t *testing.T) {
	rec := &recorder{}
	_, c, _ := openObserved(t, "gate_max_conns=1", rec, nil)
	live := context.Background()
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		ctx context.Context
		err error
	}{
		{live, sqlStateError("57014")},  // statement_timeout
		{nil, sqlStateError("57014")},   // during Commit
		{ended, sqlStateError("57014")}, // the caller's own cancel request: not a server timeout
		{live, sqlStateError("55P03")},  // lock_timeout
		{live, sqlStateError("23505")},  // unrelated
		{live, errors.New("no state")},
	} {
		c.obs.statement(c.gate, monoNow(), tc.ctx, tc.err)
	}
	s := c.Stats()
	if s.StatementTimeouts != 2 || s.LockTimeouts != 1 {
		t.Errorf("StatementTimeouts = %d, LockTimeouts = %d; want 2, 1", s.StatementTimeouts, s.LockTimeouts)
	}
	if rec.n(EventStatementTimeout) != 2 || rec.n(EventLockTimeout) != 1 || rec.n(EventStatement) != 6 {
		t.Errorf("events: %d statement timeouts, %d lock timeouts, %d statements",
			rec.n(EventStatementTimeout), rec.n(EventLockTimeout), rec.n(EventStatement))
	}
}

// logRecorder is a slog.Handler that keeps every record.
type logRecorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecorder) WithGroup(string) slog.Handler      { return h }

func (h *logRecorder) records(msg string) []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(h.recs), func(r slog.Record) bool { return r.Message != msg })
}

func attrOf(r slog.Record, key string) slog.Value {
	var v slog.Value
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value
			return false
		}
		return true
	})
	return v
}

func TestLoggerSummarizesRefusalsAtMostOncePerSecond(t *testing.T) {
	h := &logRecorder{}
	db, c, fd := openObserved(t, "gate_max_conns=1 gate_concurrent=1 gate_queue=0", nil, slog.New(h))
	held := holdPermit(t, db, fd, "r")
	const refused = 200
	for range refused {
		if _, err := db.Exec("SELECT 1"); !errors.Is(err, ErrAdmissionFull) {
			t.Fatalf("got %v, want ErrAdmissionFull", err)
		}
	}
	fd.Release("r")
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	db.Close() // writes the summary still pending

	recs := h.records("gated: operations refused")
	if len(recs) == 0 {
		t.Fatal("no refusal logged")
	}
	if n := attrOf(recs[0], "full").Int64(); n != 1 {
		t.Errorf("first line counts %d refusals, want the first one alone", n)
	}
	var total int64
	for i, r := range recs {
		total += attrOf(r, "full").Int64() + attrOf(r, "timeout").Int64()
		if w := attrOf(r, "workload").String(); w != DefaultWorkload {
			t.Errorf("workload = %q", w)
		}
		// The last line may be Close's flush, which does not wait for the interval.
		if i > 0 && i < len(recs)-1 && r.Time.Sub(recs[i-1].Time) < refusalLogInterval {
			t.Errorf("lines %d and %d only %v apart", i-1, i, r.Time.Sub(recs[i-1].Time))
		}
	}
	if total != refused || c.Stats().RejectedFull != refused {
		t.Errorf("log lines count %d refusals, Stats %d, want %d", total, c.Stats().RejectedFull, refused)
	}
	if len(recs) > 3 {
		t.Logf("%d lines for %d refusals", len(recs), refused)
	}
}

func TestLoggerReportsConnectFailuresAndUnknownCommits(t *testing.T) {
	h := &logRecorder{}
	db, c, fd := openObserved(t, "gate_max_conns=1 password=s3cret", nil, slog.New(h))
	fd.FailConnects(errors.New("refused, password s3cret"))
	for range 3 {
		if err := db.Ping(); err == nil {
			t.Fatal("Ping succeeded")
		}
	}
	fd.AllowConnects()
	c.obs.commitUnknown(c.gate, nil, errors.New("gated: commit outcome unknown: EOF"))
	db.Close()

	fails := h.records("gated: opening a physical connection failed")
	var n int64
	for _, r := range fails {
		n += attrOf(r, "failures").Int64()
		if r.Level != slog.LevelError {
			t.Errorf("level %v", r.Level)
		}
		if e := attrOf(r, "last_error").String(); e == "" || strings.Contains(e, "s3cret") {
			t.Errorf("last_error = %q", e)
		}
	}
	if n != 3 || len(fails) > 2 {
		t.Errorf("%d lines count %d failures, want 3 in at most 2", len(fails), n)
	}
	unknown := h.records("gated: commit outcome unknown: the connection was lost after COMMIT was sent")
	if len(unknown) != 1 || unknown[0].Level != slog.LevelError {
		t.Errorf("commit unknown lines: %v", unknown)
	}
	if c.Stats().CommitUnknown != 1 {
		t.Errorf("CommitUnknown = %d", c.Stats().CommitUnknown)
	}
}

func TestNoObserverNoLoggerCostsNoClockReading(t *testing.T) {
	var o observer
	if o.now() != 0 || o.acquired(nil, 0, nil, nil) != 0 {
		t.Error("an observer with nothing attached read the clock")
	}
}
