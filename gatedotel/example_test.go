package gatedotel_test

import (
	"context"
	"fmt"
	"log"

	"github.com/gatedsql/gated"
	"github.com/gatedsql/gated/gatedotel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// An Observer records the durations as histograms; Register adds the instruments read from
// Stats at every collection. A ManualReader stands in here for an exporter.
func ExampleObserver_Register() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())

	obs, err := gatedotel.NewObserver(gatedotel.WithMeterProvider(mp), gatedotel.WithPoolName("shop"))
	if err != nil {
		log.Fatal(err)
	}
	cfg, err := gated.ParseDSN("postgres://app@db:5432/shop?sslmode=disable&gate_max_conns=24&gate_concurrent=16&gate_queue=8")
	if err != nil {
		log.Fatal(err)
	}
	cfg.Observer = obs
	c, err := gated.NewConnector(cfg)
	if err != nil {
		log.Fatal(err)
	}
	db := gated.OpenDB(c)
	defer db.Close()
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
					fmt.Println(m.Name, p.Value)
				}
			}
		}
	}
	// Output:
	// db.client.connection.max 24
	// gated.concurrent.limit 16
	// gated.queue.limit 8
}
