package gatedotel_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"

	"github.com/gatedsql/gated"
	"github.com/gatedsql/gated/gatedotel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Register attaches the Observer to a Connector (here one sql.Open made from a DSN) and adds
// the instruments read from every workload's Stats at every collection. A ManualReader stands
// in here for an exporter.
func ExampleObserver_Register() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())

	db, err := sql.Open("gated", "postgres://app@db:5432/shop?sslmode=disable&gate_max_conns=24&gate_concurrent=16&gate_queue=8&gate_workloads=batch:4:2")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	c, _ := gated.FromDB(db)

	obs, err := gatedotel.NewObserver(gatedotel.WithMeterProvider(mp), gatedotel.WithPoolName("shop"))
	if err != nil {
		log.Fatal(err)
	}
	reg, err := obs.Register(c)
	if err != nil {
		log.Fatal(err)
	}
	defer reg.Unregister()

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		log.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch m.Name {
			case "db.client.connection.max", "gated.concurrent.limit", "gated.queue.limit":
				for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
					wl, _ := p.Attributes.Value(gatedotel.WorkloadKey)
					fmt.Println(m.Name, wl.AsString(), p.Value)
				}
			}
		}
	}
	// Unordered output:
	// db.client.connection.max  24
	// gated.concurrent.limit default 16
	// gated.concurrent.limit batch 4
	// gated.queue.limit default 8
	// gated.queue.limit batch 2
}
