package faultproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gatedsql/gated/internal/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const waitFor = 10 * time.Second // bound on polling for a condition that must come

var seq atomic.Int64

// unique returns a name no other test of this process or of a concurrent run uses.
func unique(prefix string) string {
	return fmt.Sprintf("%s_%d_%d_%d", prefix, os.Getpid(), time.Now().UnixNano(), seq.Add(1))
}

// poll fails t unless cond becomes true within waitFor.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(waitFor); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("still not %s after %v", what, waitFor)
		}
	}
}

func waitFired(t *testing.T, fired <-chan struct{}) {
	t.Helper()
	select {
	case <-fired:
	case <-time.After(waitFor):
		t.Fatalf("rule did not fire within %v", waitFor)
	}
}

func connect(t *testing.T, cfg *pgx.ConnConfig) *pgx.Conn {
	t.Helper()
	c, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// pg is a PostgreSQL server seen directly and through a proxy.
type pg struct {
	p      *Proxy
	cfg    *pgx.ConnConfig // through the proxy, with a unique application_name
	direct *pgx.Conn
}

func startPG(t *testing.T) *pg {
	url := pgtest.URL(t)
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	directCfg := cfg.Copy()
	p := Start(t, net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	cfg.Host, cfg.Port, cfg.Fallbacks = p.Host(), uint16(p.Port()), nil
	cfg.RuntimeParams["application_name"] = unique("fp")
	return &pg{p: p, cfg: cfg, direct: connect(t, directCfg)}
}

// table makes a table with one int column. Its name never contains "commit".
func (s *pg) table(t *testing.T) string {
	name := unique("faultproxy")
	ctx := context.Background()
	if _, err := s.direct.Exec(ctx, "CREATE TABLE "+name+" (n int)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.direct.Exec(context.Background(), "DROP TABLE IF EXISTS "+name) })
	return name
}

func (s *pg) count(t *testing.T, table string) int {
	t.Helper()
	var n int
	if err := s.direct.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitBackendsGone waits until the server has ended every session that came through the proxy:
// only then is a transaction cut short certainly committed or rolled back.
func (s *pg) waitBackendsGone(t *testing.T) {
	t.Helper()
	poll(t, "gone from pg_stat_activity", func() bool {
		var n int
		err := s.direct.QueryRow(context.Background(),
			"SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
			s.cfg.RuntimeParams["application_name"]).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
}

func TestForwardsQueriesAndCountsConns(t *testing.T) {
	s := startPG(t)
	c := connect(t, s.cfg)
	want := strings.Repeat("0123456789", 20000) // 200 kB: many reads each way
	var got string
	if err := c.QueryRow(context.Background(), "SELECT $1::text", want).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("got %d bytes back, want the %d sent", len(got), len(want))
	}
	if n := s.p.Conns(); n != 1 {
		t.Fatalf("Conns() = %d with one connection open, want 1", n)
	}
	c.Close(context.Background())
	poll(t, "Conns() == 0 after the client closed", func() bool { return s.p.Conns() == 0 })
	s.waitBackendsGone(t)
}

func TestCutAfterResponseLosesTheAnswerOfACommitThatHappened(t *testing.T) {
	s := startPG(t)
	table := s.table(t)
	c := connect(t, s.cfg)
	ctx := context.Background()
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+table+" VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	fired := s.p.Arm(Rule{Match: []byte("COMMIT"), Fold: true, When: AfterResponse, How: RST})
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("Commit succeeded although the proxy swallowed the answer and reset the connection")
	}
	waitFired(t, fired)
	// Polled: pgx closes a broken connection with a cancel request, on a new connection.
	poll(t, "Conns() == 0 after the cut", func() bool { return s.p.Conns() == 0 })
	s.waitBackendsGone(t)
	if n := s.count(t, table); n != 1 {
		t.Fatalf("%d rows after a commit the server answered, want 1", n)
	}
}

func TestCutBeforeRequestKeepsCommitFromTheServer(t *testing.T) {
	s := startPG(t)
	table := s.table(t)
	c := connect(t, s.cfg)
	ctx := context.Background()
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+table+" VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	fired := s.p.Arm(Rule{Match: []byte("commit"), Fold: true, When: BeforeRequest, How: RST})
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("Commit succeeded although the proxy reset the connection instead of forwarding it")
	}
	waitFired(t, fired)
	s.waitBackendsGone(t)
	if n := s.count(t, table); n != 0 {
		t.Fatalf("%d rows after a COMMIT that was never forwarded, want 0", n)
	}
}

func TestBlackholeTimesOutUntilLifted(t *testing.T) {
	s := startPG(t)
	c := connect(t, s.cfg)
	s.p.Blackhole(true)

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err := c.Exec(ctx, "SELECT 1")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) && !pgconn.Timeout(err) {
		t.Fatalf("query through a blackhole: %v, want a timeout", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err = pgx.ConnectConfig(ctx, s.cfg)
	cancel()
	if err == nil {
		t.Fatal("connected through a blackhole")
	}

	s.p.Blackhole(false)
	var one int
	if err := connect(t, s.cfg).QueryRow(context.Background(), "SELECT 1").Scan(&one); err != nil {
		t.Fatalf("query after the blackhole was lifted: %v", err)
	}
}

func TestCutAllFINBreaksAnIdleConnection(t *testing.T) {
	s := startPG(t)
	c := connect(t, s.cfg)
	ctx := context.Background()
	if _, err := c.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	s.p.CutAll(FIN)
	if n := s.p.Conns(); n != 0 {
		t.Fatalf("Conns() = %d after CutAll, want 0", n)
	}
	if _, err := c.Exec(ctx, "SELECT 1"); err == nil {
		t.Fatal("query on a cut connection succeeded")
	}
	s.waitBackendsGone(t)
}

// startEcho starts a server that echoes one connection; received returns what it read, once that
// connection has ended.
func startEcho(t *testing.T) (addr string, received func() []byte) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(io.MultiWriter(&got, c), c) // MultiWriter records before it echoes
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String(), func() []byte { <-done; return got.Bytes() }
}

func TestRuleMatchesAcrossReads(t *testing.T) {
	for _, tc := range []struct {
		when      When
		how       How
		serverGot string
		clientErr error // what reading the client side ends with
	}{
		{BeforeRequest, RST, "xxcom", syscall.ECONNRESET},
		{AfterRequest, FIN, "xxcomMIT yy", io.EOF},
		{AfterResponse, RST, "xxcomMIT yy", syscall.ECONNRESET},
	} {
		t.Run(tc.when.String()+"/"+tc.how.String(), func(t *testing.T) {
			echo, received := startEcho(t)
			p := Start(t, echo)
			c, err := net.Dial("tcp", p.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			fired := p.Arm(Rule{Match: []byte("CoMmIt"), Fold: true, When: tc.when, How: tc.how})
			// Reading the echo proves the proxy has read and forwarded the first part on its own.
			if _, err := c.Write([]byte("xxcom")); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(c, make([]byte, 5)); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Write([]byte("MIT yy")); err != nil {
				t.Fatal(err)
			}
			waitFired(t, fired)
			rest, err := io.ReadAll(c)
			if !errors.Is(err, tc.clientErr) && !(tc.clientErr == io.EOF && err == nil) {
				t.Errorf("client read ended with %v, want %v", err, tc.clientErr)
			}
			if len(rest) > 0 {
				t.Errorf("client read %q after the rule fired, want nothing", rest)
			}
			if got := received(); string(got) != tc.serverGot {
				t.Errorf("server received %q, want %q", got, tc.serverGot)
			}
			if n := p.Conns(); n != 0 {
				t.Errorf("Conns() = %d after the cut, want 0", n)
			}
		})
	}
}

func TestBlackholeRuleHoldsTheConnectionUntilClose(t *testing.T) {
	echo, received := startEcho(t)
	p := Start(t, echo)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fired := p.Arm(Rule{Match: []byte("ping"), When: AfterResponse, How: Blackhole})
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	waitFired(t, fired)
	if n := p.Conns(); n != 1 {
		t.Fatalf("Conns() = %d with a blackholed connection, want 1", n)
	}
	if _, err := c.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	// The proxy reads "pong" and holds it: Close must wake the held pump, or it never returns.
	poll(t, "a pump held", func() bool { p.mu.Lock(); defer p.mu.Unlock(); return p.held == 1 })
	p.Close()
	if got := received(); string(got) != "ping" {
		t.Errorf("server received %q through a blackhole armed on \"ping\", want \"ping\"", got)
	}
	// Close ends with FIN, or RST when bytes were still unread in the proxy's socket.
	rest, err := io.ReadAll(c)
	if err != nil && !errors.Is(err, syscall.ECONNRESET) || len(rest) > 0 {
		t.Errorf("client read %q, %v through a blackhole, want nothing, then EOF or a reset", rest, err)
	}
}

func TestSlowDialsDelaysOnlyConnectionsAcceptedAfterIt(t *testing.T) {
	s := startPG(t)
	before := connect(t, s.cfg)
	const d = 300 * time.Millisecond
	s.p.SlowDials(d)
	start := time.Now()
	after := connect(t, s.cfg)
	if took := time.Since(start); took < d {
		t.Errorf("a connection accepted after SlowDials(%v) was set up in %v", d, took)
	}
	for name, c := range map[string]*pgx.Conn{"before": before, "after": after} {
		var one int
		if err := c.QueryRow(context.Background(), "SELECT 1").Scan(&one); err != nil || one != 1 {
			t.Errorf("the connection made %s SlowDials: %d, %v", name, one, err)
		}
	}
	// Close does not wait out a slow dial: the connection waiting for it is cut at once.
	s.p.SlowDials(time.Hour)
	go pgx.ConnectConfig(context.Background(), s.cfg) // ends with the proxy
	poll(t, "the third connection accepted", func() bool { return s.p.Conns() == 3 })
	s.p.Close()
}
