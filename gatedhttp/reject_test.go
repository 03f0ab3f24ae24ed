package gatedhttp

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/gatedsql/gated"
	"github.com/gatedsql/gated/internal/fakedb"
)

// rejections and others are the errors WriteRejection must answer, and must leave alone.
var (
	rejections = []struct {
		name string
		err  error
	}{
		{"full", gated.ErrAdmissionFull},
		{"timeout", gated.ErrAdmissionTimeout},
		{"wrapped full", fmt.Errorf("loading order 7: %w", gated.ErrAdmissionFull)},
		{"wrapped timeout", fmt.Errorf("loading order 7: %w", gated.ErrAdmissionTimeout)},
		{"displaced", gated.ErrAdmissionDisplaced},
		{"wrapped displaced", fmt.Errorf("loading order 7: %w", gated.ErrAdmissionDisplaced)},
		{"displaced RejectedError", &gated.RejectedError{Workload: "batch", Reason: gated.RejectDisplaced}},
		{"wrapped displaced RejectedError", fmt.Errorf("loading order 7: %w", &gated.RejectedError{Workload: "batch", Reason: gated.RejectDisplaced})},
	}
	others = []struct {
		name string
		err  error
	}{
		{"nil", nil},
		{"plain", errors.New("duplicate key")},
		{"deadline", context.DeadlineExceeded},
		{"wait ended by context", fmt.Errorf("gated: waiting for an execution permit: %w", context.Canceled)},
		{"closed", gated.ErrClosed},
		{"no rows", sql.ErrNoRows},
	}
)

// checkRejection checks a 503 with a Retry-After of whole seconds within [lo, hi].
func checkRejection(t *testing.T, rec *httptest.ResponseRecorder, lo, hi int) {
	t.Helper()
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("status %d, want 503", rec.Code)
	}
	ra := rec.Header().Get("Retry-After")
	secs, err := strconv.Atoi(ra)
	if err != nil || secs < lo || secs > hi {
		t.Errorf("Retry-After %q, want whole seconds in [%d, %d]", ra, lo, hi)
	}
	if rec.Body.Len() == 0 {
		t.Error("empty body")
	}
}

// checkUntouched checks that nothing was written to rec.
func checkUntouched(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	if len(rec.Header()) != 0 || rec.Body.Len() != 0 || rec.Code != http.StatusOK {
		t.Errorf("response touched: status %d, header %v, body %q", rec.Code, rec.Header(), rec.Body)
	}
}

func TestWriteRejectionAnswersRefusalsWith503AndRetryAfter(t *testing.T) {
	for _, tc := range rejections {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			if !WriteRejection(rec, tc.err) {
				t.Fatal("WriteRejection = false for a refusal")
			}
			checkRejection(t, rec, 1, 1)
		})
	}
	for _, tc := range others {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			if WriteRejection(rec, tc.err) {
				t.Fatal("WriteRejection = true for an error that is not a refusal")
			}
			checkUntouched(t, rec)
		})
	}
}

func TestRejecterWithoutConnectorSendsOneSecond(t *testing.T) {
	rj := NewRejecter(nil)
	for _, tc := range rejections {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			if !rj.WriteRejection(rec, tc.err) {
				t.Fatal("WriteRejection = false for a refusal")
			}
			checkRejection(t, rec, 1, 1)
		})
	}
}

func TestRetryAfterSecondsEstimate(t *testing.T) {
	for _, tc := range []struct {
		name     string
		backlog  int
		admitted int64
		elapsed  time.Duration
		want     int
	}{
		{"empty gate", 0, 0, 5 * time.Second, 1},
		{"fast operations round up to one second", 24, 16000, time.Second, 1},
		{"backlog of 2.5 s", 10, 4, time.Second, 3},
		{"backlog of exactly 2 s", 8, 6, 1500 * time.Millisecond, 2},
		{"capped", 100, 1, time.Second, 10},
		{"no history yet", 10, 0, 200 * time.Millisecond, 1},
		{"half a second of history", 6, 2, 500 * time.Millisecond, 2},
		{"half a second of history, slow gate", 12, 2, 500 * time.Millisecond, 3},
		{"nothing admitted for a second", 10, 0, time.Second, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := retryAfterSeconds(tc.backlog, tc.admitted, tc.elapsed); got != tc.want {
				t.Errorf("retryAfterSeconds(%d, %d, %v) = %d, want %d", tc.backlog, tc.admitted, tc.elapsed, got, tc.want)
			}
		})
	}
}

// TestRejecterReadsTheGate fills a real gate (B=1, Q=1) over the fake driver: a refused operation
// gets a 503 whose Retry-After the Rejecter derived from that gate, and other errors pass.
func TestRejecterReadsTheGate(t *testing.T) {
	fd := fakedb.New()
	db, err := gated.Open("gate_driver=" + fd.Register() + " gate_max_conns=1 gate_concurrent=1 gate_queue=1 gate_queue_wait=1m")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c, ok := gated.FromDB(db)
	if !ok {
		t.Fatal("FromDB: not gated")
	}
	rj := NewRejecter(c)
	if got := rj.RetryAfter(); got != 1 {
		t.Errorf("RetryAfter of an empty gate = %d, want 1", got)
	}

	ctx := context.Background()
	done := make(chan error, 2)
	for range 2 { // one runs and blocks, one waits behind it
		go func() {
			_, err := db.ExecContext(ctx, "BLOCK hold")
			done <- err
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for s := c.Stats(); s.Running != 1 || s.Waiting != 1; s = c.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("gate never filled: %+v", s)
		}
		time.Sleep(time.Millisecond) // polling a condition, not synchronizing
	}
	_, err = db.ExecContext(ctx, "SELECT 1")
	if !errors.Is(err, gated.ErrAdmissionFull) {
		t.Fatalf("third operation: %v, want ErrAdmissionFull", err)
	}
	rec := httptest.NewRecorder()
	if !rj.WriteRejection(rec, err) {
		t.Fatal("WriteRejection = false for the gate's refusal")
	}
	checkRejection(t, rec, 1, int(MaxRetryAfter/time.Second))
	rec = httptest.NewRecorder()
	if rj.WriteRejection(rec, errors.New("duplicate key")) {
		t.Error("WriteRejection = true for another error")
	}
	checkUntouched(t, rec)

	fd.Release("hold")
	for range 2 {
		if err := <-done; err != nil {
			t.Errorf("blocked operation: %v", err)
		}
	}
}

// TestRejecterAnswersWithTheRefusingGatesEstimate: a refusal by the batch workload, full or
// displaced, gets the batch gate's Retry-After, not the default gate's. The batch gate (B=1, Q=1) is full, 2
// inside, and admitted 1 operation in the 1.5 s (a clock the test moves) since the Rejecter
// was made: 2 / (1 / 1.5 s) = 3 s. The default gate is empty: 1.
func TestRejecterAnswersWithTheRefusingGatesEstimate(t *testing.T) {
	fd := fakedb.New()
	db, err := gated.Open("gate_driver=" + fd.Register() + " gate_max_conns=2 gate_concurrent=1 gate_workloads=batch:1:1:1m")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c, _ := gated.FromDB(db)
	clock := time.Now()
	rj := NewRejecter(c)
	rj.now = func() time.Time { return clock }

	ctx := gated.WithWorkload(context.Background(), "batch")
	done := make(chan error, 2)
	for range 2 { // one runs and blocks, one waits behind it
		go func() {
			_, err := db.ExecContext(ctx, "BLOCK batch")
			done <- err
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for s, _ := c.WorkloadStats("batch"); s.Running != 1 || s.Waiting != 1; s, _ = c.WorkloadStats("batch") {
		if time.Now().After(deadline) {
			t.Fatalf("batch gate never filled: %+v", s)
		}
		time.Sleep(time.Millisecond) // polling a condition, not synchronizing
	}
	clock = clock.Add(1500 * time.Millisecond)

	_, err = db.ExecContext(ctx, "SELECT 1")
	var re *gated.RejectedError
	if !errors.As(err, &re) || re.Workload != "batch" || re.Reason != gated.RejectFull || !errors.Is(err, gated.ErrAdmissionFull) {
		t.Fatalf("refusal by batch: %v, want a RejectedError of batch, full, matching ErrAdmissionFull", err)
	}
	rec := httptest.NewRecorder()
	if !rj.WriteRejection(rec, err) {
		t.Fatal("WriteRejection = false for the batch gate's refusal")
	}
	checkRejection(t, rec, 3, 3)
	// A waiter of batch displaced by a caller of higher priority, or of a tenant with fewer
	// waiters, gets the same gate's estimate: the error names the workload as a full one does.
	displaced := &gated.RejectedError{Workload: "batch", Reason: gated.RejectDisplaced}
	if !errors.Is(displaced, gated.ErrAdmissionDisplaced) {
		t.Fatalf("%v does not match ErrAdmissionDisplaced", displaced)
	}
	for _, err := range []error{displaced, fmt.Errorf("loading order 7: %w", displaced)} {
		rec := httptest.NewRecorder()
		if !rj.WriteRejection(rec, err) {
			t.Fatalf("WriteRejection = false for %v", err)
		}
		checkRejection(t, rec, 3, 3)
	}
	if got := rj.RetryAfter(); got != 1 {
		t.Errorf("RetryAfter of the empty default gate = %d, want 1", got)
	}

	fd.Release("batch")
	for range 2 {
		if err := <-done; err != nil {
			t.Errorf("blocked operation: %v", err)
		}
	}
}
