package gatedotel

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/gatedsql/gated"
	"github.com/gatedsql/gated/internal/fakedb"
	"github.com/gatedsql/gated/internal/obstest"
	"github.com/gatedsql/gated/internal/pgtest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Cleanup()
	os.Exit(code)
}

// gateInstruments are the instruments with the gated.workload attribute, and the unit of each.
var gateInstruments = map[string]string{
	"gated.running": "{operation}", "gated.waiting": "{operation}", "gated.concurrent.limit": "{operation}",
	"gated.queue.limit": "{operation}", "gated.admitted": "{operation}", "gated.rejected": "{operation}",
	"gated.canceled": "{operation}", "gated.server_timeouts": "{statement}", "gated.commit_unknown": "{commit}",
	"gated.lent": "{operation}", "gated.borrowed": "{operation}",
	"db.client.connection.wait_time": "s", "db.client.connection.use_time": "s",
	"gated.connect.duration": "s", "gated.statement.duration": "s",
}

// TestDSNOnlyServiceExportsEveryWorkload: sql.Open("gated", dsn) with gate_workloads=batch:1:3,
// gated.FromDB, NewObserver and Register, a real load on PostgreSQL and a manual reader's
// collection: every gate instrument has points for default and batch, the histograms count
// each workload's admitted operations and the counters equal WorkloadStats exactly.
func TestDSNOnlyServiceExportsEveryWorkload(t *testing.T) {
	for _, drv := range []string{"pgx", "postgres"} {
		t.Run(drv, func(t *testing.T) {
			db, c := obstest.OpenDSN(t, obstest.PGDSN(t, drv, "gate_max_conns=4&gate_concurrent=2&gate_queue=8&gate_queue_wait=5s&gate_workloads=batch:1:3:5s"))
			reader := register(t, c)

			refused := obstest.Load(t, db, 60)
			waitFor(t, "every gate quiet", func() bool { return obstest.Quiet(c) })
			pts := collect(t, reader)
			pool := attribute.String("db.client.connection.pool.name", "shop")
			var refusals int64
			for _, name := range c.Workloads() {
				s, _ := c.WorkloadStats(name)
				wl := WorkloadKey.String(name)
				for inst, unit := range gateInstruments {
					value(t, pts, inst, unit, pool, wl)
				}
				for _, tc := range []struct {
					name, unit string
					attrs      []attribute.KeyValue
					want       int64
				}{
					{"db.client.connection.wait_time", "s", nil, s.Admitted},
					{"db.client.connection.use_time", "s", nil, s.Admitted},
					{"gated.connect.duration", "s", nil, s.Admitted},
					{"gated.admitted", "{operation}", nil, s.Admitted},
					{"gated.rejected", "{operation}", []attribute.KeyValue{RejectReasonKey.String("full")}, s.RejectedFull},
					{"gated.rejected", "{operation}", []attribute.KeyValue{RejectReasonKey.String("timeout")}, s.RejectedTimeout},
					{"gated.rejected", "{operation}", []attribute.KeyValue{RejectReasonKey.String("displaced")}, s.RejectedDisplaced},
					{"gated.canceled", "{operation}", nil, s.Canceled},
					{"gated.concurrent.limit", "{operation}", nil, int64(s.Concurrent)},
					{"gated.queue.limit", "{operation}", nil, int64(s.Queue)},
				} {
					attrs := append([]attribute.KeyValue{pool, wl}, tc.attrs...)
					if got := value(t, pts, tc.name, tc.unit, attrs...); got != tc.want {
						t.Errorf("%s %v = %d, WorkloadStats says %d", tc.name, attrs, got, tc.want)
					}
				}
				refusals += s.RejectedFull + s.RejectedTimeout + s.RejectedDisplaced
				if s.Admitted == 0 {
					t.Errorf("workload %s admitted nothing", name)
				}
			}
			if refusals != int64(refused) {
				t.Errorf("the gates counted %d refusals, the callers saw %d", refusals, refused)
			}
			if got := value(t, pts, "gated.connect.errors", "{attempt}", pool); got != 0 {
				t.Errorf("gated.connect.errors = %d on a healthy server", got)
			}
		})
	}
}

