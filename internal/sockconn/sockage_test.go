package sockconn

import (
	"net"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// recvAgeKnown reports whether this platform tells a TCP socket's receive age (sockage_linux.go).
func recvAgeKnown() bool { return runtime.GOOS == "linux" && runtime.GOARCH != "386" }

// maxRecvAgeStep is Linux's coarsest tick, 10 ms at HZ=100: the kernel's age is within a tick of
// the true one (the root's binding.go allows for the same bound).
const maxRecvAgeStep = 10 * time.Millisecond

// monoBase and monoNow read the monotonic clock as a duration.
var monoBase = time.Now()

func monoNow() time.Duration { return time.Since(monoBase) }

// sockPair returns both ends of a connection over a listener on network and addr, closed at
// cleanup.
func sockPair(t *testing.T, network, addr string) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial(network, ln.Addr().String())
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

// A TCP socket's age is the time since its last data arrived, read or not, within the kernel's
// step; it costs no allocation. A unix-domain socket's is unknown: 0.
func TestAutoHoldSocketReportsTheAgeOfItsLastData(t *testing.T) {
	t.Run("tcp", func(t *testing.T) {
		c, server := sockPair(t, "tcp", "127.0.0.1:0")
		client := New(c, 0)
		buf := make([]byte, 1)
		for _, unread := range []bool{false, true} {
			sent := monoNow()
			if _, err := server.Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
			arrived := monoNow() // loopback: queued on the client's socket before Write returns
			if !unread {
				if _, err := client.Read(buf); err != nil {
					t.Fatal(err)
				}
				arrived = monoNow()
			}
			time.Sleep(50 * time.Millisecond)
			before := monoNow()
			age := client.SinceLastRecv()
			after := monoNow()
			if !recvAgeKnown() {
				if age != 0 {
					t.Errorf("age %v on a platform without TCP_INFO, want 0", age)
				}
				return
			}
			// The true age is within [before-arrived, after-sent]; the kernel's step is at most
			// maxRecvAgeStep either way.
			if lo, hi := before-arrived-maxRecvAgeStep, after-sent+maxRecvAgeStep; age < lo || age > hi {
				t.Errorf("unread %v: age %v, want within [%v, %v]", unread, age, lo, hi)
			}
			if unread {
				if _, err := client.Read(buf); err != nil {
					t.Fatal(err)
				}
			}
		}
		// Data just arrived: an age within a step.
		if _, err := server.Write([]byte("y")); err != nil {
			t.Fatal(err)
		}
		if _, err := client.Read(buf); err != nil {
			t.Fatal(err)
		}
		t0 := monoNow()
		age := client.SinceLastRecv()
		if d := monoNow() - t0; age > d+maxRecvAgeStep {
			t.Errorf("age %v just after the data arrived", age)
		}
		if n := testing.AllocsPerRun(100, func() { client.SinceLastRecv() }); n != 0 {
			t.Errorf("SinceLastRecv allocates %v times", n)
		}
	})
	t.Run("unix", func(t *testing.T) {
		c, server := sockPair(t, "unix", filepath.Join(t.TempDir(), "s"))
		client := New(c, 0)
		if client.age != nil {
			t.Errorf("a unix-domain socket has a sockAge")
		}
		server.Write([]byte("x"))
		time.Sleep(20 * time.Millisecond)
		if age := client.SinceLastRecv(); age != 0 {
			t.Errorf("unix-domain socket: age %v, want 0 (unknown)", age)
		}
	})
}
