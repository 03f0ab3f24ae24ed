// Command http shows gated at the edges of a service: an HTTP service whose gated database
// refuses what it cannot serve with 503 and a Retry-After (gatedhttp.Rejecter), and a load
// generator whose clients retry within a budget (gatedhttp.NewRetryTransport) — compared with
// naive clients that retry every 503 at once, up to 3 attempts.
//
// It needs PostgreSQL in DATABASE_URL:
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable go run ./examples/http
//
// By default it starts the service on 127.0.0.1 and offers it 3× its capacity, first with naive
// clients, then with budgeted ones, and prints what reached the service per logical request and
// the goodput. -mode serve runs only the service (-addr), -mode load only the load generator
// (-url); -rate and -duration shape the load. The service runs SELECT pg_sleep(0.02) behind a
// gate of 8 running and 8 waiting (at most 50 ms), so its capacity is about 400 requests/s.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatedsql/gated"
	"github.com/gatedsql/gated/gatedhttp"
)

// gateParams is the service's gate: P = B = 8 connections, 8 may wait, each at most 50 ms.
const gateParams = "gate_max_conns=8&gate_concurrent=8&gate_queue=8&gate_queue_wait=50ms"

func main() {
	mode := flag.String("mode", "demo", "demo (service and load), serve or load")
	addr := flag.String("addr", "127.0.0.1:8080", "address the service listens on (-mode serve)")
	target := flag.String("url", "http://127.0.0.1:8080/work", "the service's URL (-mode load)")
	rate := flag.Int("rate", 1200, "logical requests per second offered (open loop)")
	duration := flag.Duration("duration", 5*time.Second, "how long each load phase runs")
	flag.Parse()
	if err := run(*mode, *addr, *target, *rate, *duration); err != nil {
		fmt.Fprintln(os.Stderr, "http:", err)
		os.Exit(1)
	}
}

func run(mode, addr, target string, rate int, duration time.Duration) error {
	switch mode {
	case "serve":
		srv, err := newService()
		if err != nil {
			return err
		}
		defer srv.db.Close()
		fmt.Printf("serving http://%s/work\n", addr)
		return http.ListenAndServe(addr, srv)
	case "load":
		for _, client := range []string{"naive", "budget"} {
			printResult(client, offer(target, client, rate, duration))
		}
		return nil
	case "demo":
		srv, err := newService()
		if err != nil {
			return err
		}
		defer srv.db.Close()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		hs := &http.Server{Handler: srv}
		go hs.Serve(l)
		defer hs.Close()
		target = "http://" + l.Addr().String() + "/work"
		fmt.Printf("offering %d requests/s for %v to a service of about 400/s\n", rate, duration)
		for _, client := range []string{"naive", "budget"} {
			printResult(client, offer(target, client, rate, duration))
			time.Sleep(2 * time.Second) // let the previous phase's stragglers finish
		}
		return nil
	}
	return fmt.Errorf("unknown -mode %q (demo, serve or load)", mode)
}

// service answers GET /work with one database operation, and a refusal with 503.
type service struct {
	db *sql.DB
	rj *gatedhttp.Rejecter
}

func newService() (*service, error) {
	dsn := os.Getenv("DATABASE_URL")
	if dsn == "" {
		return nil, errors.New("set DATABASE_URL to a PostgreSQL URL (postgres://...)")
	}
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	db, err := gated.Open(dsn + sep + gateParams)
	if err != nil {
		return nil, err
	}
	c, _ := gated.FromDB(db)
	return &service{db: db, rj: gatedhttp.NewRejecter(c)}, nil
}

func (s *service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/work" {
		http.NotFound(w, r)
		return
	}
	_, err := s.db.ExecContext(r.Context(), "SELECT pg_sleep(0.02)")
	switch {
	case err == nil:
		io.WriteString(w, "ok\n")
	case s.rj.WriteRejection(w, err):
		// 503 with a Retry-After derived from the gate
	default:
		http.Error(w, "database error", http.StatusInternalServerError)
	}
}

// counting counts the attempts that leave the client.
type counting struct {
	base     http.RoundTripper
	attempts atomic.Int64
}

func (c *counting) RoundTrip(r *http.Request) (*http.Response, error) {
	c.attempts.Add(1)
	return c.base.RoundTrip(r)
}

// naive retries every 503 at once, up to 3 attempts in all: what a retry loop without a budget
// does.
type naive struct{ base http.RoundTripper }

func (n naive) RoundTrip(r *http.Request) (*http.Response, error) {
	for attempt := 1; ; attempt++ {
		resp, err := n.base.RoundTrip(r)
		if err != nil || resp.StatusCode != http.StatusServiceUnavailable || attempt == 3 {
			return resp, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

type result struct {
	logical, attempts, ok int64
	duration              time.Duration
}

// offer sends rate logical requests per second to target for duration (open loop: a request
// starts on schedule whether or not earlier ones finished), each with a 2 s deadline, through the
// named client, and waits for all of them.
func offer(target, client string, rate int, duration time.Duration) result {
	count := &counting{base: &http.Transport{MaxIdleConnsPerHost: 512}}
	var rt http.RoundTripper = naive{count}
	if client == "budget" {
		budget, err := gatedhttp.NewRetryTransport(count, gatedhttp.RetryOptions{})
		if err != nil {
			fmt.Fprintln(os.Stderr, "http:", err)
			os.Exit(1)
		}
		rt = budget
	}
	hc := &http.Client{Transport: rt}
	defer hc.CloseIdleConnections()

	var ok atomic.Int64
	var wg sync.WaitGroup
	n := int(duration.Seconds() * float64(rate))
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	for i := range n {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", target, nil)
			resp, err := hc.Do(req)
			if err != nil {
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	return result{logical: int64(n), attempts: count.attempts.Load(), ok: ok.Load(), duration: duration}
}

func printResult(client string, r result) {
	fmt.Printf("%-7s logical %6d  attempts %6d  per request %.2f  goodput %4.0f/s\n",
		client, r.logical, r.attempts, float64(r.attempts)/float64(r.logical), float64(r.ok)/r.duration.Seconds())
}
