//go:build unix

package gated

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// tcpPair returns both ends of a loopback TCP connection, closed at cleanup.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	return client, server
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
	waitFor(t, "pending byte seen", func() bool { return s.peerGone() })
	buf := make([]byte, 1)
	if _, err := client.Read(buf); err != nil || buf[0] != 'N' {
		t.Fatalf("peerGone consumed the pending byte: %q, %v", buf, err)
	}
	server.Close()
	waitFor(t, "hang-up seen", func() bool { return s.peerGone() })
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
func TestSocketWritesNothingAfterTheServerWasFoundGone(t *testing.T) {
	client, server := tcpPair(t)
	s := newSockConn(client, false)
	if s.check == nil {
		t.Skip("no socket check on this platform")
	}
	server.Close()
	waitFor(t, "hang-up seen", func() bool { return s.check.peerGone() })
	s.armed.Store(true)
	if n, err := s.Write([]byte("Q")); n != 0 || !errors.Is(err, errHungUpWhileIdle) {
		t.Fatalf("first write after the server hung up = %d, %v; want 0, %v", n, err, errHungUpWhileIdle)
	}
	// The driver's farewell.
	if n, err := s.Write([]byte("X")); n != 0 || !errors.Is(err, errHungUpWhileIdle) {
		t.Errorf("write after a failed one = %d, %v; want 0 and the first failure", n, err)
	}
	if got := s.written.Load(); got != 0 {
		t.Errorf("%d bytes counted as written on a socket that sent nothing", got)
	}
}

// The same holds after any failed write: the connection is broken, and whatever its driver
// writes next (pgx's Terminate after a write cut short by a deadline) is not sent or counted.
func TestSocketWritesNothingAfterAFailedWrite(t *testing.T) {
	client, _ := tcpPair(t)
	s := newSockConn(client, false)
	client.SetWriteDeadline(time.Now().Add(-time.Second))
	_, first := s.Write([]byte("Q"))
	if !errors.Is(first, os.ErrDeadlineExceeded) {
		t.Fatalf("write past its deadline: %v", first)
	}
	before := s.written.Load()
	client.SetWriteDeadline(time.Time{})
	if n, err := s.Write([]byte("X")); n != 0 || err != first {
		t.Errorf("write after a failed one = %d, %v; want 0, %v", n, err, first)
	}
	if got := s.written.Load(); got != before {
		t.Errorf("written went from %d to %d after the connection broke", before, got)
	}
}
