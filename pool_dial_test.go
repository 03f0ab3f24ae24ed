package gated

import (
	"context"
	"database/sql/driver"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gatedsql/gated/internal/drivers"
)

// A dial belongs to the pool once its caller has left: it goes on, and the connection it opens
// serves the next caller. These tests drive the pool with a connector whose Connect waits to be
// told how to end.

// heldConnector's Connect waits until release is closed, then fails with fail or opens a
// connection, or until its context ends.
type heldConnector struct {
	calls   atomic.Int32
	entered chan struct{} // one value per Connect that began
	release chan struct{}
	fail    error
	ended   chan error // what each Connect returned
}

func newHeldConnector() *heldConnector {
	return &heldConnector{entered: make(chan struct{}, 8), release: make(chan struct{}), ended: make(chan error, 8)}
}

func (h *heldConnector) Connect(ctx context.Context) (driver.Conn, error) {
	h.calls.Add(1)
	h.entered <- struct{}{}
	var err error
	select {
	case <-h.release:
		err = h.fail
	case <-ctx.Done():
		err = ctx.Err()
	}
	h.ended <- err
	if err != nil {
		return nil, err
	}
	return &idConn{}, nil
}

func (h *heldConnector) Driver() driver.Driver { return nil }

func poolStats(p *pool) PoolStats {
	var s PoolStats
	p.stats(&s)
	return s
}

// leaveDuringDial gets a connection from p under a context that ends while the dial waits in
// Connect, and checks that the caller returned the context's error.
func leaveDuringDial(t *testing.T, p *pool, h *heldConnector) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() {
		_, err := p.get(ctx)
		got <- err
	}()
	<-h.entered
	cancel()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("get whose context ended during the dial: %v, want context.Canceled", err)
	}
}

func TestDialItsCallerLeftServesTheCallerWaitingForTheSlot(t *testing.T) {
	h := newHeldConnector()
	p := newPool(h, drivers.NewGeneric, 1, 0, 0)
	defer p.close()
	leaveDuringDial(t, p, h)
	// The one slot is the dial's: the next caller waits for the connection it opens.
	got := make(chan error, 1)
	go func() {
		pc, err := p.get(context.Background())
		if err == nil {
			p.put(pc)
		}
		got <- err
	}()
	close(h.release)
	if err := <-got; err != nil {
		t.Fatalf("the caller after the one that left: %v", err)
	}
	if n := h.calls.Load(); n != 1 {
		t.Errorf("%d connection attempts, want 1: the dial its caller left was thrown away", n)
	}
	if s := poolStats(p); s.Opened != 1 || s.Open != 1 || s.Idle != 1 || s.ConnectCanceled != 1 || s.ConnectErrors != 0 {
		t.Errorf("pool stats %+v, want 1 opened, open and idle, 1 canceled, no error", s)
	}
}

func TestDialItsCallerLeftThatFailsFreesItsSlot(t *testing.T) {
	h := newHeldConnector()
	h.fail = errors.New("connection refused")
	p := newPool(h, drivers.NewGeneric, 1, 0, 0)
	defer p.close()
	leaveDuringDial(t, p, h)
	close(h.release)
	if err := <-h.ended; err != h.fail {
		t.Fatalf("the dial ended with %v, want the server's refusal", err)
	}
	waitFor(t, "the failed dial's slot freed", func() bool { return poolStats(p).Open == 0 })
	// The server's refusal, after its caller left, is still the server's: an operator sees it.
	if s := poolStats(p); s.ConnectErrors != 1 || s.ConnectCanceled != 1 || s.Opened != 0 {
		t.Errorf("pool stats %+v, want 1 connect error (the server's), 1 canceled, none opened", s)
	}
}

func TestDialItsCallerLeftEndsAfterLeftDialWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHeldConnector()
		p := newPool(h, drivers.NewGeneric, 1, 0, 0)
		defer p.close()
		left := time.Now()
		leaveDuringDial(t, p, h)
		if err := <-h.ended; !errors.Is(err, context.Canceled) {
			t.Fatalf("the dial ended with %v, want its context canceled", err)
		}
		if waited := time.Since(left); waited != leftDialWait {
			t.Errorf("the dial ended %v after its caller left, want leftDialWait (%v)", waited, leftDialWait)
		}
		synctest.Wait()
		if s := poolStats(p); s.Open != 0 || s.ConnectErrors != 0 {
			t.Errorf("pool stats %+v, want the slot freed and no connect error (the pool ended the dial)", s)
		}
	})
}

func TestCloseEndsADialItsCallerLeft(t *testing.T) {
	h := newHeldConnector()
	p := newPool(h, drivers.NewGeneric, 1, 0, 0)
	leaveDuringDial(t, p, h)
	p.close() // returns once the dial has ended
	select {
	case err := <-h.ended:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the dial ended with %v, want its context canceled", err)
		}
	default:
		t.Fatal("close returned while the dial its caller left still ran")
	}
	if s := poolStats(p); s.Open != 0 || s.ConnectErrors != 0 {
		t.Errorf("pool stats %+v, want nothing open and no connect error", s)
	}
}

func TestDialItsCallerLeftIsClosedWhenThePoolClosedMeanwhile(t *testing.T) {
	// The connection is made as close begins: the dial cannot tell, and close must not leave it
	// open.
	h := newHeldConnector()
	p := newPool(h, drivers.NewGeneric, 1, 0, 0)
	leaveDuringDial(t, p, h)
	p.mu.Lock()
	p.closed = true // what close does first, under the lock
	p.mu.Unlock()
	close(h.release)
	if err := <-h.ended; err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the connection made after close began closed", func() bool { return poolStats(p).Open == 0 })
	if s := poolStats(p); s.Opened != 1 || s.Closed != 1 || s.ClosedByClose != 1 || s.Idle != 0 {
		t.Errorf("pool stats %+v, want it opened and closed by the pool's close, none idle", s)
	}
	p.mu.Lock()
	p.closed = false // let close run in full
	p.mu.Unlock()
	p.close()
}
