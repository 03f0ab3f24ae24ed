// Command demo shows the gate refusing work at once instead of queueing it.
//
// The gate has one execution permit (gate_concurrent=1) and no waiting room (gate_queue=0). A
// first transaction takes the permit and holds it; a second one is refused at once with
// gated.ErrAdmissionFull; after the first commits, the permit is free again. It prints:
//
//	overload=rejected
//	query=42
//	available=1
//
// It runs against PostgreSQL when DATABASE_URL is set (for example
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable), and otherwise against an
// in-memory SQLite database through the same gated driver, so that it runs anywhere Go does:
//
//	go run ./examples/demo
//
// Which one it used it says on stderr, so that stdout holds the three lines alone.
//
// With SQLite the demo shows the gate, not gated's strongest guarantee. gated knows pgx, lib/pq
// and go-sql-driver/mysql well enough to keep a permit until the database has stopped working
// after a cancel; SQLite, like any other registered driver, gets the weaker one: the permit comes
// back when the driver returns, work the database goes on with after a cancel is not awaited,
// and driver.ErrBadConn is trusted as database/sql trusts it.
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/gatedsql/gated"
	_ "modernc.org/sqlite" // the fallback database: pure Go, registered as "sqlite"
)

// gateParams are the demo's gate settings: 2 physical connections, 1 execution permit, no
// queue, no waiting.
const gateParams = "gate_max_conns=2&gate_concurrent=1&gate_queue=0&gate_queue_wait=0"

func main() {
	if err := run(context.Background(), dsn(os.Getenv("DATABASE_URL")), os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// dsn appends the gate settings to DATABASE_URL, or builds an SQLite DSN when it is empty.
func dsn(databaseURL string) string {
	switch {
	case databaseURL == "":
		return "file::memory:?gate_driver=sqlite&" + gateParams
	case strings.Contains(databaseURL, "://") || strings.Contains(databaseURL, "?"):
		sep := "?"
		if strings.Contains(databaseURL, "?") {
			sep = "&"
		}
		return databaseURL + sep + gateParams
	default: // keyword/value form: host=... user=...
		return databaseURL + " " + strings.ReplaceAll(gateParams, "&", " ")
	}
}

// database names what dsn connects to, for the line on stderr.
func database(cfg *gated.Config) string {
	switch cfg.Driver {
	case "sqlite":
		return "an in-memory SQLite database (set DATABASE_URL to use PostgreSQL)"
	case "pgx", "postgres":
		return "PostgreSQL from DATABASE_URL (inner driver " + cfg.Driver + ")"
	default:
		return "DATABASE_URL (inner driver " + cfg.Driver + ")"
	}
}

// run runs the demo on dsn: the three lines go to stdout, which database it used to stderr.
func run(ctx context.Context, dsn string, stdout, stderr io.Writer) error {
	db, err := sql.Open("gated", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	c, _ := gated.FromDB(db)
	fmt.Fprintln(stderr, "demo: using", database(c.Config()))

	// The first transaction takes the only execution permit and holds it until Commit.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var answer int
	if err := tx.QueryRowContext(ctx, "SELECT 42").Scan(&answer); err != nil {
		return err
	}

	// A second transaction finds B running and Q=0 waiting: refused at once, nothing queued.
	_, err = db.BeginTx(ctx, nil)
	if !errors.Is(err, gated.ErrAdmissionFull) {
		return fmt.Errorf("second transaction: want gated.ErrAdmissionFull, got %v", err)
	}
	fmt.Fprintln(stdout, "overload=rejected")

	if err := tx.Commit(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "query=%d\n", answer)

	s := c.Stats()
	fmt.Fprintf(stdout, "available=%d\n", s.Concurrent-s.Running)
	return nil
}
