package gated

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/gatedsql/gated/internal/pgtest"
	"github.com/lib/pq"
)

// A failed connection reports the driver's own error, as the plain driver does: lib/pq's error for
// several hosts unwraps to one error per host (Unwrap() []error, which lib/pq's TestConnectMulti
// reads with errors.Unwrap), and errors.As finds the server's *pq.Error and the *net.OpError
// inside it. No gated wrapper that unwraps to a single error stands in between.
func TestConnectErrorKeepsTheDriversMultiHostError(t *testing.T) {
	u, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadPort := closed.Addr().(*net.TCPAddr).Port
	closed.Close()
	dsn := fmt.Sprintf("host=127.0.0.1,%s port=%d,%s user=postgres dbname=gated_no_such_db sslmode=disable connect_timeout=5",
		u.Hostname(), deadPort, u.Port())

	ping := func(driverName, dsn string) error {
		db, err := sql.Open(driverName, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return db.PingContext(ctx)
	}
	plain := ping("postgres", dsn)
	gated := ping(DriverName, dsn+" gate_driver=postgres")
	for name, err := range map[string]error{"lib/pq": plain, "gated": gated} {
		if err == nil {
			t.Fatalf("%s: connecting to a dead port and a missing database worked", name)
		}
		multi, ok := errors.Unwrap(err).(interface{ Unwrap() []error })
		if !ok {
			t.Errorf("%s: errors.Unwrap(%T) is %T, without Unwrap() []error: %v", name, err, errors.Unwrap(err), err)
		} else if n := len(multi.Unwrap()); n != 2 {
			t.Errorf("%s: %d errors, want one per host", name, n)
		}
		var pqErr *pq.Error
		if !errors.As(err, &pqErr) || pqErr.Code != "3D000" {
			t.Errorf("%s: errors.As finds no *pq.Error 3D000 in %v", name, err)
		}
		var opErr *net.OpError
		if !errors.As(err, &opErr) {
			t.Errorf("%s: errors.As finds no *net.OpError in %v", name, err)
		}
		if name == "gated" && errors.Is(err, driver.ErrBadConn) {
			t.Errorf("gated: %v matches driver.ErrBadConn, which database/sql would retry", err)
		}
	}
	if plain != nil && gated != nil && plain.Error() != gated.Error() {
		t.Errorf("gated's error %q, want lib/pq's %q", gated, plain)
	}
}
