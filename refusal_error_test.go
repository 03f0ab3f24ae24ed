package gated

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
)

// TestRefusalsNameTheirWorkload: each gate refuses with a *RejectedError naming its workload and
// reason, which errors.Is matches against the sentinel of the reason and IsRejected accepts,
// through database/sql and wrapping, and which the refusal event carries.
func TestRefusalsNameTheirWorkload(t *testing.T) {
	var events atomic.Int64
	var seen atomic.Pointer[RejectedError]
	obs := ObserverFunc(func(e Event) {
		if e.Kind == EventRejectedFull || e.Kind == EventRejectedTimeout {
			events.Add(1)
			var re *RejectedError
			if errors.As(e.Err, &re) {
				seen.Store(re)
			}
		}
	})
	db, c, fd := openObserved(t, "gate_max_conns=3 gate_concurrent=1 gate_queue=0 gate_queue_wait=0 gate_workloads=batch:1:0:0,report:1:1:0", obs, nil)
	for _, tc := range []struct {
		workload string
		reason   RejectReason
		sentinel error
	}{
		{DefaultWorkload, RejectFull, ErrAdmissionFull}, // B=1, Q=0: full at once
		{"batch", RejectFull, ErrAdmissionFull},
		{"report", RejectTimeout, ErrAdmissionTimeout}, // Q=1, wait 0: try once
	} {
		t.Run(tc.workload, func(t *testing.T) {
			ctx := WithWorkload(context.Background(), tc.workload)
			done := make(chan error, 1)
			go func() { _, err := db.ExecContext(ctx, "BLOCK "+tc.workload); done <- err }()
			if err := fd.WaitBlocked(context.Background(), tc.workload, 1); err != nil {
				t.Fatal(err)
			}
			_, err := db.ExecContext(ctx, "SELECT 1")
			var re *RejectedError
			switch {
			case !errors.As(err, &re):
				t.Fatalf("got %v (%T), want a *RejectedError", err, err)
			case re.Workload != tc.workload || re.Reason != tc.reason:
				t.Errorf("RejectedError{%q, %v}, want {%q, %v}", re.Workload, re.Reason, tc.workload, tc.reason)
			case !errors.Is(err, tc.sentinel) || !IsRejected(err) || !IsRejected(fmt.Errorf("wrapped: %w", err)):
				t.Errorf("%v does not match %v or IsRejected", err, tc.sentinel)
			case !strings.HasPrefix(err.Error(), "gated: ") || !strings.Contains(err.Error(), "workload "+tc.workload):
				t.Errorf("message %q does not name the workload", err)
			}
			if got := seen.Load(); got != re {
				t.Errorf("the refusal event carried %v, the caller got %v", got, re)
			}
			fd.Release(tc.workload)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
	if events.Load() != 3 {
		t.Errorf("%d refusal events, want 3", events.Load())
	}
	var refused int64
	for _, s := range c.AllStats() {
		refused += s.RejectedFull + s.RejectedTimeout
	}
	if refused != 3 {
		t.Errorf("AllStats counts %d refusals, want 3", refused)
	}
}

// TestRefusalAllocatesNothing: refusals are the overload hot path. A gate's refusal, full or
// timed out, allocates nothing; nor does the whole bind of a refused operation with an Observer
// attached.
func TestRefusalAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	full := newTestGate(1, 0, 0)
	mustAcquire(t, full)
	timeout := newTestGate(1, 1, 0)
	mustAcquire(t, timeout)
	for name, g := range map[string]*gate{"full": full, "timeout": timeout} {
		if a := testing.AllocsPerRun(1000, func() {
			if _, err := g.acquire(ctx); !IsRejected(err) {
				t.Fatalf("acquire: %v", err)
			}
		}); a != 0 {
			t.Errorf("a refusal (%s) allocates %v times", name, a)
		}
	}

	var n atomic.Int64
	db, c, fd := openObserved(t, "gate_max_conns=1 gate_concurrent=1 gate_queue=0", ObserverFunc(func(Event) { n.Add(1) }), nil)
	held := holdPermit(t, db, fd, "h")
	cn := &conn{c: c}
	if a := testing.AllocsPerRun(1000, func() {
		if err := cn.bind(ctx); !errors.Is(err, ErrAdmissionFull) {
			t.Fatalf("bind: %v", err)
		}
	}); a != 0 {
		t.Errorf("an observed refused bind allocates %v times", a)
	}
	fd.Release("h")
	if err := <-held; err != nil {
		t.Fatal(err)
	}
}

// TestDisplacedRefusalThroughDatabaseSQL: a waiter displaced by a higher-priority arrival gets,
// through database/sql, a *RejectedError of reason RejectDisplaced naming its workload; the
// refusal event carries that error, Stats counts it apart from the other refusals, the logged
// summary counts it as displaced, and the string of AllStats shows it.
func TestDisplacedRefusalThroughDatabaseSQL(t *testing.T) {
	var displacedEvents atomic.Int64
	var seen atomic.Pointer[RejectedError]
	obs := ObserverFunc(func(e Event) {
		if e.Kind == EventRejectedDisplaced {
			displacedEvents.Add(1)
			var re *RejectedError
			if errors.As(e.Err, &re) {
				seen.Store(re)
			}
		}
	})
	h := &logRecorder{}
	db, c, fd := openObserved(t, "gate_max_conns=2 gate_concurrent=1 gate_queue=1 gate_queue_wait=1m gate_workloads=batch:1:1:1m", obs, slog.New(h))
	ctx := WithWorkload(context.Background(), "batch")
	held := make(chan error, 1)
	go func() { _, err := db.ExecContext(ctx, "BLOCK batch"); held <- err }()
	if err := fd.WaitBlocked(context.Background(), "batch", 1); err != nil {
		t.Fatal(err)
	}
	low := make(chan error, 1)
	go func() { _, err := db.ExecContext(WithPriority(ctx, PriorityLow), "SELECT 1"); low <- err }()
	waitFor(t, "the low waiter queued", func() bool { s, _ := c.WorkloadStats("batch"); return s.Waiting == 1 })
	high := make(chan error, 1)
	go func() { _, err := db.ExecContext(WithPriority(ctx, PriorityHigh), "SELECT 1"); high <- err }()

	err := <-low
	var re *RejectedError
	switch {
	case !errors.As(err, &re) || re.Workload != "batch" || re.Reason != RejectDisplaced:
		t.Fatalf("the low waiter got %v, want a *RejectedError displaced from batch", err)
	case !errors.Is(err, ErrAdmissionDisplaced) || !IsRejected(err) || errors.Is(err, ErrAdmissionFull):
		t.Errorf("%v does not match ErrAdmissionDisplaced and IsRejected alone", err)
	case !strings.Contains(err.Error(), "workload batch"):
		t.Errorf("message %q does not name the workload", err)
	}
	if got := seen.Load(); got != re {
		t.Errorf("the refusal event carried %v, the caller got %v", got, re)
	}
	fd.Release("batch")
	for _, ch := range []chan error{held, high} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	s, _ := c.WorkloadStats("batch")
	if s.RejectedDisplaced != 1 || s.RejectedFull != 0 || s.RejectedTimeout != 0 || s.Admitted != 2 || displacedEvents.Load() != 1 {
		t.Errorf("stats %+v and %d displaced events, want 1 displaced, 2 admitted", s, displacedEvents.Load())
	}
	if str := c.AllStats().String(); !strings.Contains(str, "batch: B=1 Q=1 running=0 waiting=0 admitted=2 rejected_full=0 rejected_timeout=0 rejected_displaced=1 canceled=0") {
		t.Errorf("AllStats printed\n%s\nwant batch's displaced refusal", str)
	}
	db.Close() // writes the summary still pending
	var logged int64
	for _, r := range h.records("gated: operations refused") {
		logged += attrOf(r, "displaced").Int64()
	}
	if logged != 1 {
		t.Errorf("the log counts %d displaced, want 1", logged)
	}
}
