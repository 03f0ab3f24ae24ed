package main

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/gatedsql/gated"
	"github.com/gatedsql/gated/gatedotel"
	"github.com/gatedsql/gated/gatedprom"
	"github.com/prometheus/client_golang/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// The values of -observe: what is attached to the gated contender in the overhead cells.
const (
	observeNone    = ""        // nothing: gated as sql.Open makes it
	observeMetrics = "metrics" // gatedprom's collector and gatedotel's Observer, registered
	observeTraces  = "traces"  // the same, and every operation of every contender in a sampled span
)

// observation is what -observe attached, undone by close.
type observation struct {
	tracer trace.Tracer // nil unless observeTraces
	close  func()
}

// attachObservers attaches what mode names to the gated DB: the collector of gatedprom in a
// registry of its own and gatedotel's Observer on a MeterProvider with a manual reader (both
// attach their Observers to the Connector, as they do for a service), and for observeTraces a
// TracerProvider that samples everything and exports to nowhere, whose tracer wrapOps uses.
func attachObservers(mode string, db *sql.DB) (*observation, error) {
	if mode == observeNone {
		return &observation{close: func() {}}, nil
	}
	c, ok := gated.FromDB(db)
	if !ok {
		return nil, fmt.Errorf("-observe: the gated contender is not a gated DB")
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(gatedprom.NewCollector(c)); err != nil {
		return nil, err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	obs, err := gatedotel.NewObserver(gatedotel.WithMeterProvider(mp))
	if err != nil {
		return nil, err
	}
	oreg, err := obs.Register(c)
	if err != nil {
		return nil, err
	}
	o := &observation{close: func() {
		oreg.Unregister()
		mp.Shutdown(context.Background())
	}}
	if mode == observeTraces {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(discardSpans{}))
		o.tracer = tp.Tracer("gatedbench")
		closeMetrics := o.close
		o.close = func() {
			tp.Shutdown(context.Background())
			closeMetrics()
		}
	}
	return o, nil
}

// wrapOps runs every op in a span of its own when o has a tracer, so that every contender pays
// for the span and gated's extra is what it adds to it.
func (o *observation) wrapOps(ops map[string]op) map[string]op {
	if o.tracer == nil {
		return ops
	}
	out := make(map[string]op, len(ops))
	for name, f := range ops {
		out[name] = func(ctx context.Context, worker int) error {
			ctx, span := o.tracer.Start(ctx, name)
			defer span.End()
			return f(ctx, worker)
		}
	}
	return out
}

// discardSpans is a span exporter that drops every span.
type discardSpans struct{}

func (discardSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardSpans) Shutdown(context.Context) error                             { return nil }
