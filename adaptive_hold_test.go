package gated

import (
	"context"
	"database/sql"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatedsql/gated/internal/pgtest"
	"github.com/gatedsql/gated/internal/sockconn"
	"github.com/gatedsql/gated/internal/testwait"
)

// The hold time gate_concurrent=auto learns from leaves out the client's wait after the database's
// last answer arrived (binding.serviceHold), and never more: these tests hold the subtraction to
// its bounds before the storm test relies on it.

// recvAgeKnown reports whether this platform tells a TCP socket's receive age (internal/sockconn/sockage_linux.go).
func recvAgeKnown() bool { return runtime.GOOS == "linux" && runtime.GOARCH != "386" }

func TestAutoHoldClientWaitIsClamped(t *testing.T) {
	const ms = time.Millisecond
	step := 4 * ms
	for _, c := range []struct {
		name            string
		hold, age, want time.Duration
	}{
		{"unknown age", 50 * ms, 0, 0},
		{"age within a step", 50 * ms, 4 * ms, 0},
		{"age of a few steps: less one step", 50 * ms, 12 * ms, 8 * ms},
		{"age of nearly the whole hold", 50 * ms, 48 * ms, 44 * ms},
		{"age equal to the hold: the sample keeps a step", 50 * ms, 50 * ms, 46 * ms},
		{"last data before the operation began: clamped to the hold", 50 * ms, 5 * time.Second, 46 * ms},
		{"a hold within a step keeps all of it", 3 * ms, 40 * ms, 0},
		{"a hold of one step keeps all of it", 4 * ms, 40 * ms, 0},
	} {
		got := clientWait(c.hold, c.age, step)
		if got != c.want {
			t.Errorf("%s: clientWait(hold %v, age %v, step %v) = %v, want %v", c.name, c.hold, c.age, step, got, c.want)
		}
		if s := c.hold - got; s < 0 || (c.hold > step && s < step) {
			t.Errorf("%s: sample %v out of bounds", c.name, s)
		}
	}
}

func TestAutoHoldRecvAgeStepIsTheShortestAgeSeen(t *testing.T) {
	saved := recvAgeStepSeen.Load()
	defer recvAgeStepSeen.Store(saved)
	recvAgeStepSeen.Store(0)
	const ms = time.Millisecond
	for _, c := range []struct{ age, want time.Duration }{
		{0, maxRecvAgeStep},       // nothing seen: the coarsest tick
		{40 * ms, maxRecvAgeStep}, // longer than the coarsest tick: says nothing
		{8 * ms, 8 * ms},          // two jiffies at HZ=250: at least one
		{0, 8 * ms},               // an age of 0 says nothing
		{12 * ms, 8 * ms},         // a longer one does not raise it
		{4 * ms, 4 * ms},          // one jiffy at HZ=250
		{100 * ms, 4 * ms},        //
	} {
		if got := recvAgeStep(c.age); got != c.want {
			t.Errorf("recvAgeStep(%v) = %v, want %v", c.age, got, c.want)
		}
	}
}

// unixSocketBase returns the test server's URL over its unix-domain socket, or "" with why not.
func unixSocketBase(t *testing.T, adm *sql.DB) (string, string) {
	u, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	if h := u.Hostname(); h != "127.0.0.1" && h != "localhost" && h != "::1" {
		return "", "the test server is not on this machine (" + h + ")"
	}
	port := u.Port()
	if port == "" {
		port = "5432"
	}
	var dirs string
	if err := adm.QueryRow("SHOW unix_socket_directories").Scan(&dirs); err != nil {
		return "", "SHOW unix_socket_directories: " + err.Error()
	}
	for _, d := range strings.Split(dirs, ",") {
		d = strings.TrimSpace(d)
		if d == "" || strings.HasPrefix(d, "@") {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, ".s.PGSQL."+port)); err != nil {
			continue
		}
		q := u.Query()
		q.Set("host", d)
		q.Set("port", port)
		u.Host = ""
		u.RawQuery = q.Encode()
		return u.String(), ""
	}
	return "", "no socket of the server's in " + dirs
}

// sampleOf returns what the binding of cn (a *sql.Conn of an auto gate, bound) would hand the
// limiter if it ended now: its raw hold, from the connection being ready, and the sample.
func sampleOf(t *testing.T, cn *sql.Conn) (raw, hold time.Duration) {
	t.Helper()
	err := cn.Raw(func(dc any) error {
		b := &dc.(*conn).binding
		if b.g == nil || b.g.lim == nil || b.pc == nil {
			t.Fatal("not a bound connection of an auto gate")
		}
		now, h := b.serviceHold()
		raw, hold = now-b.readyAt, h
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return raw, hold
}

// ageOf returns how long ago data last arrived on cn's physical connection (0: unknown).
func ageOf(t *testing.T, cn *sql.Conn) (age time.Duration) {
	t.Helper()
	if err := cn.Raw(func(dc any) error {
		age = dc.(*conn).binding.pc.answerAge()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return age
}

// The sample leaves out the time the client sat on the database's answer (sleeping after a
// statement, or between two rows of a result), and nothing of the time the server itself took:
// after a slow statement (pg_sleep) the sample is at least the statement's time. A notification
// that arrives while the client waits shortens what is left out (data arrived), never lengthens
// it. Over TCP, TLS and, where the machine has it, the server's unix-domain socket, which cannot
// tell the age: there the sample is the whole hold.
func TestAutoHoldLeavesOutTheClientsWaitAfterTheAnswer(t *testing.T) {
	const wait = 80 * time.Millisecond
	// Least taken off after the client sat on the answer for wait: the kernel's age may fall
	// short of the true one by a step, and one more step is left in.
	const leastOff = wait - 2*maxRecvAgeStep
	adm := admin(t)
	unixBase, noUnix := unixSocketBase(t, adm)
	for _, tr := range []struct{ name, base, params string }{
		{"tcp", "", ""},
		{"tls", "", "&sslmode=require"},
		{"unix", unixBase, ""},
	} {
		t.Run(tr.name, func(t *testing.T) {
			if tr.name == "unix" && tr.base == "" {
				t.Skip("no unix-domain socket: " + noUnix)
			}
			knows := recvAgeKnown() && tr.name != "unix"
			base := tr.base
			if base == "" {
				base = pgtest.URL(t)
			}
			forEachDriver(t, func(t *testing.T, drv string) {
				db, c, app := openPGAt(t, base, drv, "gate_max_conns=1&gate_concurrent=auto"+tr.params)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				// checkOff checks what the sample took off the hold: at least least (0: nothing
				// required) and at most most; exactly nothing where the age is unknown.
				checkOff := func(what string, raw, hold, least, most time.Duration) {
					t.Helper()
					off := raw - hold
					t.Logf("%s: hold %v, sample %v (%v off)", what, raw, hold, off)
					if hold <= 0 || off < 0 {
						t.Errorf("%s: sample %v of a hold of %v", what, hold, raw)
					}
					if !knows {
						if off != 0 {
							t.Errorf("%s: %v taken off where the age is unknown", what, off)
						}
						return
					}
					if off < least || off > most {
						t.Errorf("%s: %v taken off, want within [%v, %v]", what, off, least, most)
					}
				}
				use := func(f func(cn *sql.Conn)) {
					cn, err := db.Conn(ctx)
					if err != nil {
						t.Fatal(err)
					}
					defer cn.Close()
					f(cn)
				}

				use(func(cn *sql.Conn) {
					if tr.name == "tls" {
						var ssl bool
						if err := cn.QueryRowContext(ctx, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl); err != nil || !ssl {
							t.Fatalf("sslmode=require: the connection is not over TLS (%v, %v)", ssl, err)
						}
					}
					sent := monoNow()
					if _, err := cn.ExecContext(ctx, "SELECT 1"); err != nil {
						t.Fatal(err)
					}
					time.Sleep(wait)
					raw, hold := sampleOf(t, cn)
					// Never more than the time since the statement went out: the answer came later.
					checkOff("a statement, then the client sleeps", raw, hold, leastOff, monoNow()-sent)
				})
				use(func(cn *sql.Conn) {
					rows, err := cn.QueryContext(ctx, "SELECT generate_series(1, 3)")
					if err != nil {
						t.Fatal(err)
					}
					rows.Next()
					time.Sleep(wait) // the application works on the first row
					for rows.Next() {
					}
					if err := rows.Close(); err != nil {
						t.Fatal(err)
					}
					raw, hold := sampleOf(t, cn)
					checkOff("a slowly scanned result", raw, hold, leastOff, raw)
				})
				use(func(cn *sql.Conn) {
					start := monoNow()
					if _, err := cn.ExecContext(ctx, "SELECT pg_sleep(0.08)"); err != nil {
						t.Fatal(err)
					}
					raw, hold := sampleOf(t, cn)
					// The answer came at least 80 ms after start, when the server had slept: no
					// more than the time since then may be taken off, and the sample keeps the 80.
					checkOff("a slow statement", raw, hold, 0, monoNow()-start-80*time.Millisecond)
					if hold < 80*time.Millisecond {
						t.Errorf("a slow statement: sample %v, shorter than the server's 80 ms", hold)
					}
				})
				use(func(cn *sql.Conn) {
					channel := "gated_hold_" + strings.ReplaceAll(app, "-", "_")
					if _, err := cn.ExecContext(ctx, "LISTEN "+channel); err != nil {
						t.Fatal(err)
					}
					time.Sleep(wait)
					notified := monoNow()
					if _, err := adm.ExecContext(ctx, "NOTIFY "+channel); err != nil {
						t.Fatal(err)
					}
					if knows {
						// Until the notification has reached the socket: the listening backend sends
						// it when it gets to it, later than NOTIFY's answer on a loaded server.
						testwait.For(t, "the notification on the socket", func() bool {
							age := ageOf(t, cn)
							return age > 0 && age <= monoNow()-notified+recvAgeStep(0)
						})
					} else {
						time.Sleep(wait / 4)
					}
					raw, hold := sampleOf(t, cn)
					// The notification arrived after notified: at most the time since then is
					// the client's, whatever came before.
					checkOff("a notification while the client waits", raw, hold, 0, monoNow()-notified)
					if _, err := cn.ExecContext(ctx, "UNLISTEN "+channel); err != nil {
						t.Fatal(err)
					}
				})
				checkQuiet(t, db, c, 0)
			})
		})
	}
}

// BenchmarkAutoReleaseSocketAge measures what binding.serviceHold adds to each release of an auto
// gate: the socket's age, one getsockopt system call over TCP.
func BenchmarkAutoReleaseSocketAge(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	s := sockconn.New(c, 0)
	defer s.Close()
	server, err := ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	defer server.Close()
	server.Write([]byte("x"))
	b.ReportAllocs()
	for b.Loop() {
		s.SinceLastRecv()
	}
}

// A new connection's first operation is no sample of service time (it pays for the server's
// session start); the operations after it on the same connection are. A timeout on the first one
// still counts as overload.
func TestAutoFirstOperationOnANewConnectionIsNoSample(t *testing.T) {
	db, c, fd := openFake(t, "gate_max_conns=1 gate_concurrent=auto gate_queue=1")
	window := func() (ok, overload, failed int) {
		c.gate.mu.Lock()
		defer c.gate.mu.Unlock()
		return c.gate.lim.Window()
	}
	query := func() {
		t.Helper()
		rows, err := db.Query("SELECT 1")
		if err != nil {
			t.Fatalf("query: %v", err)
		}
		rows.Close()
	}
	query()
	if ok, over, failed := window(); ok != 0 || over != 0 || failed != 1 {
		t.Fatalf("after the first operation on a new connection the window holds %d ok, %d overload, %d unmeasured; want 0, 0, 1", ok, over, failed)
	}
	query()
	if ok, over, failed := window(); ok != 1 || over != 0 || failed != 1 {
		t.Fatalf("after a second operation on the same connection the window holds %d ok, %d overload, %d unmeasured; want 1, 0, 1", ok, over, failed)
	}
	if n := fd.Stats().Opened; n != 1 {
		t.Fatalf("the fake opened %d connections, want 1: the second operation must have reused the first's", n)
	}

	// A first operation that a deadline ended while it ran is overload all the same.
	db2, c2, fd2 := openFake(t, "gate_max_conns=1 gate_concurrent=auto gate_queue=1")
	ctx := newDeadlineAt()
	errc := make(chan error, 1)
	go func() {
		_, err := db2.ExecContext(ctx, "BLOCK never")
		errc <- err
	}()
	if err := fd2.WaitBlocked(context.Background(), "never", 1); err != nil {
		t.Fatal(err)
	}
	ctx.pass()
	if err := <-errc; err == nil {
		t.Fatal("BLOCK succeeded although its deadline passed")
	}
	window2 := func() (ok, overload, failed int) {
		c2.gate.mu.Lock()
		defer c2.gate.mu.Unlock()
		return c2.gate.lim.Window()
	}
	// A connection the deadline broke is destroyed in the background, and its sample follows.
	testwait.For(t, "the deadline's sample", func() bool { ok, over, failed := window2(); return ok+over+failed > 0 })
	ok, over, failed := window2()
	if ok != 0 || over != 1 || failed != 0 {
		t.Fatalf("after a first operation that its deadline ended the window holds %d ok, %d overload, %d unmeasured; want 0, 1, 0", ok, over, failed)
	}
}

// deadlineAt is a context whose deadline passes when the test calls pass: at a moment it chooses,
// such as once an operation is known to run.
type deadlineAt struct {
	context.Context // Background's values and no deadline known in advance
	done            chan struct{}
	once            sync.Once
}

func newDeadlineAt() *deadlineAt {
	return &deadlineAt{Context: context.Background(), done: make(chan struct{})}
}

func (d *deadlineAt) Done() <-chan struct{} { return d.done }

func (d *deadlineAt) Err() error {
	select {
	case <-d.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

func (d *deadlineAt) pass() { d.once.Do(func() { close(d.done) }) }
