package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gatedsql/gated"
	"github.com/gatedsql/gated/gatedhttp"
	"github.com/gatedsql/gated/internal/pgtest"
	"github.com/gatedsql/gated/internal/testwait"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Cleanup()
	os.Exit(code)
}

var waitFor = testwait.For

var lockKeys atomic.Int64

// get requests path from the test server and returns the status code.
func get(t *testing.T, base, path string) int {
	t.Helper()
	resp, err := http.Get(base + path)
	if err != nil {
		t.Errorf("GET %s: %v", path, err)
		return 0
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// TestMetricsMatchStatsAfterEveryKindOfOutcome starts the example's server on a gate with one
// execution permit and one place in the queue, drives requests that are admitted, refused both
// ways, canceled while waiting and ended by the server's statement and lock timeouts, scrapes
// /metrics over HTTP and checks every metric of the documented list (docs/operations.md) against
// Stats().
func TestMetricsMatchStatsAfterEveryKindOfOutcome(t *testing.T) {
	base := pgtest.URL(t)
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	svc, err := newService(base+sep+"gate_max_conns=2&gate_concurrent=1&gate_queue=1&gate_queue_wait=1s",
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	ts := httptest.NewServer(svc.Handler())
	defer ts.Close()

	admin, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ctx := context.Background()
	lockConn, err := admin.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lockConn.Close()
	// An advisory lock key of this test alone (process id and a counter).
	key := int64(os.Getpid())<<20 | lockKeys.Add(1)
	lockPath := fmt.Sprintf("/work?lock=%d", key)

	for range 3 {
		if code := get(t, ts.URL, "/work?sleep=0.001"); code != 200 {
			t.Fatalf("/work: %d", code)
		}
	}
	if _, err := lockConn.ExecContext(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
		t.Fatal(err)
	}
	// The server's lock_timeout: 55P03.
	if code := get(t, ts.URL, lockPath+"&lock_timeout=50ms"); code != 500 {
		t.Errorf("lock timeout: %d, want 500", code)
	}
	// The server's statement_timeout: 57014.
	if code := get(t, ts.URL, "/work?sleep=5&statement_timeout=50ms"); code != 500 {
		t.Errorf("statement timeout: %d, want 500", code)
	}

	// A request that holds the only execution permit, waiting for the lock.
	holder := make(chan int, 1)
	go func() { holder <- get(t, ts.URL, lockPath) }()
	waitFor(t, "the permit held", func() bool { return svc.c.Stats().Running == 1 })

	// Its deadline ends while it waits for the permit: canceled (504).
	if code := get(t, ts.URL, "/work?timeout=100ms"); code != 504 {
		t.Errorf("canceled wait: %d, want 504", code)
	}
	// One waits (and times out after gate_queue_wait: 503)...
	waiter := make(chan int, 1)
	go func() { waiter <- get(t, ts.URL, "/work") }()
	waitFor(t, "one waiter", func() bool { return svc.c.Stats().Waiting == 1 })
	// ...so B+Q is used up and the next one is refused at once (503).
	if resp, err := http.Get(ts.URL + "/work"); err != nil {
		t.Error(err)
	} else {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); resp.StatusCode != 503 || err != nil || ra < 1 || ra > int(gatedhttp.MaxRetryAfter/time.Second) ||
			strings.Contains(string(body), "gated:") {
			t.Errorf("admission full: %d, Retry-After %q, body %q; want 503 from the Rejecter, without the error's text",
				resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
	}
	if code := <-waiter; code != 503 {
		t.Errorf("admission timeout: %d, want 503", code)
	}
	if _, err := lockConn.ExecContext(ctx, "SELECT pg_advisory_unlock($1)", key); err != nil {
		t.Fatal(err)
	}
	if code := <-holder; code != 200 {
		t.Errorf("lock holder: %d", code)
	}
	waitFor(t, "quiet", func() bool {
		s := svc.c.Stats()
		return s.Running == 0 && s.Waiting == 0 && s.Pool.InUse == 0
	})

	s := svc.c.Stats()
	if s.Admitted != 6 || s.RejectedFull != 1 || s.RejectedTimeout != 1 || s.RejectedDisplaced != 0 || s.Canceled != 1 ||
		s.StatementTimeouts != 1 || s.LockTimeouts != 1 {
		t.Errorf("Stats = %+v, want 6 admitted, none displaced and one of each other outcome", s)
	}

	resp, err := http.Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	checkAgainstStats(t, fams, s)
}

// checkAgainstStats checks every metric named in docs/operations.md: gauges and counters equal to s,
// histograms with one observation per admitted operation (wait, connect, hold).
func checkAgainstStats(t *testing.T, fams map[string]*dto.MetricFamily, s gated.Stats) {
	t.Helper()
	wl := []string{"workload", gated.DefaultWorkload}
	with := func(extra ...string) []string { return append(append([]string{}, wl...), extra...) }
	for _, tc := range []struct {
		name   string
		labels []string
		kind   dto.MetricType
		want   float64
	}{
		{"gated_running", wl, dto.MetricType_GAUGE, float64(s.Running)},
		{"gated_waiting", wl, dto.MetricType_GAUGE, float64(s.Waiting)},
		{"gated_concurrent_limit", wl, dto.MetricType_GAUGE, float64(s.Concurrent)},
		{"gated_queue_limit", wl, dto.MetricType_GAUGE, float64(s.Queue)},
		{"gated_admitted_total", wl, dto.MetricType_COUNTER, float64(s.Admitted)},
		{"gated_rejected_total", with("reason", "full"), dto.MetricType_COUNTER, float64(s.RejectedFull)},
		{"gated_rejected_total", with("reason", "timeout"), dto.MetricType_COUNTER, float64(s.RejectedTimeout)},
		{"gated_rejected_total", with("reason", "displaced"), dto.MetricType_COUNTER, float64(s.RejectedDisplaced)},
		{"gated_canceled_total", wl, dto.MetricType_COUNTER, float64(s.Canceled)},
		{"gated_server_timeouts_total", with("kind", "statement"), dto.MetricType_COUNTER, float64(s.StatementTimeouts)},
		{"gated_server_timeouts_total", with("kind", "lock"), dto.MetricType_COUNTER, float64(s.LockTimeouts)},
		{"gated_commit_unknown_total", wl, dto.MetricType_COUNTER, float64(s.CommitUnknown)},
		{"gated_wait_seconds", wl, dto.MetricType_HISTOGRAM, float64(s.Admitted)},
		{"gated_connect_seconds", wl, dto.MetricType_HISTOGRAM, float64(s.Admitted)},
		{"gated_hold_seconds", wl, dto.MetricType_HISTOGRAM, float64(s.Admitted)},
		{"gated_statement_seconds", wl, dto.MetricType_HISTOGRAM, -1},
		{"gated_connections", []string{"state", "idle"}, dto.MetricType_GAUGE, float64(s.Pool.Idle)},
		{"gated_connections", []string{"state", "in_use"}, dto.MetricType_GAUGE, float64(s.Pool.InUse)},
		{"gated_connections_max", nil, dto.MetricType_GAUGE, float64(s.Pool.MaxConns)},
		{"gated_connections_opened_total", nil, dto.MetricType_COUNTER, float64(s.Pool.Opened)},
		{"gated_connections_closed_total", []string{"reason", "broken"}, dto.MetricType_COUNTER, float64(s.Pool.ClosedBroken)},
		{"gated_connections_closed_total", []string{"reason", "lifetime"}, dto.MetricType_COUNTER, float64(s.Pool.ClosedLifetime)},
		{"gated_connections_closed_total", []string{"reason", "idle_time"}, dto.MetricType_COUNTER, float64(s.Pool.ClosedIdleTime)},
		{"gated_connections_closed_total", []string{"reason", "dead_idle"}, dto.MetricType_COUNTER, float64(s.Pool.ClosedDeadIdle)},
		{"gated_connections_closed_total", []string{"reason", "close"}, dto.MetricType_COUNTER, float64(s.Pool.ClosedByClose)},
		{"gated_connections_closed_total", []string{"reason", "canceled"}, dto.MetricType_COUNTER, float64(s.Pool.ClosedCanceled)},
		{"gated_connect_errors_total", nil, dto.MetricType_COUNTER, float64(s.Pool.ConnectErrors)},
		{"gated_connect_canceled_total", nil, dto.MetricType_COUNTER, float64(s.Pool.ConnectCanceled)},
	} {
		mf := fams[tc.name]
		if mf == nil {
			t.Errorf("%s missing from /metrics", tc.name)
			continue
		}
		if mf.GetType() != tc.kind {
			t.Errorf("%s is a %v, want %v", tc.name, mf.GetType(), tc.kind)
		}
		m := find(mf, append(tc.labels, "database", "app"))
		if m == nil {
			t.Errorf("%s has no series with labels %v", tc.name, tc.labels)
			continue
		}
		var got float64
		switch tc.kind {
		case dto.MetricType_GAUGE:
			got = m.GetGauge().GetValue()
		case dto.MetricType_COUNTER:
			got = m.GetCounter().GetValue()
		case dto.MetricType_HISTOGRAM:
			got = float64(m.GetHistogram().GetSampleCount())
			if tc.want < 0 { // statements: at least BEGIN, one statement and COMMIT/ROLLBACK per admission
				if got < float64(3*s.Admitted) {
					t.Errorf("%s count = %v, want at least %d", tc.name, got, 3*s.Admitted)
				}
				continue
			}
		}
		if got != tc.want {
			t.Errorf("%s%v = %v, Stats says %v", tc.name, tc.labels, got, tc.want)
		}
	}
}

// find returns the metric of mf that has every label pair in labels.
func find(mf *dto.MetricFamily, labels []string) *dto.Metric {
next:
	for _, m := range mf.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			ok := false
			for _, lp := range m.GetLabel() {
				ok = ok || (lp.GetName() == labels[i] && lp.GetValue() == labels[i+1])
			}
			if !ok {
				continue next
			}
		}
		return m
	}
	return nil
}
