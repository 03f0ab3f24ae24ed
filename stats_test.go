package gated_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
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

// TestAllStatsPrintsEveryGateAndThePool: printing what AllStats returns shows a line per gate,
// default first, and one for the pool, with the numbers of that moment, not a func pointer.
func TestAllStatsPrintsEveryGateAndThePool(t *testing.T) {
	inner := fakedb.New().Register()
	db, err := sql.Open("gated", "mem?gate_driver="+inner+"&gate_max_conns=6&gate_concurrent=2&gate_queue=1&gate_workloads=reports:3:2:1s")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(context.Background(), "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	c, _ := gated.FromDB(db)

	got := fmt.Sprint(c.AllStats())
	lines := strings.Split(got, "\n")
	want := []string{
		"default: B=2 Q=1 running=0 waiting=0 admitted=1 rejected_full=0 rejected_timeout=0 canceled=0 wait=",
		"reports: B=3 Q=2 running=0 waiting=0 admitted=0 rejected_full=0 rejected_timeout=0 canceled=0 wait=0s",
		"pool: P=6 open=1 idle=1 in_use=0 opened=1 closed=0 connect_errors=0",
	}
	if len(lines) != len(want) {
		t.Fatalf("fmt.Sprint(c.AllStats()) = %q, want %d lines", got, len(want))
	}
	for i := range want {
		if !strings.HasPrefix(lines[i], want[i]) {
			t.Errorf("line %d = %q, want it to start with %q", i+1, lines[i], want[i])
		}
	}
	if s := c.AllStats().String(); s != got {
		t.Errorf("String() = %q, fmt.Sprint = %q", s, got)
	}
}
