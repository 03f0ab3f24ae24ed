package gatedhttp

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gatedsql/gated"
)

// roundTripFunc adapts a function to http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// handlerTransport serves requests in-process with h, as a server would, without a network.
func handlerTransport(h http.Handler) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Body != nil {
			defer r.Body.Close() // a transport closes the request body
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec.Result(), nil
	})
}

// scripted answers attempt n with statuses[n] (the last one repeated), with Retry-After
// retryAfter when it is not empty, and records what it was sent.
type scripted struct {
	statuses   []int
	retryAfter string

	mu     sync.Mutex
	starts []time.Time
	bodies []string
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var b []byte
	if r.Body != nil {
		b, _ = io.ReadAll(r.Body)
	}
	s.mu.Lock()
	n := len(s.starts)
	s.starts = append(s.starts, time.Now())
	s.bodies = append(s.bodies, string(b))
	s.mu.Unlock()
	status := s.statuses[min(n, len(s.statuses)-1)]
	if status != http.StatusOK && s.retryAfter != "" {
		w.Header().Set("Retry-After", s.retryAfter)
	}
	w.WriteHeader(status)
	io.WriteString(w, "answer")
}

func (s *scripted) attempts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.starts)
}

// newRetryTransport is NewRetryTransport for options the test expects to be valid.
func newRetryTransport(t *testing.T, base http.RoundTripper, opts RetryOptions) *RetryTransport {
	t.Helper()
	rt, err := NewRetryTransport(base, opts)
	if err != nil {
		t.Fatalf("NewRetryTransport(%+v): %v", opts, err)
	}
	return rt
}

func TestRetryTransportRetriesOnly503And429(t *testing.T) {
	for _, tc := range []struct {
		status       int
		wantAttempts int
	}{
		{http.StatusServiceUnavailable, 3},
		{http.StatusTooManyRequests, 3},
		{http.StatusInternalServerError, 1},
		{http.StatusBadGateway, 1},
		{http.StatusOK, 1},
	} {
		t.Run(http.StatusText(tc.status), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := &scripted{statuses: []int{tc.status}}
				rt := newRetryTransport(t, handlerTransport(srv), RetryOptions{})
				resp, err := rt.RoundTrip(httptest.NewRequest("GET", "http://svc/x", nil))
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != tc.status || srv.attempts() != tc.wantAttempts {
					t.Errorf("status %d after %d attempts, want %d after %d", resp.StatusCode, srv.attempts(), tc.status, tc.wantAttempts)
				}
			})
		})
	}
}

// TestRetryTransportReplaysOnlyWhatItCan: net/http's rule for replaying a request. An idempotent
// method (GET, HEAD, OPTIONS, TRACE), or any method with an Idempotency-Key or X-Idempotency-Key
// header (present even with a nil value), is retried, with the same body each time, when the body
// can be rebuilt; everything else is sent once, GetBody or not: a 503 does not prove that the
// server did nothing.
func TestRetryTransportReplaysOnlyWhatItCan(t *testing.T) {
	opaque := func() io.Reader { return io.MultiReader(strings.NewReader("payload")) } // no GetBody
	rebuilt := func() io.Reader { return strings.NewReader("payload") }                // GetBody
	for _, tc := range []struct {
		name         string
		method       string
		body         func() io.Reader
		header       http.Header
		wantAttempts int
	}{
		{"POST with GetBody", "POST", rebuilt, nil, 1},
		{"POST with GetBody and Idempotency-Key", "POST", rebuilt, http.Header{"Idempotency-Key": {"k1"}}, 3},
		{"POST with GetBody and X-Idempotency-Key", "POST", rebuilt, http.Header{"X-Idempotency-Key": {"k1"}}, 3},
		{"POST with GetBody and a nil Idempotency-Key", "POST", rebuilt, http.Header{"Idempotency-Key": nil}, 3},
		{"POST without GetBody", "POST", opaque, nil, 1},
		{"POST without GetBody and with Idempotency-Key", "POST", opaque, http.Header{"Idempotency-Key": {"k1"}}, 1},
		{"POST without body", "POST", nil, nil, 1},
		{"PUT with GetBody", "PUT", rebuilt, nil, 1},
		{"PUT with GetBody and Idempotency-Key", "PUT", rebuilt, http.Header{"Idempotency-Key": {"k1"}}, 3},
		{"PUT without GetBody", "PUT", opaque, nil, 1},
		{"GET", "GET", nil, nil, 3},
		{"GET with GetBody", "GET", rebuilt, nil, 3},
		{"GET without GetBody", "GET", opaque, nil, 1},
		{"HEAD", "HEAD", nil, nil, 3},
		{"OPTIONS", "OPTIONS", nil, nil, 3},
		{"TRACE", "TRACE", nil, nil, 3},
		{"DELETE", "DELETE", nil, nil, 1},
		{"DELETE with Idempotency-Key", "DELETE", nil, http.Header{"Idempotency-Key": {"k1"}}, 3},
		{"PATCH without body", "PATCH", nil, nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := &scripted{statuses: []int{503}}
				rt := newRetryTransport(t, handlerTransport(srv), RetryOptions{})
				var body io.Reader
				if tc.body != nil {
					body = tc.body()
				}
				req, err := http.NewRequest(tc.method, "http://svc/x", body)
				if err != nil {
					t.Fatal(err)
				}
				for k, v := range tc.header {
					req.Header[k] = v
				}
				resp, err := rt.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if got := srv.attempts(); got != tc.wantAttempts {
					t.Errorf("%d attempts, want %d", got, tc.wantAttempts)
				}
				if tc.body != nil {
					for i, b := range srv.bodies {
						if b != "payload" {
							t.Errorf("attempt %d sent body %q, want %q", i+1, b, "payload")
						}
					}
				}
			})
		})
	}
}

