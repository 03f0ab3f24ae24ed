package gatedotel

import (
	"context"
	"testing"
	"time"

	"github.com/gatedsql/gated"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// BenchmarkWaitOnSpan compares the two ways to show the wait for a permit in a trace, on a
// sampled span exported synchronously to an exporter that drops it: the
// Observer's span event (what gatedotel does), and a child span from arrival to the permit.
// Without a span the Observer's cost is the metric's alone.
func BenchmarkWaitOnSpan(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(discard{}))
	defer tp.Shutdown(context.Background())
	tracer := tp.Tracer("bench")
	obs, err := NewObserver(WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))))
	if err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B, each func(ctx context.Context)) {
		b.ReportAllocs()
		for b.Loop() {
			ctx, span := tracer.Start(context.Background(), "op")
			each(ctx)
			span.End()
		}
	}
	b.Run("span-only", func(b *testing.B) { run(b, func(context.Context) {}) })
	b.Run("event", func(b *testing.B) {
		run(b, func(ctx context.Context) {
			obs.Observe(gated.Event{Kind: gated.EventAdmitted, Workload: "default", Duration: time.Millisecond, Context: ctx})
		})
	})
	b.Run("child-span", func(b *testing.B) {
		run(b, func(ctx context.Context) {
			now := time.Now()
			_, child := tracer.Start(ctx, "gated.wait", trace.WithTimestamp(now.Add(-time.Millisecond)),
				trace.WithAttributes(WorkloadKey.String("default")))
			child.End(trace.WithTimestamp(now))
		})
	})
	b.Run("no-span", func(b *testing.B) {
		b.ReportAllocs()
		ctx := context.Background()
		for b.Loop() {
			obs.Observe(gated.Event{Kind: gated.EventAdmitted, Workload: "default", Duration: time.Millisecond, Context: ctx})
		}
	})
}

// discard is a span exporter that drops every span.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }
