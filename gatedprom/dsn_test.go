package gatedprom

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gatedsql/gated/internal/obstest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// gateMetrics are every metric with the workload label.
var gateMetrics = []string{
	"gated_running", "gated_waiting", "gated_concurrent_limit", "gated_queue_limit",
	"gated_admitted_total", "gated_rejected_total", "gated_canceled_total",
	"gated_server_timeouts_total", "gated_commit_unknown_total",
	"gated_wait_seconds", "gated_connect_seconds", "gated_hold_seconds", "gated_statement_seconds",
}

var (
	pgDSN = obstest.PGDSN
	load  = obstest.Load
)

// scrape fetches url and parses it as Prometheus' text format.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing the scrape: %v", err)
	}
	return fams
}

// TestDSNOnlyServiceExportsEveryWorkload is a service configured by its DSN alone:
// sql.Open("gated", dsn) with gate_workloads=batch:1:3, gated.FromDB, NewCollector, a real
// load on PostgreSQL and a scrape over HTTP. Every gate metric is there for default and batch,
// each histogram counts its workload's admitted operations, and the counters are
// WorkloadStats' exactly.
func TestDSNOnlyServiceExportsEveryWorkload(t *testing.T) {
	for _, drv := range []string{"pgx", "postgres"} {
		t.Run(drv, func(t *testing.T) {
			db, c := obstest.OpenDSN(t, pgDSN(t, drv, "gate_max_conns=4&gate_concurrent=2&gate_queue=8&gate_queue_wait=5s&gate_workloads=batch:1:3:5s"))
			reg := prometheus.NewRegistry()
			reg.MustRegister(NewCollector(c, WithDatabase("shop")))
			srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
			defer srv.Close()

			refused := load(t, db, 60)
			waitFor(t, "every gate quiet", func() bool { return obstest.Quiet(c) })
			fams := scrape(t, srv.URL)

			for _, wl := range c.Workloads() {
				s, _ := c.WorkloadStats(wl)
				for _, name := range gateMetrics {
					metric(t, fams, name, "workload", wl, "database", "shop")
				}
				for _, name := range []string{"gated_wait_seconds", "gated_connect_seconds", "gated_hold_seconds"} {
					if n := metric(t, fams, name, "workload", wl).GetHistogram().GetSampleCount(); int64(n) != s.Admitted {
						t.Errorf("%s{workload=%q} count = %d, want %d admitted", name, wl, n, s.Admitted)
					}
				}
				if n := metric(t, fams, "gated_statement_seconds", "workload", wl).GetHistogram().GetSampleCount(); int64(n) < 3*s.Admitted {
					t.Errorf("gated_statement_seconds{workload=%q} count = %d, want at least 3 per admitted transaction (%d)", wl, n, s.Admitted)
				}
				for _, tc := range []struct {
					name   string
					labels []string
					want   int64
				}{
					{"gated_admitted_total", nil, s.Admitted},
					{"gated_rejected_total", []string{"reason", "full"}, s.RejectedFull},
					{"gated_rejected_total", []string{"reason", "timeout"}, s.RejectedTimeout},
					{"gated_rejected_total", []string{"reason", "displaced"}, s.RejectedDisplaced},
					{"gated_canceled_total", nil, s.Canceled},
					{"gated_commit_unknown_total", nil, s.CommitUnknown},
				} {
					labels := append([]string{"workload", wl}, tc.labels...)
					if got := metric(t, fams, tc.name, labels...).GetCounter().GetValue(); got != float64(tc.want) {
						t.Errorf("%s%v = %v, WorkloadStats says %d", tc.name, labels, got, tc.want)
					}
				}
				for _, tc := range []struct {
					name string
					want int
				}{{"gated_concurrent_limit", s.Concurrent}, {"gated_queue_limit", s.Queue}, {"gated_running", 0}, {"gated_waiting", 0}} {
					if got := metric(t, fams, tc.name, "workload", wl).GetGauge().GetValue(); got != float64(tc.want) {
						t.Errorf("%s{workload=%q} = %v, want %d", tc.name, wl, got, tc.want)
					}
				}
			}
			batch, _ := c.WorkloadStats("batch")
			def := c.Stats()
			if batch.Admitted == 0 || def.Admitted == 0 {
				t.Errorf("admitted: default %d, batch %d; the load reached both gates", def.Admitted, batch.Admitted)
			}
			if got := def.RejectedFull + def.RejectedTimeout + def.RejectedDisplaced + batch.RejectedFull + batch.RejectedTimeout + batch.RejectedDisplaced; got != int64(refused) {
				t.Errorf("the gates counted %d refusals, the callers saw %d", got, refused)
			}
			p := def.Pool
			if got := metric(t, fams, "gated_connections_opened_total").GetCounter().GetValue(); got != float64(p.Opened) {
				t.Errorf("gated_connections_opened_total = %v, Stats says %d", got, p.Opened)
			}
			if got := metric(t, fams, "gated_connect_errors_total").GetCounter().GetValue(); got != 0 {
				t.Errorf("gated_connect_errors_total = %v on a healthy server", got)
			}
			t.Logf("default %+v\nbatch %+v", def, batch)
		})
	}
}