// TestRetryTransportNeverRetriesPastTheDeadline: every answer asks to come back in 1 s. With a
// 500 ms deadline there is no retry; with 1.5 s one retry (1 s plus at most 50 ms of jitter) and
// not a second (at least 2 s in). Every attempt starts before the deadline.
func TestRetryTransportNeverRetriesPastTheDeadline(t *testing.T) {
	for _, tc := range []struct {
		timeout      time.Duration
		wantAttempts int
	}{
		{500 * time.Millisecond, 1},
		{1500 * time.Millisecond, 2},
		{5 * time.Second, 3},
	} {
		t.Run(tc.timeout.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := &scripted{statuses: []int{503}, retryAfter: "1"}
				rt := newRetryTransport(t, handlerTransport(srv), RetryOptions{})
				ctx, cancel := context.WithTimeout(context.Background(), tc.timeout)
				defer cancel()
				deadline, _ := ctx.Deadline()
				start := time.Now()
				req := httptest.NewRequestWithContext(ctx, "GET", "http://svc/x", nil)
				resp, err := rt.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != 503 || srv.attempts() != tc.wantAttempts {
					t.Errorf("status %d after %d attempts, want 503 after %d", resp.StatusCode, srv.attempts(), tc.wantAttempts)
				}
				for i, at := range srv.starts {
					if !at.Before(deadline) {
						t.Errorf("attempt %d started %v after the deadline", i+1, at.Sub(deadline))
					}
					if i > 0 && at.Sub(start) < time.Duration(i)*time.Second {
						t.Errorf("attempt %d started %v in, before Retry-After allowed", i+1, at.Sub(start))
					}
				}
			})
		})
	}
}

// TestRetryTransportReturnsLastAnswerWhenCanceledWhileWaiting cancels the context during the
// wait for a retry: the caller gets the refusal it had, with its body, and no further attempt.
func TestRetryTransportReturnsLastAnswerWhenCanceledWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &scripted{statuses: []int{503}, retryAfter: "2"}
		rt := newRetryTransport(t, handlerTransport(srv), RetryOptions{})
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(time.Second, cancel)
		resp, err := rt.RoundTrip(httptest.NewRequestWithContext(ctx, "GET", "http://svc/x", nil))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 503 || string(b) != "answer" || srv.attempts() != 1 {
			t.Errorf("status %d body %q after %d attempts, want 503 %q after 1", resp.StatusCode, b, srv.attempts(), "answer")
		}
	})
}

