package gatedhttp_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sync/atomic"

	"github.com/gatedsql/gated"
	"github.com/gatedsql/gated/gatedhttp"
)

// loadCart stands for a handler's database work; here the gate refuses it, as it does under
// overload.
func loadCart(ctx context.Context) error {
	return fmt.Errorf("load cart: %w", gated.ErrAdmissionFull)
}

// A Rejecter answers the gate's refusals with 503 and a Retry-After derived from the gate's state
// (1 s here: the gate is empty, the refusal was a burst); any other error is left to the handler.
func ExampleRejecter() {
	db, err := gated.Open("postgres://app@db:5432/shop?sslmode=disable&gate_concurrent=16&gate_queue=8")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	c, _ := gated.FromDB(db)
	rj := gatedhttp.NewRejecter(c) // one per gated *sql.DB, shared by its handlers

	cart := func(w http.ResponseWriter, r *http.Request) {
		if err := loadCart(r.Context()); err != nil {
			if rj.WriteRejection(w, err) {
				return
			}
			http.Error(w, "internal error", http.StatusInternalServerError)
			return
		}
		fmt.Fprintln(w, "cart")
	}

	rec := httptest.NewRecorder()
	cart(rec, httptest.NewRequest("GET", "/cart", nil))
	fmt.Println(rec.Code, "Retry-After:", rec.Header().Get("Retry-After"))
	fmt.Print(rec.Body.String())
	// Output:
	// 503 Retry-After: 1
	// service overloaded: the database is busy, retry later
}

// A RetryTransport retries a refused GET after the answer's Retry-After, within the transport's
// retry budget. The service here refuses the first request, as a gated service under a burst
// does, and serves the second.
func ExampleNewRetryTransport() {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			gatedhttp.WriteRejection(w, gated.ErrAdmissionFull) // 503, Retry-After: 1
			return
		}
		fmt.Fprintln(w, "report ready")
	}))
	defer srv.Close()

	rt, err := gatedhttp.NewRetryTransport(srv.Client().Transport, gatedhttp.RetryOptions{})
	if err != nil {
		log.Fatal(err)
	}
	client := &http.Client{Transport: rt} // one transport per called service
	resp, err := client.Get(srv.URL + "/report")
	if err != nil {
		log.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()

	fmt.Print(resp.StatusCode, " ", string(body))
	s := rt.Stats()
	fmt.Println("requests:", s.Requests, "attempts:", s.Attempts, "retries:", s.Retries)
	// Output:
	// 200 report ready
	// requests: 1 attempts: 2 retries: 1
}
