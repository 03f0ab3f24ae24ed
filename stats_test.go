package gated_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/gatedsql/gated"
	"github.com/gatedsql/gated/internal/fakedb"
)

// TestStatsCountRefusalAndRelease: with one execution permit and no waiting room, a statement is
// refused at once while a transaction holds the permit; after the commit Stats shows one
// admission, one refusal and nothing running.
func TestStatsCountRefusalAndRelease(t *testing.T) {
	inner := fakedb.New().Register()
	db, err := sql.Open("gated", "mem?gate_driver="+inner+"&gate_max_conns=1&gate_concurrent=1&gate_queue=0")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()

	tx, err := db.BeginTx(ctx, nil) // holds the only permit until Commit
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "SELECT 1"); !gated.IsRejected(err) {
		t.Errorf("ExecContext while the transaction holds the only permit: err = %v, want a refusal", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	c, _ := gated.FromDB(db)
	if s := c.Stats(); s.Admitted != 1 || s.RejectedFull != 1 || s.Running != 0 {
		t.Errorf("Stats after the commit: Admitted %d, RejectedFull %d, Running %d; want 1, 1, 0",
			s.Admitted, s.RejectedFull, s.Running)
	}
}
