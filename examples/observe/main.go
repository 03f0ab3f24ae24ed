// Command observe is a small HTTP service on a gated *sql.DB whose gate can be watched: it
// serves its metrics for Prometheus at /metrics (docs/operations.md says what each means and
// which alerts to set) and logs connection failures, unknown commits and a
// summary of refusals at most once per second.
//
//	DATABASE_URL='postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable' go run . -addr 127.0.0.1:8080
//	curl 'http://127.0.0.1:8080/work?sleep=0.01'
//	curl http://127.0.0.1:8080/metrics
//
// GET /work runs one transaction; its query parameters make it do what a real service's
// requests do under load:
//
//	sleep=0.05              seconds of pg_sleep: the query's work
//	lock=42                 take advisory lock 42 in the transaction (a hot row)
//	timeout=200ms           the request's deadline
//	statement_timeout=50ms  SET LOCAL statement_timeout
//	lock_timeout=50ms       SET LOCAL lock_timeout
//
// It answers 200, 503 when the gate refuses (gatedhttp.Rejecter: a Retry-After estimated from
// the state of the gate that refused, and a body that says the service is overloaded, not the
// error), 504 when the deadline passed, and 500 with the error otherwise. The gate's settings come from the DSN's
// gate_ keys; without any, a small gate (B=2, Q=2, 250 ms wait) makes overload easy to see.
//
// examples/observe is a module of its own because it imports gatedprom (client_golang), which
// the root module must not require.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gatedsql/gated"
	"github.com/gatedsql/gated/gatedhttp"
	"github.com/gatedsql/gated/gatedprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// defaultGate is added to a DSN without gate_ keys.
const defaultGate = "gate_max_conns=4&gate_concurrent=2&gate_queue=2&gate_queue_wait=250ms"

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	flag.Parse()
	dsn := os.Getenv("DATABASE_URL")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	if !strings.Contains(dsn, "gate_") {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		dsn += sep + defaultGate
	}
	svc, err := newService(dsn, slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if err != nil {
		log.Fatal(err)
	}
	defer svc.Close()
	log.Printf("listening on http://%s (GET /work, GET /metrics)", *addr)
	log.Fatal(http.ListenAndServe(*addr, svc.Handler()))
}

// A service is the example's HTTP service: a gated DB, the registry its metrics are in and the
// Rejecter that answers refusals.
type service struct {
	db  *sql.DB
	c   *gated.Connector
	reg *prometheus.Registry
	rj  *gatedhttp.Rejecter
}

// newService opens dsn through gated with a logger attached, and registers its metrics: the
// collector attaches the Observer of its histograms itself. (A service without a Logger needs
// no Config at all: sql.Open("gated", dsn), gated.FromDB, gatedprom.NewCollector.)
func newService(dsn string, logger *slog.Logger) (*service, error) {
	cfg, err := gated.ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	cfg.Logger = logger
	c, err := gated.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(gatedprom.NewCollector(c, gatedprom.WithDatabase("app")))
	return &service{db: gated.OpenDB(c), c: c, reg: reg, rj: gatedhttp.NewRejecter(c)}, nil
}

// Handler serves /work and /metrics.
func (s *service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /work", s.work)
	return mux
}

// Close closes the database.
func (s *service) Close() error { return s.db.Close() }

func (s *service) work(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ctx := r.Context()
	if d, ok := duration(w, q.Get("timeout")); !ok {
		return
	} else if d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	var settings []string
	for _, key := range []string{"statement_timeout", "lock_timeout"} {
		d, ok := duration(w, q.Get(key))
		if !ok {
			return
		}
		if d > 0 {
			settings = append(settings, fmt.Sprintf("SET LOCAL %s = %d", key, d.Milliseconds()))
		}
	}
	err := s.transaction(ctx, settings, q.Get("lock"), q.Get("sleep"))
	switch {
	case err == nil:
		fmt.Fprintln(w, "ok")
	case s.rj.WriteRejection(w, err): // 503 with the refusing gate's Retry-After
	case errors.Is(err, context.DeadlineExceeded):
		http.Error(w, err.Error(), http.StatusGatewayTimeout)
	default:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

// transaction runs the work of one request: BEGIN (which passes the gate), the SET LOCALs, the
// advisory lock, the sleep, COMMIT.
func (s *service) transaction(ctx context.Context, settings []string, lock, sleep string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, set := range settings {
		if _, err := tx.ExecContext(ctx, set); err != nil {
			return err
		}
	}
	if lock != "" {
		if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1::bigint)", lock); err != nil {
			return err
		}
	}
	secs, _ := strconv.ParseFloat(sleep, 64)
	if _, err := tx.ExecContext(ctx, "SELECT pg_sleep($1::float8)", secs); err != nil {
		return err
	}
	return tx.Commit()
}

// duration parses a Go duration parameter ("" is 0), answering 400 when it is malformed.
func duration(w http.ResponseWriter, v string) (time.Duration, bool) {
	if v == "" {
		return 0, true
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		http.Error(w, "bad duration "+strconv.Quote(v), http.StatusBadRequest)
		return 0, false
	}
	return d, true
}
