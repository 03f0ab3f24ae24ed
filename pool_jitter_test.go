package gated

import (
	"context"
	"database/sql/driver"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gatedsql/gated/internal/drivers"
)

// Connections opened together do not all reach their lifetime together: each draws its jitter
// when it opens, and lives from the lifetime to the lifetime plus the jitter, never less.
func TestLifetimeJitterSpreadsTheClosingOfConnectionsOpenedTogether(t *testing.T) {
	const (
		n        = 20
		lifetime = time.Hour
		jitter   = 6 * time.Minute
	)
	synctest.Test(t, func(t *testing.T) {
		fc := &closeRecorder{}
		p := newPool(fc, drivers.NewGeneric, n, lifetime, 0)
		p.jitter = jitter
		start := time.Now()
		conns := make([]*physConn, n)
		for i := range conns {
			pc, err := p.get(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			conns[i] = pc
		}
		for _, pc := range conns {
			p.put(pc)
		}
		time.Sleep(lifetime + jitter + 2*maxReapInterval)
		synctest.Wait()
		closed := fc.times()
		p.close()
		if len(closed) != n {
			t.Fatalf("%d of %d connections closed after lifetime+jitter", len(closed), n)
		}
		seconds := map[time.Duration]bool{}
		for _, at := range closed {
			age := at.Sub(start)
			if age < lifetime || age > lifetime+jitter+2*maxReapInterval {
				t.Errorf("a connection closed at age %v, want from %v to %v", age, lifetime, lifetime+jitter)
			}
			seconds[age.Truncate(time.Second)] = true
		}
		// 20 draws from 360 seconds: all in fewer than 10 distinct seconds is as good as
		// impossible; without jitter they all fall in one.
		if len(seconds) < n/2 {
			t.Errorf("%d connections opened together closed in only %d distinct seconds", n, len(seconds))
		}
		if s := (PoolStats{}); true {
			p.stats(&s)
			if s.ClosedLifetime != n {
				t.Errorf("ClosedLifetime = %d, want %d", s.ClosedLifetime, n)
			}
		}
	})
}

// closeRecorder is a driver.Connector whose connections record when they are closed.
type closeRecorder struct {
	mu     sync.Mutex
	closed []time.Time
}

func (r *closeRecorder) Connect(context.Context) (driver.Conn, error) { return recordingConn{r}, nil }
func (r *closeRecorder) Driver() driver.Driver                        { return nil }

func (r *closeRecorder) times() []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.closed...)
}

type recordingConn struct{ r *closeRecorder }

func (c recordingConn) Prepare(string) (driver.Stmt, error) { return nil, errors.New("not supported") }
func (c recordingConn) Begin() (driver.Tx, error)           { return nil, errors.New("not supported") }
func (c recordingConn) Close() error {
	c.r.mu.Lock()
	c.r.closed = append(c.r.closed, time.Now())
	c.r.mu.Unlock()
	return nil
}