// TestTraceEventsOnTheOperationsSpan: with a recording span in the operation's context, the
// Observer adds gated.admitted (workload, wait) to it; a refusal by the batch gate adds
// gated.rejected with its workload and reason as event and span attributes; an unknown commit
// records the error and marks the span as failed. Detached by Unregister, it adds nothing more.
func TestTraceEventsOnTheOperationsSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	tracer := tp.Tracer("test")

	fd := fakedb.New()
	db, c := obstest.OpenWith(t, "gate_driver="+fd.Register()+" gate_max_conns=2 gate_concurrent=1 gate_queue=0 gate_workloads=batch:1:0", nil)
	obs, err := NewObserver(WithMeterProvider(sdkmetric.NewMeterProvider()))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := obs.Register(c)
	if err != nil {
		t.Fatal(err)
	}

	ctx, span := tracer.Start(context.Background(), "handler")
	if _, err := db.ExecContext(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	held := make(chan error, 1)
	bctx := gated.WithWorkload(context.Background(), "batch")
	go func() { _, err := db.ExecContext(bctx, "BLOCK b"); held <- err }()
	if err := fd.WaitBlocked(context.Background(), "b", 1); err != nil {
		t.Fatal(err)
	}
	_, err = db.ExecContext(gated.WithWorkload(ctx, "batch"), "SELECT 1")
	var rejected *gated.RejectedError
	if !errors.As(err, &rejected) || rejected.Workload != "batch" || rejected.Reason != gated.RejectFull {
		t.Fatalf("got %v, want the batch gate's RejectedError (full)", err)
	}
	fd.Release("b")
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	// ErrCommitUnknown, as gated reports it.
	obs.Observe(gated.Event{Kind: gated.EventCommitUnknown, Workload: "default", Context: ctx,
		Err: fmt.Errorf("%w: EOF", gated.ErrCommitUnknown)})
	span.End()

	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans ended, want the handler's only (events, not child spans)", len(spans))
	}
	got := spans[0]
	events := map[string]attribute.Set{}
	for _, e := range got.Events() {
		events[e.Name] = attribute.NewSet(e.Attributes...)
	}
	if a, ok := events[EventAdmitted]; !ok {
		t.Errorf("no %s event; events %v", EventAdmitted, got.Events())
	} else if v, _ := a.Value(WorkloadKey); v.AsString() != "default" {
		t.Errorf("%s workload = %v", EventAdmitted, v)
	} else if w, ok := a.Value(WaitKey); !ok || w.AsFloat64() < 0 {
		t.Errorf("%s wait = %v", EventAdmitted, w)
	}
	if a, ok := events[EventRejected]; !ok {
		t.Errorf("no %s event", EventRejected)
	} else if v, _ := a.Value(WorkloadKey); v.AsString() != "batch" {
		t.Errorf("%s workload = %v", EventRejected, v)
	} else if r, _ := a.Value(RejectReasonKey); r.AsString() != "full" {
		t.Errorf("%s reason = %v", EventRejected, r)
	}
	attrs := attribute.NewSet(got.Attributes()...)
	if r, _ := attrs.Value(RejectReasonKey); r.AsString() != "full" {
		t.Errorf("span attribute %s = %v", RejectReasonKey, r)
	}
	if _, ok := events[EventCommitUnknown]; !ok {
		t.Errorf("no %s event", EventCommitUnknown)
	}
	if _, ok := events["exception"]; !ok {
		t.Error("the unknown commit's error is not recorded on the span")
	}
	if got.Status().Code != codes.Error {
		t.Errorf("span status = %v, want Error", got.Status())
	}

	// Unregistered: detached.
	if err := reg.Unregister(); err != nil {
		t.Fatal(err)
	}
	ctx2, span2 := tracer.Start(context.Background(), "after")
	if _, err := db.ExecContext(ctx2, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	span2.End()
	if evs := rec.Ended()[1].Events(); len(evs) != 0 {
		t.Errorf("after Unregister the span got events %v", evs)
	}
}

