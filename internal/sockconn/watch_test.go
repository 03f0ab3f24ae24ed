package sockconn

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"testing/synctest"
	"time"
)

// pipeSock returns a lib/pq-style Conn over one end of a pipe, and the other end.
func pipeSock(t *testing.T) (*Conn, net.Conn) {
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	return New(a, 0), b
}

func TestWatchThatFiresAfterItsCallEndedDoesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, peer := pipeSock(t)
		ctx, cancel := context.WithCancel(context.Background())
		w := s.Watch(ctx, CancelGrace)
		if !w.Armed() {
			t.Fatal("no watch armed for a context that can end")
		}
		if w.End() {
			t.Fatal("a watch whose context never ended reports that it cut the call short")
		}
		cancel() // the helper's deferred cancel, after the call returned
		time.Sleep(2 * CancelGrace)
		synctest.Wait()
		if s.expiredBy.Load() != nil {
			t.Fatal("a watch expired the socket after its call had ended")
		}
		// The next call on the socket works.
		go peer.Write([]byte("x"))
		buf := make([]byte, 1)
		if _, err := s.Read(buf); err != nil {
			t.Fatalf("read after an ended watch's context ended: %v", err)
		}
	})
}

func TestWatchCutsShortTheCallItGuards(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := pipeSock(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		w := s.Watch(ctx, CancelGrace)
		read := make(chan error, 1)
		go func() {
			_, err := s.Read(make([]byte, 1)) // the server never answers
			read <- err
		}()
		synctest.Wait()
		cancel()
		err := <-read // after the grace
		if !errors.Is(err, context.Canceled) || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read cut short by the watch: %v, want it to wrap context.Canceled and the deadline", err)
		}
		if !w.End() {
			t.Fatal("the watch that cut the call short does not say so at the call's end")
		}
	})
}

func TestASocketHasOneWatchAtATime(t *testing.T) {
	s, _ := pipeSock(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rowsWatch := s.Watch(ctx, CancelGrace)
	if second := s.Watch(ctx, CancelGrace); second.Armed() {
		t.Fatal("a second watch was armed while the first call's watch is")
	}
	rowsWatch.End()
	if w := s.Watch(context.Background(), CancelGrace); w.Armed() {
		t.Fatal("a watch was armed for a context that never ends")
	}
	w := s.Watch(ctx, CancelGrace)
	if !w.Armed() {
		t.Fatal("no watch armed once the earlier one ended")
	}
	w.End()
}
