//go:build unix

package sockconn

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/gatedsql/gated/internal/testwait"
)

// tcpPair returns both ends of a loopback TCP connection, closed at cleanup.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	return sockPair(t, "tcp", "127.0.0.1:0")
}

func TestPeerGoneSeesAServerThatHungUp(t *testing.T) {
	client, server := tcpPair(t)
	s := newSockCheck(client)
	if s.peerGone() {
		t.Fatal("an idle, open connection reported gone")
	}
	if allocs := testing.AllocsPerRun(100, func() { s.peerGone() }); allocs != 0 {
		t.Errorf("peerGone allocates %v times", allocs)
	}
	server.Write([]byte("N"))
	testwait.For(t, "pending byte seen", func() bool { return s.peerGone() })
	buf := make([]byte, 1)
	if _, err := client.Read(buf); err != nil || buf[0] != 'N' {
		t.Fatalf("peerGone consumed the pending byte: %q, %v", buf, err)
	}
	server.Close()
	testwait.For(t, "hang-up seen", func() bool { return s.peerGone() })
}

// A driver's background reader (pgx has one) may sit in a read of an idle connection; the check
// must not wait for it, or a bind on that connection would hang with its permit.
func TestPeerGoneNeverWaitsForABlockedReader(t *testing.T) {
	client, server := tcpPair(t)
	s := newSockCheck(client)
	if s == nil {
		t.Skip("no socket check on this platform")
	}
	// A reader like pgx's background reader, parked in Read of the idle connection.
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		client.Read(make([]byte, 1))
	}()
	checked := make(chan bool, 1)
	go func() { checked <- s.peerGone() }()
	select {
	case gone := <-checked:
		if gone {
			t.Error("an open, quiet connection reported gone")
		}
	case <-time.After(5 * time.Second):
		t.Error("peerGone waits for the socket's reader: a bind on such a connection hangs with its permit")
		server.Write([]byte("x")) // releases the reader, and the stuck check with it
		<-checked
	}
	server.Close() // releases the reader
	<-readerDone
}

// A statement whose first write found the server gone sent nothing, and nothing written after it
// may count: pgx's cleanup goroutine writes Terminate on the dead socket while the failed call is
// still comparing the bytes written, and a count that included it would report a statement that
// never left as one that may have run, failing an operation gated replays on a new connection.
func TestSocketCountsNothingAfterTheServerWasFoundGone(t *testing.T) {
	client, server := tcpPair(t)
	s := New(client, 0)
	if s.check == nil {
		t.Skip("no socket check on this platform")
	}
	server.Close()
	testwait.For(t, "hang-up seen", func() bool { return s.check.peerGone() })
	s.CheckBeforeWrite()
	if n, err := s.Write([]byte("Q")); n != 0 || !errors.Is(err, errHungUpWhileIdle) {
		t.Fatalf("first write after the server hung up = %d, %v; want 0, %v", n, err, errHungUpWhileIdle)
	}
	// The driver's farewell, on a socket whose peer is gone: sent or not, it is not counted.
	s.Write([]byte("X"))
	if got := s.Written(); got != 0 {
		t.Errorf("%d bytes counted as written on a socket that sent nothing", got)
	}
}

// The same holds after any failed write: the connection is broken, and whatever its driver
// writes next is not counted. But it is sent: after a write cut short by a deadline, pgx's cleanup
// writes Terminate and reads until the server closes its end, which the server does only on
// Terminate; a socket that kept it back held the cleanup, and the connection's permit, for
// drivers.CleanupWait (15 s).
func TestSocketSendsButDoesNotCountTheFarewellAfterAFailedWrite(t *testing.T) {
	client, server := tcpPair(t)
	s := New(client, 0)
	client.SetWriteDeadline(time.Now().Add(-time.Second))
	if _, err := s.Write([]byte("Q")); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write past its deadline: %v", err)
	}
	before := s.Written()
	client.SetWriteDeadline(time.Time{})
	if n, err := s.Write([]byte("X")); n != 1 || err != nil {
		t.Fatalf("the farewell after a failed write = %d, %v; want it sent", n, err)
	}
	server.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, 1)
	if _, err := io.ReadFull(server, got); err != nil || got[0] != 'X' {
		t.Errorf("the server read %q, %v; want the farewell", got, err)
	}
	if got := s.Written(); got != before {
		t.Errorf("written went from %d to %d after the connection broke", before, got)
	}
}

// BenchmarkPeerGone measures what the liveness check adds to the first write of every operation
// on a reused connection: one non-blocking recv system call on an open, quiet socket.
func BenchmarkPeerGone(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	server, err := ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	defer server.Close()
	s := newSockCheck(c)
	if s == nil {
		b.Skip("no socket check on this platform")
	}
	b.ReportAllocs()
	for b.Loop() {
		if s.peerGone() {
			b.Fatal("an open, quiet connection reported gone")
		}
	}
}
