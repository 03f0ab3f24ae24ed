package gated_test

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/gatedsql/gated"
	"github.com/gatedsql/gated/internal/fakedb"
)

// A gate with one execution permit and no waiting room refuses a second transaction at once.
//
// The inner driver here is an in-memory fake, so that the example runs without a server; any
// registered driver can be the inner one (gate_driver names it), and pgx is the default.
func Example() {
	inner := fakedb.New().Register() // a registered driver name, as "sqlite" or "mysql" would be
	db, err := sql.Open("gated", "mem?gate_driver="+inner+"&gate_max_conns=1&gate_concurrent=1&gate_queue=0")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	ctx := context.Background()

	tx, err := db.BeginTx(ctx, nil) // holds the only permit until Commit
	if err != nil {
		panic(err)
	}
	_, err = db.ExecContext(ctx, "SELECT 1")
	fmt.Println("refused:", gated.IsRejected(err))

	tx.Commit()
	c, _ := gated.FromDB(db)
	s := c.Stats()
	fmt.Println("admitted:", s.Admitted, "refused:", s.RejectedFull, "running:", s.Running)
	// Output:
	// refused: true
	// admitted: 1 refused: 1 running: 0
}
