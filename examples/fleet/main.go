// Command fleet is a small service to run several times against one database. Its budgets are
// the whole fleet's (gate_fleet=on): every running instance with the same gate_name takes its
// share of gate_max_conns, gate_concurrent and gate_queue, and the shares move as instances
// start, stop or die, so that the fleet as a whole never opens more than gate_max_conns working
// connections, and one lease connection per instance, however many instances run.
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable go run ./examples/fleet -addr 127.0.0.1:8081 &
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable go run ./examples/fleet -addr 127.0.0.1:8082 &
//	curl 127.0.0.1:8081/stats   # {"members":2,"conns":10,...}
//
// GET /work runs one query through the gate and answers 503 when the gate refuses it; GET /stats
// shows the instance's share. With -load n it also runs n goroutines of its own that call the
// query without pause, to show the fleet under overload. It logs every share change. SIGINT or
// SIGTERM closes it gracefully: its share is given back at once; after a kill -9 the others get
// it back when its lease expires (gate_fleet_ttl).
//
// DATABASE_URL may carry gate_ keys of its own, which replace the defaults below (a private
// fleet for tests: a shorter gate_fleet_ttl, another gate_name).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gatedsql/gated"
)

// The fleet's totals: 20 connections, 16 operations running and 16 waiting, for all instances
// together. Each instance keeps one more connection for its lease, outside the total.
const fleetParams = "gate_fleet=on&gate_name=fleet-example&gate_max_conns=20&gate_concurrent=16" +
	"&gate_queue=16&gate_queue_wait=20ms&gate_fleet_ttl=15s&gate_fleet_refresh=5s"

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "HTTP address to listen on")
	load := flag.Int("load", 0, "goroutines calling the query without pause")
	query := flag.String("query", "SELECT pg_sleep(0.005)", "the query each call runs")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv("DATABASE_URL"), *addr, *load, *query); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

// counts are what the instance served and refused.
type counts struct{ served, refused, failed atomic.Int64 }

func run(ctx context.Context, base, addr string, load int, query string) error {
	if base == "" {
		return errors.New("set DATABASE_URL to a PostgreSQL URL")
	}
	dsn, err := withDefaults(base, fleetParams)
	if err != nil {
		return err
	}
	cfg, err := gated.ParseDSN(dsn)
	if err != nil {
		return err
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	c, err := gated.NewConnector(cfg)
	if err != nil {
		return err
	}
	db := gated.OpenDB(c)
	defer db.Close() // leaves the fleet: the share is free for the others at once

	var n counts
	call := func(ctx context.Context) error {
		_, err := db.ExecContext(ctx, query)
		switch {
		case err == nil:
			n.served.Add(1)
		case gated.IsRejected(err):
			n.refused.Add(1)
		case ctx.Err() == nil:
			n.failed.Add(1)
			cfg.Logger.Warn("fleet: query failed", "err", err)
		}
		return err
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /work", func(w http.ResponseWriter, r *http.Request) {
		err := call(r.Context())
		if gated.IsRejected(err) {
			http.Error(w, "overloaded, try again", http.StatusServiceUnavailable)
			return
		}
		if err != nil {
			http.Error(w, "internal error", http.StatusInternalServerError)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		s := c.Stats()
		json.NewEncoder(w).Encode(status{
			Members: s.Fleet.Members, Conns: s.Fleet.Conns, Seated: s.Fleet.Seated,
			Concurrent: s.Concurrent, Queue: s.Queue, PoolMax: s.Pool.MaxConns, Open: s.Pool.Open,
			Served: n.served.Load(), Refused: n.refused.Load(), Failed: n.failed.Load(),
		})
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Printf("listening on %s\n", ln.Addr()) // the first line of output: tests read the port from it
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)

	var wg sync.WaitGroup
	for range load {
		wg.Go(func() {
			for ctx.Err() == nil {
				if err := call(ctx); gated.IsRejected(err) {
					// A refused caller backs off a little, as a client would: one that came back
					// at once would spend the machine's CPU on refusals, not the database's work.
					time.Sleep(10 * time.Millisecond)
				}
			}
		})
	}
	<-ctx.Done()
	wg.Wait()
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(shutdown)
}

// status is what GET /stats answers.
type status struct {
	Members    int   `json:"members"`    // live instances of the fleet
	Conns      int   `json:"conns"`      // this instance's share of gate_max_conns, its working connections (its lease connection is one more)
	Seated     bool  `json:"seated"`     // it holds a share
	Concurrent int   `json:"concurrent"` // its share of gate_concurrent
	Queue      int   `json:"queue"`      // its share of gate_queue
	PoolMax    int   `json:"pool_max"`   // physical connections its pool may open: conns
	Open       int   `json:"open"`       // physical connections open now
	Served     int64 `json:"served"`     // calls that succeeded
	Refused    int64 `json:"refused"`    // calls the gate refused
	Failed     int64 `json:"failed"`     // calls that failed otherwise
}

// withDefaults adds to the URL base each key of params it does not set itself.
func withDefaults(base, params string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", errors.New("DATABASE_URL is not a URL")
	}
	q := u.Query()
	defaults, err := url.ParseQuery(params)
	if err != nil {
		return "", err
	}
	for k, v := range defaults {
		if !q.Has(k) {
			q[k] = v
		}
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}
