package gated

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"runtime"
	"testing"
	"weak"

	"github.com/gatedsql/gated/internal/drivers"
)

// idConn is the least of a MySQL connection that the MySQL connector of internal/drivers needs:
// it answers the id query.
type idConn struct{ closed bool }

func (c *idConn) Prepare(string) (driver.Stmt, error) { return nil, errors.New("idConn: no Prepare") }
func (c *idConn) Close() error                        { c.closed = true; return nil }
func (c *idConn) Begin() (driver.Tx, error)           { return nil, errors.New("idConn: no Begin") }
func (c *idConn) QueryContext(context.Context, string, []driver.NamedValue) (driver.Rows, error) {
	return &idRows{}, nil
}

type idRows struct{ done bool }

func (r *idRows) Columns() []string { return []string{"id", "server_id"} }
func (r *idRows) Close() error      { return nil }
func (r *idRows) Next(dest []driver.Value) error {
	if r.done {
		return io.EOF
	}
	r.done = true
	dest[0], dest[1] = int64(7), int64(1)
	return nil
}

// raceConnector makes connections that succeed just as the context of the attempt ends.
type raceConnector struct {
	cancel context.CancelFunc
	made   weak.Pointer[idConn]
}

func (c *raceConnector) Connect(context.Context) (driver.Conn, error) {
	dc := &idConn{}
	c.made = weak.Make(dc)
	c.cancel()
	return dc, nil
}

func (c *raceConnector) Driver() driver.Driver { return nil }

// TestMySQLConnectThatLosesTheRaceWithItsContextIsForgotten: a connection made just as the
// context of its caller ended stays the pool's (given to the caller, who hands it back, or kept
// idle); once the pool closes it, the MySQL connector must not keep it (nor its id) for ever.
func TestMySQLConnectThatLosesTheRaceWithItsContextIsForgotten(t *testing.T) {
	for range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		rc := &raceConnector{cancel: cancel}
		mc, wrap := drivers.NewMySQL(rc)
		p := newPool(mc, wrap, 1, 0, 0)
		pc, err := p.get(ctx)
		switch {
		case err == nil:
			p.put(pc)
		case !errors.Is(err, context.Canceled):
			t.Fatalf("get whose context ended as the connection was made: %v, want it or context.Canceled", err)
		}
		p.close()
		runtime.GC()
		if dc := rc.made.Value(); dc != nil {
			if !dc.closed {
				t.Fatal("the pool's close left the connection made as its caller left open")
			}
			t.Fatal("the MySQL connector still holds a connection the pool closed (and its id)")
		}
	}
}