func TestRetryTransportHonoursRetryAfterUpToItsCap(t *testing.T) {
	for _, tc := range []struct {
		name         string
		retryAfter   string
		wantAttempts int
		wantWait     time.Duration // at least, before the second attempt
	}{
		{"seconds", "3", 2, 3 * time.Second},
		{"at the cap", "10", 2, 10 * time.Second},
		{"beyond the cap", "11", 1, 0},
		{"beyond an int64", "99999999999999999999", 1, 0},
		{"far-future HTTP date", "Fri, 31 Dec 9999 23:59:59 GMT", 1, 0},
		{"negative", "-5", 2, 0},
		{"HTTP date", "", 2, 4 * time.Second}, // filled in below: now + 4 s
		{"malformed", "soon", 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ra := tc.retryAfter
				if tc.name == "HTTP date" {
					ra = time.Now().Add(4 * time.Second).UTC().Format(http.TimeFormat)
				}
				srv := &scripted{statuses: []int{503, 200}, retryAfter: ra}
				rt := newRetryTransport(t, handlerTransport(srv), RetryOptions{})
				resp, err := rt.RoundTrip(httptest.NewRequest("GET", "http://svc/x", nil))
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if srv.attempts() != tc.wantAttempts {
					t.Fatalf("%d attempts, want %d", srv.attempts(), tc.wantAttempts)
				}
				if tc.wantAttempts == 2 {
					if wait := srv.starts[1].Sub(srv.starts[0]); wait < tc.wantWait || wait > tc.wantWait+50*time.Millisecond {
						t.Errorf("waited %v, want %v plus at most 50 ms of jitter", wait, tc.wantWait)
					}
				}
			})
		})
	}
}

// trackedBody records whether it was read to its end and closed.
type trackedBody struct {
	r              io.Reader
	drained, close atomic.Bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		b.drained.Store(true)
	}
	return n, err
}

func (b *trackedBody) Close() error { b.close.Store(true); return nil }