// TestTraceEventOfEveryRefusalReason: each refusal event the gate emits (a *gated.RejectedError
// in Err) adds gated.rejected to the operation's span with the reason of its kind, as event and
// span attributes, beside the refusing workload.
func TestTraceEventOfEveryRefusalReason(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	tracer := tp.Tracer("test")
	obs, err := NewObserver(WithMeterProvider(sdkmetric.NewMeterProvider()))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		kind   gated.EventKind
		reason gated.RejectReason
	}{
		{gated.EventRejectedFull, gated.RejectFull},
		{gated.EventRejectedTimeout, gated.RejectTimeout},
		{gated.EventRejectedDisplaced, gated.RejectDisplaced},
	} {
		t.Run(tc.kind.String(), func(t *testing.T) {
			ctx, span := tracer.Start(context.Background(), "handler")
			obs.Observe(gated.Event{Kind: tc.kind, Workload: "batch", Context: ctx,
				Err: &gated.RejectedError{Workload: "batch", Reason: tc.reason}})
			span.End()
			spans := rec.Ended()
			got := spans[len(spans)-1]
			var events []string
			for _, e := range got.Events() {
				events = append(events, e.Name)
				if e.Name != EventRejected {
					continue
				}
				a := attribute.NewSet(e.Attributes...)
				if r, _ := a.Value(RejectReasonKey); r.AsString() != tc.reason.String() {
					t.Errorf("%s reason = %q, want %q", EventRejected, r.AsString(), tc.reason)
				}
				if w, _ := a.Value(WorkloadKey); w.AsString() != "batch" {
					t.Errorf("%s workload = %q, want batch", EventRejected, w.AsString())
				}
			}
			if len(events) != 1 || events[0] != EventRejected {
				t.Fatalf("span events %q, want one %s", events, EventRejected)
			}
			attrs := attribute.NewSet(got.Attributes()...)
			if r, _ := attrs.Value(RejectReasonKey); r.AsString() != tc.reason.String() {
				t.Errorf("span attribute %s = %q, want %q", RejectReasonKey, r.AsString(), tc.reason)
			}
		})
	}
}

// TestNoSpanNoAllocation: an Observer registered on a Connector adds no allocation per
// operation when the context has no span, and none per event.
func TestNoSpanNoAllocation(t *testing.T) {
	allocs := func(attached bool) float64 {
		db, c, _ := obstest.OpenFake(t, "gate_max_conns=2", nil)
		if attached {
			register(t, c)
		}
		ctx := context.Background()
		var v int
		db.QueryRowContext(ctx, "SELECT 1").Scan(&v) // the attributes and data points are made once
		return testing.AllocsPerRun(500, func() {
			if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&v); err != nil {
				t.Fatal(err)
			}
		})
	}
	without, with := allocs(false), allocs(true)
	if with != without {
		t.Errorf("QueryRowContext allocates %v times with gatedotel registered, %v without", with, without)
	}
	obs, err := NewObserver(WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))))
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []gated.EventKind{gated.EventAdmitted, gated.EventRejectedFull, gated.EventRejectedDisplaced, gated.EventCanceled, gated.EventHold} {
		e := gated.Event{Kind: kind, Workload: "default", Context: context.Background(), Err: gated.ErrAdmissionFull}
		obs.Observe(e)
		if a := testing.AllocsPerRun(1000, func() { obs.Observe(e) }); a != 0 {
			t.Errorf("Observe(%v) without a span allocates %v times", kind, a)
		}
	}
}
