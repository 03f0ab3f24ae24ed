package gated_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"net/http"

	"github.com/gatedsql/gated"
)

// ParseDSN takes the gate_ keys out of a DSN into a Config and leaves the rest for the inner
// driver. A bad key or value is a *DSNError naming the key, never showing the password.
func ExampleParseDSN() {
	cfg, err := gated.ParseDSN("postgres://app:secret@db:5432/shop?sslmode=disable&gate_concurrent=16&gate_queue=8&gate_queue_wait=20ms")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("driver:", cfg.Driver)
	fmt.Println("P, B, Q:", cfg.MaxConns, cfg.Concurrent, cfg.Queue)
	fmt.Println("wait:", cfg.QueueWait)
	fmt.Println("inner DSN:", cfg.DSN)

	_, err = gated.ParseDSN("postgres://app:secret@db/shop?gate_concurent=16")
	var dsnErr *gated.DSNError
	if errors.As(err, &dsnErr) {
		fmt.Println("bad key:", dsnErr.Key)
	}
	// Output:
	// driver: pgx
	// P, B, Q: 16 16 8
	// wait: 20ms
	// inner DSN: postgres://app:secret@db:5432/shop?sslmode=disable
	// bad key: gate_concurent
}

// Open is sql.Open("gated", dsn) plus the *sql.DB settings that keep database/sql's own pool
// from undoing the gate. Like sql.Open it does no I/O: the first operation connects.
func ExampleOpen() {
	db, err := gated.Open("postgres://app@db:5432/shop?sslmode=disable&gate_max_conns=24&gate_concurrent=16&gate_queue=8&gate_queue_wait=20ms")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	fmt.Println("settings undo the gate:", gated.CheckDB(db) != nil)
	c, _ := gated.FromDB(db)
	s := c.Stats()
	fmt.Println("P:", s.Pool.MaxConns, "B:", s.Concurrent, "Q:", s.Queue)
	// Output:
	// settings undo the gate: false
	// P: 24 B: 16 Q: 8
}

// IsRejected tells a refusal of the gate (ErrAdmissionFull, ErrAdmissionTimeout), which an HTTP
// handler answers with 503, from every other error, wrapped or not.
func ExampleIsRejected() {
	for _, err := range []error{
		fmt.Errorf("load cart: %w", gated.ErrAdmissionFull),
		fmt.Errorf("load cart: %w", gated.ErrAdmissionTimeout),
		fmt.Errorf("load cart: %w: %w", gated.ErrWaitCanceled, context.DeadlineExceeded),
		sql.ErrNoRows,
	} {
		fmt.Printf("%v: %v\n", gated.IsRejected(err), err)
	}
	// Output:
	// true: load cart: gated: admission full: too many operations running and waiting
	// true: load cart: gated: timed out waiting for an execution permit
	// false: load cart: gated: the context ended before an execution permit was granted: context deadline exceeded
	// false: sql: no rows in result set
}

// A handler answers a refusal with 503; everything else is the application's own error.
func ExampleIsRejected_handler() {
	db, err := gated.Open("postgres://app@db:5432/shop?sslmode=disable&gate_concurrent=16&gate_queue=8")
	if err != nil {
		log.Fatal(err)
	}
	http.HandleFunc("GET /stock/{sku}", func(w http.ResponseWriter, r *http.Request) {
		var n int
		err := db.QueryRowContext(r.Context(), "SELECT quantity FROM stock WHERE sku = $1", r.PathValue("sku")).Scan(&n)
		switch {
		case gated.IsRejected(err):
			http.Error(w, "overloaded, try again", http.StatusServiceUnavailable)
		case errors.Is(err, sql.ErrNoRows):
			http.NotFound(w, r)
		case err != nil:
			http.Error(w, "internal error", http.StatusInternalServerError)
		default:
			fmt.Fprintln(w, n)
		}
	})
}

// InTx passes the gate before BEGIN, rolls back when fn fails, never retries a failed commit, and
// runs fn again after a serialization failure or a deadlock only when Retries asks for it.
func ExampleInTx() {
	db, err := gated.Open("postgres://app@db:5432/shop?sslmode=disable&gate_concurrent=16")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()

	err = gated.InTx(ctx, db, &gated.TxOptions{
		TxOptions: sql.TxOptions{Isolation: sql.LevelSerializable},
		Retries:   3, // fn is safe to run again: it only reads and writes inside tx
	}, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = balance - 10 WHERE id = 1"); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = balance + 10 WHERE id = 2")
		return err
	})
	switch {
	case errors.Is(err, gated.ErrCommitUnknown):
		log.Print("the transfer may or may not have been applied: check before doing it again")
	case gated.IsRejected(err):
		log.Print("overloaded: nothing was sent to the database")
	case err != nil:
		log.Print(err)
	}
}

// WithWorkload picks the gate of the operations run under a context. Each workload has budgets
// of its own on one physical pool; a name the Connector does not know fails at once, holding
// nothing, without contacting the database.
func ExampleWithWorkload() {
	db, err := gated.Open("postgres://app@db:5432/shop?sslmode=disable&gate_max_conns=8&gate_concurrent=6&gate_workloads=batch:2:2:1s")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	c, _ := gated.FromDB(db)
	for _, name := range c.Workloads() {
		s, _ := c.WorkloadStats(name)
		fmt.Printf("%s: B=%d Q=%d\n", name, s.Concurrent, s.Queue)
	}

	// A report run under "batch" can take at most 2 of the 8 connections:
	//
	//	rows, err := db.QueryContext(gated.WithWorkload(ctx, "batch"), "SELECT ... big report ...")
	ctx := gated.WithWorkload(context.Background(), "nightly")
	_, err = db.ExecContext(ctx, "DELETE FROM sessions WHERE expires < now()")
	fmt.Println("unknown workload:", errors.Is(err, gated.ErrUnknownWorkload))
	// Output:
	// default: B=6 Q=6
	// batch: B=2 Q=2
	// unknown workload: true
}
