package mysqltest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"
)

// A statement on a binding that is cut short by its context and followed by another call on the
// same binding (a Ping on a pinned *sql.Conn, a second statement of the transaction before its
// Rollback) must still be stopped on the server before the permit comes back: the cancellation
// is the first call's, and the later call must not erase it.
func TestCanceledStatementFollowedByAnotherCallIsKilledBeforeThePermitReturns(t *testing.T) {
	cases := []struct {
		name string
		run  func(t *testing.T, db *sql.DB, query string)
	}{
		{"pinned conn then PingContext", func(t *testing.T, db *sql.DB, query string) {
			c, err := db.Conn(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			timedOut(t, c.QueryRowContext, query)
			c.PingContext(context.Background()) // fails: the driver closed the connection
			c.Close()
		}},
		{"transaction then a second Exec before Rollback", func(t *testing.T, db *sql.DB, query string) {
			tx, err := db.BeginTx(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			timedOut(t, tx.QueryRowContext, query)
			tx.ExecContext(context.Background(), "SELECT 1") // fails: the driver closed the connection
			tx.Rollback()
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			plain := plainDB(t)
			db, c := gatedDB(t, "gate_concurrent=1&gate_queue=0")
			query := fmt.Sprintf("SELECT SLEEP(3) /* gated-follow-%d */", time.Now().UnixNano())
			tc.run(t, db, query)
			// Running is read before the process list: once it is 0, the server must not show
			// the statement any more.
			waitFor(t, "the permit back", func() bool {
				running := c.Stats().Running
				if running == 0 && count(t, plain, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO = ? AND COMMAND <> 'Sleep'", query) > 0 {
					t.Fatal("the permit came back while the server still ran the cut-short statement")
				}
				return running == 0
			})
			if n := count(t, db, "SELECT 1"); n != 1 {
				t.Fatal("SELECT 1 after the kill")
			}
		})
	}
}

// timedOut runs query under a context that ends while the server runs it.
func timedOut(t *testing.T, queryRow func(context.Context, string, ...any) *sql.Row, query string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var v int
	if err := queryRow(ctx, query).Scan(&v); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%s under a 300ms deadline: %v, want context.DeadlineExceeded", query, err)
	}
}
