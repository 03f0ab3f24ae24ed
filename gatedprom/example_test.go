package gatedprom_test

import (
	"database/sql"
	"fmt"
	"log"
	"strings"

	"github.com/gatedsql/gated"
	"github.com/gatedsql/gated/gatedprom"
	"github.com/prometheus/client_golang/prometheus"
)

// NewCollector exports a Connector's Stats, every workload's, and the histograms of the
// Observer it attaches itself, to Prometheus: a *sql.DB from sql.Open and its DSN is all it
// needs. Every gate metric has the label workload; WithDatabase tells the Connectors of one
// process apart.
func ExampleNewCollector() {
	db, err := sql.Open("gated", "postgres://app@db:5432/shop?sslmode=disable&gate_max_conns=24&gate_concurrent=16&gate_queue=8&gate_workloads=batch:4:2")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	c, _ := gated.FromDB(db)

	reg := prometheus.NewRegistry() // or prometheus.MustRegister, for the default registry
	reg.MustRegister(gatedprom.NewCollector(c, gatedprom.WithDatabase("shop")))

	families, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range families {
		switch f.GetName() {
		case "gated_concurrent_limit", "gated_queue_limit", "gated_connections_max":
			for _, m := range f.GetMetric() {
				var labels []string
				for _, l := range m.GetLabel() {
					labels = append(labels, l.GetName()+"="+l.GetValue())
				}
				fmt.Printf("%s{%s} %v\n", f.GetName(), strings.Join(labels, ","), m.GetGauge().GetValue())
			}
		}
	}
	// Output:
	// gated_concurrent_limit{database=shop,workload=batch} 4
	// gated_concurrent_limit{database=shop,workload=default} 16
	// gated_connections_max{database=shop} 24
	// gated_queue_limit{database=shop,workload=batch} 2
	// gated_queue_limit{database=shop,workload=default} 8
}