func TestRetryTransportDrainsAndClosesDiscardedBodies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var bodies []*trackedBody
		statuses := []int{503, 429, 200}
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			b := &trackedBody{r: strings.NewReader(strings.Repeat("x", 10000))}
			bodies = append(bodies, b)
			return &http.Response{StatusCode: statuses[len(bodies)-1], Header: http.Header{}, Body: b, Request: r}, nil
		})
		rt := newRetryTransport(t, base, RetryOptions{})
		resp, err := rt.RoundTrip(httptest.NewRequest("GET", "http://svc/x", nil))
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 || len(bodies) != 3 {
			t.Fatalf("status %d after %d attempts, want 200 after 3", resp.StatusCode, len(bodies))
		}
		for i, b := range bodies[:2] {
			if !b.drained.Load() || !b.close.Load() {
				t.Errorf("discarded body %d: drained %v, closed %v", i+1, b.drained.Load(), b.close.Load())
			}
		}
		if bodies[2].close.Load() {
			t.Error("the body returned to the caller was closed")
		}
		resp.Body.Close()
	})
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"", 0, false},
		{"0", 0, true},
		{"1", time.Second, true},
		{" 120 ", 2 * time.Minute, true},
		{"-1", 0, false},
		{"1.5", 0, false},
		{"soon", 0, false},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0, false},
		{"99999999999999999999", 365 * 24 * time.Hour, true}, // beyond int64: the longest wait, not none
		{"9999999999", 365 * 24 * time.Hour, true},
		{"-99999999999999999999", 0, false},
		{"+5", 0, false},
		{"0000000000000000000000007", 7 * time.Second, true},
		{time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC).Format(http.TimeFormat), 365 * 24 * time.Hour, true},
	} {
		got, ok := parseRetryAfter(tc.in, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseRetryAfter(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// overloadedService is a test-sized service behind a gate: capacity concurrent requests run
// for serviceTime each, queue more wait at most queueWait, and the rest are refused at once with
// gatedhttp's own 503 (Retry-After: 1).
type overloadedService struct {
	capacity, queue int
	serviceTime     time.Duration
	queueWait       time.Duration

	slots    chan struct{}
	mu       sync.Mutex
	inside   int
	attempts atomic.Int64
}

func newOverloadedService() *overloadedService {
	s := &overloadedService{capacity: 4, queue: 4, serviceTime: 10 * time.Millisecond, queueWait: 20 * time.Millisecond}
	s.slots = make(chan struct{}, s.capacity)
	return s
}

func (s *overloadedService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.attempts.Add(1)
	s.mu.Lock()
	if s.inside >= s.capacity+s.queue {
		s.mu.Unlock()
		WriteRejection(w, gated.ErrAdmissionFull)
		return
	}
	s.inside++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inside--
		s.mu.Unlock()
	}()
	timer := time.NewTimer(s.queueWait)
	defer timer.Stop()
	select {
	case s.slots <- struct{}{}:
	case <-timer.C:
		WriteRejection(w, gated.ErrAdmissionTimeout)
		return
	}
	time.Sleep(s.serviceTime)
	<-s.slots
	io.WriteString(w, "ok")
}

// overloadResult is what one client achieved against a fresh overloadedService.
type overloadResult struct {
	logical, attempts, goodput int64
}

func (r overloadResult) perRequest() float64 { return float64(r.attempts) / float64(r.logical) }

// runOverload offers 3× the service's capacity (open loop, 1200 logical requests per second
// against 4 slots × 100/s) for 10 s of synctest's fake time; each logical request has a 3 s
// deadline and is made by do. Goodput counts 200 answers within the deadline.
func runOverload(t *testing.T, do func(rt http.RoundTripper, req *http.Request) (*http.Response, error)) overloadResult {
	const (
		rate     = 1200
		duration = 10 * time.Second
	)
	var res overloadResult
	synctest.Test(t, func(t *testing.T) {
		svc := newOverloadedService()
		base := handlerTransport(svc)
		var ok atomic.Int64
		var wg sync.WaitGroup
		n := int(duration.Seconds() * rate)
		for range n {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				defer cancel()
				resp, err := do(base, httptest.NewRequestWithContext(ctx, "GET", "http://svc/work", nil))
				if err != nil {
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 && ctx.Err() == nil {
					ok.Add(1)
				}
			})
			time.Sleep(time.Second / rate)
		}
		wg.Wait()
		res = overloadResult{logical: int64(n), attempts: svc.attempts.Load(), goodput: ok.Load()}
	})
	return res
}

// naive retries every 503 at once, up to 3 attempts in all.
func naive(rt http.RoundTripper, req *http.Request) (*http.Response, error) {
	for attempt := 1; ; attempt++ {
		resp, err := rt.RoundTrip(req)
		if err != nil || resp.StatusCode != http.StatusServiceUnavailable || attempt == 3 {
			return resp, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// TestRetryBudgetKeepsOverloadFromMultiplying: clients offering 3× a service's capacity. A naive
// client that retries every 503 up to 3 times sends more than 2 attempts per logical request; the
// RetryTransport sends at most 1 + 20 % + its floor's share, and its goodput is not lower.
func TestRetryBudgetKeepsOverloadFromMultiplying(t *testing.T) {
	naiveRes := runOverload(t, naive)

	withBudget := func(opts RetryOptions) overloadResult {
		if _, err := NewRetryTransport(nil, opts); err != nil {
			t.Fatal(err)
		}
		var rt *RetryTransport
		var once sync.Once
		return runOverload(t, func(base http.RoundTripper, req *http.Request) (*http.Response, error) {
			once.Do(func() { rt, _ = NewRetryTransport(base, opts) }) // opts checked above
			return rt.RoundTrip(req)
		})
	}
	budgetRes := withBudget(RetryOptions{})                         // Finagle's defaults
	noFloorRes := withBudget(RetryOptions{MinRetriesPerSecond: -1}) // the ratio alone

	for _, r := range []struct {
		name string
		res  overloadResult
	}{{"naive", naiveRes}, {"budget", budgetRes}, {"budget without floor", noFloorRes}} {
		t.Logf("%-21s logical %d, attempts %d (%.3f per request), goodput %d",
			r.name, r.res.logical, r.res.attempts, r.res.perRequest(), r.res.goodput)
	}
	if got := naiveRes.perRequest(); got < 2 {
		t.Errorf("naive client: %.3f attempts per request, want more than 2 (the scenario is not overloaded)", got)
	}
	// The service queues a few attempts (Q = B, as gated by default), so some retries succeed
	// and the naive client lands between 2 and 3 attempts per request.
	// The run spans two budget windows (10 s of arrivals, up to 3 s of retries), so the floor of
	// 10/s can add at most 2 × 100 retries.
	if got, limit := budgetRes.perRequest(), 1.2+200.0/float64(budgetRes.logical); got > limit {
		t.Errorf("budget: %.3f attempts per request, want ≤ %.3f (1.2 + the floor's share)", got, limit)
	}
	if got := noFloorRes.perRequest(); got > 1.2 {
		t.Errorf("budget without floor: %.3f attempts per request, want ≤ 1.2", got)
	}
	for _, r := range []overloadResult{budgetRes, noFloorRes} {
		if r.goodput < naiveRes.goodput {
			t.Errorf("budget goodput %d < naive goodput %d", r.goodput, naiveRes.goodput)
		}
	}
}

func TestRetryTransportCountsWhatItDid(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &scripted{statuses: []int{503}}
		rt := newRetryTransport(t, handlerTransport(srv), RetryOptions{MinRetriesPerSecond: -1, BudgetRatio: 0.5})
		for range 2 {
			resp, err := rt.RoundTrip(httptest.NewRequest("GET", "http://svc/x", nil))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		// Request 1: 0.5 tokens, no retry. Request 2: 1 token, one retry, then none left.
		want := RetryStats{Requests: 2, Attempts: 3, Retries: 1, BudgetExhausted: 2}
		if got := rt.Stats(); got != want {
			t.Errorf("Stats = %+v, want %+v", got, want)
		}
	})
}

func TestNewRetryTransportRejectsOutOfRangeOptions(t *testing.T) {
	for _, tc := range []struct {
		opts RetryOptions
		want string // in the error: the field and its value
	}{
		{RetryOptions{MaxAttempts: -1}, "MaxAttempts is -1"},
		{RetryOptions{BudgetRatio: math.NaN()}, "BudgetRatio is NaN"},
		{RetryOptions{BudgetRatio: math.Inf(1)}, "BudgetRatio is +Inf"},
		{RetryOptions{MinRetriesPerSecond: math.Inf(-1)}, "MinRetriesPerSecond is -Inf"},
		{RetryOptions{BudgetWindow: 5}, "BudgetWindow is 5ns"}, // seconds meant; divided by zero before
		{RetryOptions{BudgetWindow: 999 * time.Millisecond}, "BudgetWindow is 999ms"},
		{RetryOptions{BudgetWindow: -time.Second}, "BudgetWindow is -1s"},
		{RetryOptions{BudgetWindow: math.MaxInt64}, "BudgetWindow is 2562047h47m16.854775807s"},
		{RetryOptions{BackoffBase: 50}, "BackoffBase is 50ns"},
		{RetryOptions{BackoffBase: -time.Millisecond}, "BackoffBase is -1ms"},
		{RetryOptions{BackoffMax: 2}, "BackoffMax is 2ns"},
		{RetryOptions{BackoffMax: math.MaxInt64}, "BackoffMax is 2562047h47m16.854775807s"},
		{RetryOptions{MaxRetryAfter: 10}, "MaxRetryAfter is 10ns"},
		{RetryOptions{MaxRetryAfter: -1}, "MaxRetryAfter is -1ns"},
		{RetryOptions{MaxRetryAfter: 500 * time.Millisecond}, "MaxRetryAfter is 500ms"},
		{RetryOptions{MaxRetryAfter: 25 * time.Hour}, "MaxRetryAfter is 25h0m0s"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			rt, err := NewRetryTransport(nil, tc.opts)
			if err == nil {
				t.Fatalf("NewRetryTransport(%+v) = %v, nil; want an error", tc.opts, rt)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, "gated: gatedhttp: RetryOptions."+tc.want+": ") {
				t.Errorf("error %q does not start with %q", msg, "gated: gatedhttp: RetryOptions."+tc.want+": ")
			}
		})
	}
}

func TestRetryTransportAcceptsOptionsAtTheirBounds(t *testing.T) {
	for _, opts := range []RetryOptions{
		{MaxAttempts: 1, BudgetRatio: -1, MinRetriesPerSecond: -1},
		{MaxAttempts: math.MaxInt, BudgetRatio: 1e300, MinRetriesPerSecond: 1e300},
		{BudgetWindow: time.Second, BackoffBase: time.Millisecond, BackoffMax: time.Millisecond, MaxRetryAfter: time.Second},
		{BudgetWindow: 24 * time.Hour, BackoffBase: time.Hour, BackoffMax: time.Hour, MaxRetryAfter: 24 * time.Hour},
	} {
		t.Run(fmt.Sprintf("%+v", opts), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := &scripted{statuses: []int{503, 200}, retryAfter: "99999999999999999999"}
				rt := newRetryTransport(t, handlerTransport(srv), opts)
				resp, err := rt.RoundTrip(httptest.NewRequest("GET", "http://svc/x", nil))
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusServiceUnavailable || srv.attempts() != 1 {
					t.Errorf("status %d after %d attempts; want the 503 returned after 1 (Retry-After beyond the cap)", resp.StatusCode, srv.attempts())
				}
			})
		})
	}
}
