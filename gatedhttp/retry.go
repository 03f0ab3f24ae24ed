package gatedhttp

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// RetryOptions configures a [RetryTransport]. The zero value gives the defaults, which are
// Finagle's RetryBudget defaults (20 % of requests over 10 s, on top of 10 retries per second).
// A zero field takes its default; [NewRetryTransport] rejects a field out of the range its
// comment gives, with an error that names the field and its value.
//
// Finagle's budget rather than gRPC's retry throttling: Finagle bounds retries by a share of the
// requests sent, which is the bound we want to state (at most 1.2 attempts per request, plus the
// floor), and its defaults are published. gRPC's throttling is a token bucket that failures drain
// and successes refill; it has no defaults (it is off unless a service config sets maxTokens and
// tokenRatio), and its bound depends on the success rate, not on the number of requests.
type RetryOptions struct {
	// MaxAttempts is the most attempts one request gets, the first included. Default 3; 1 turns
	// retries off; negative is rejected.
	MaxAttempts int
	// BudgetRatio is the share of requests that may be retried within BudgetWindow. Default
	// 0.2; a negative value allows only the floor (MinRetriesPerSecond); NaN and ±Inf are
	// rejected.
	BudgetRatio float64
	// BudgetWindow is how long a request counts towards the budget. Default 10s; from 1s to
	// 24h, so that a count of seconds written without its unit (5 is 5ns) is rejected rather
	// than taken as a window of nanoseconds.
	BudgetWindow time.Duration
	// MinRetriesPerSecond is the floor: retries allowed on top of the ratio, so that a client
	// sending few requests can still retry. Default 10; a negative value means none; NaN and
	// ±Inf are rejected.
	MinRetriesPerSecond float64
	// BackoffBase and BackoffMax bound the backoff before retry n (n = 1, 2, ...): a random
	// duration in [0, min(BackoffMax, BackoffBase × 2^(n-1))) ("full jitter"). Defaults 50ms and 2s;
	// each from 1ms to 1h.
	BackoffBase, BackoffMax time.Duration
	// MaxRetryAfter is the longest Retry-After the transport waits for. A response asking for a
	// longer wait is returned to the caller instead of retried early. Default 10s; from 1s (the
	// unit of Retry-After) to 24h.
	MaxRetryAfter time.Duration
}

// The ranges NewRetryTransport accepts. The lower bounds catch a count written without its unit
// (time.Duration counts nanoseconds); the upper ones keep every sum of waits far from overflow
// and are longer than any wait a client means to make between two attempts.
const (
	minBudgetWindow, maxBudgetWindow   = time.Second, 24 * time.Hour
	minBackoff, maxBackoff             = time.Millisecond, time.Hour
	minMaxRetryAfter, maxMaxRetryAfter = time.Second, 24 * time.Hour
)

// normalize checks o and sets its zero fields to their defaults. On error o is unusable.
func (o *RetryOptions) normalize() error {
	switch {
	case o.MaxAttempts < 0:
		return optionError("MaxAttempts", o.MaxAttempts, "must be at least 1 (or 0 for the default, 3)")
	case o.MaxAttempts == 0:
		o.MaxAttempts = 3
	}
	switch {
	case math.IsNaN(o.BudgetRatio) || math.IsInf(o.BudgetRatio, 0):
		return optionError("BudgetRatio", o.BudgetRatio, "must be a finite number")
	case o.BudgetRatio == 0:
		o.BudgetRatio = 0.2
	case o.BudgetRatio < 0:
		o.BudgetRatio = 0
	}
	switch {
	case math.IsNaN(o.MinRetriesPerSecond) || math.IsInf(o.MinRetriesPerSecond, 0):
		return optionError("MinRetriesPerSecond", o.MinRetriesPerSecond, "must be a finite number")
	case o.MinRetriesPerSecond == 0:
		o.MinRetriesPerSecond = 10
	case o.MinRetriesPerSecond < 0:
		o.MinRetriesPerSecond = 0
	}
	for _, d := range []struct {
		name     string
		v        *time.Duration
		def      time.Duration
		min, max time.Duration
	}{
		{"BudgetWindow", &o.BudgetWindow, 10 * time.Second, minBudgetWindow, maxBudgetWindow},
		{"BackoffBase", &o.BackoffBase, 50 * time.Millisecond, minBackoff, maxBackoff},
		{"BackoffMax", &o.BackoffMax, 2 * time.Second, minBackoff, maxBackoff},
		{"MaxRetryAfter", &o.MaxRetryAfter, 10 * time.Second, minMaxRetryAfter, maxMaxRetryAfter},
	} {
		switch v := *d.v; {
		case v == 0:
			*d.v = d.def
		case v < d.min || v > d.max:
			why := fmt.Sprintf("must be from %v to %v (or 0 for the default, %v)", d.min, d.max, d.def)
			if v > 0 && v < time.Microsecond {
				why += fmt.Sprintf("; a time.Duration counts nanoseconds: %d seconds is %d * time.Second", int64(v), int64(v))
			}
			return optionError(d.name, v, why)
		}
	}
	return nil
}

func optionError(field string, value any, why string) error {
	return fmt.Errorf("gated: gatedhttp: RetryOptions.%s is %v: %s", field, value, why)
}

// RetryStats counts what a [RetryTransport] did since it was made.
type RetryStats struct {
	Requests        int64 // RoundTrip calls
	Attempts        int64 // requests sent to the base transport: Requests plus retries
	Retries         int64 // retries sent
	BudgetExhausted int64 // 503 or 429 answers returned without a retry because the budget was spent
}

// A RetryTransport is an http.RoundTripper that retries 503 Service Unavailable and 429 Too Many
// Requests within a retry budget. Every other answer, and every transport error, is returned as
// is.
//
// A 503 does not prove that nothing ran: a handler may commit a write and then be refused on its
// next query (its [Rejecter.WriteRejection] answers 503 all the same). So the transport replays
// only what net/http itself would replay on a new connection, a request that says repeating it is
// harmless. A request is retried only when all of these hold:
//
//   - it can be replayed: its method is idempotent (GET, HEAD, OPTIONS, TRACE), or it carries an
//     Idempotency-Key or X-Idempotency-Key header (the server recognizes a repeated key and does
//     the work once; net/http honours the header even with a nil value, which it does not send);
//     and its body can be sent again: none, http.NoBody, or GetBody (http.NewRequest sets it for
//     bytes and strings readers). GetBody alone only says that the body can be rebuilt: a POST,
//     PUT, PATCH or DELETE without an idempotency key is sent once;
//   - it has had fewer than MaxAttempts attempts;
//   - the answer's Retry-After, if any, is at most MaxRetryAfter;
//   - the wait (Retry-After plus the full-jitter backoff) ends before the request context's
//     deadline, and the context has not ended;
//   - the budget allows it (see [RetryOptions]). The budget belongs to the transport: use one
//     RetryTransport per service called, shared by all goroutines calling it.
//
// The body of an answer it does not return is read (up to 64 KiB, so the connection can be
// reused) and closed. When the context ends during the wait, RoundTrip returns the last answer
// (its body kept in memory), or the context's error if that body was too large to keep.
//
// A RetryTransport is safe for concurrent use.
type RetryTransport struct {
	base   http.RoundTripper
	opts   RetryOptions
	budget *retryBudget

	requests, attempts, retries, exhausted atomic.Int64
}

var _ http.RoundTripper = (*RetryTransport)(nil)

// NewRetryTransport returns a RetryTransport that sends requests through base
// (http.DefaultTransport when nil), with opts' zero fields set to their defaults. It returns an
// error, naming the field and its value, when a field of opts is out of its range (see
// [RetryOptions]).
func NewRetryTransport(base http.RoundTripper, opts RetryOptions) (*RetryTransport, error) {
	if err := opts.normalize(); err != nil {
		return nil, err
	}
	if base == nil {
		base = http.DefaultTransport
	}
	return &RetryTransport{
		base:   base,
		opts:   opts,
		budget: newRetryBudget(opts.BudgetRatio, opts.MinRetriesPerSecond, opts.BudgetWindow),
	}, nil
}

// Stats returns the transport's counters. Safe for concurrent use.
func (t *RetryTransport) Stats() RetryStats {
	return RetryStats{
		Requests:        t.requests.Load(),
		Attempts:        t.attempts.Load(),
		Retries:         t.retries.Load(),
		BudgetExhausted: t.exhausted.Load(),
	}
}

// CloseIdleConnections closes the base transport's idle connections, if it has that method, so
// that http.Client.CloseIdleConnections reaches it.
func (t *RetryTransport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// RoundTrip sends req, and retries it as the type's documentation describes. It does not modify
// req: retries send clones with a body from req.GetBody.
func (t *RetryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.requests.Add(1)
	t.budget.deposit(time.Now())
	ctx := req.Context()
	replay := replayable(req)
	next := req
	for attempt := 1; ; attempt++ {
		t.attempts.Add(1)
		resp, err := t.base.RoundTrip(next)
		if err != nil || !refused(resp.StatusCode) || !replay || attempt >= t.opts.MaxAttempts {
			return resp, err
		}
		wait, ok := t.wait(resp, attempt)
		if !ok {
			return resp, nil
		}
		if ctx.Err() != nil {
			return resp, nil
		}
		if deadline, has := ctx.Deadline(); has && !time.Now().Add(wait).Before(deadline) {
			return resp, nil
		}
		if next, err = clone(req); err != nil {
			return resp, nil
		}
		if !t.budget.withdraw(time.Now()) {
			t.exhausted.Add(1)
			closeBody(next)
			return resp, nil
		}
		kept := discard(resp)
		if !sleep(ctx, wait) {
			closeBody(next)
			if kept != nil {
				return kept, nil
			}
			return nil, ctx.Err()
		}
		t.retries.Add(1)
	}
}

// refused reports whether an answer is one the transport retries.
func refused(status int) bool {
	return status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests
}

// replayable reports whether req may be sent again, by net/http's own rule for replaying a
// request on a new connection (Request.isReplayable): its body can be sent again (none,
// http.NoBody, or GetBody), and its method is idempotent (GET, HEAD, OPTIONS, TRACE) or it
// carries an Idempotency-Key or X-Idempotency-Key header, present even with no value, by which
// the client says that the server recognizes a repeat.
func replayable(req *http.Request) bool {
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return false
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	_, key := req.Header["Idempotency-Key"]
	_, xkey := req.Header["X-Idempotency-Key"]
	return key || xkey
}

// clone returns a copy of req for another attempt, with a fresh body from GetBody.
func clone(req *http.Request) (*http.Request, error) {
	r := req.Clone(req.Context())
	if req.GetBody != nil {
		body, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		r.Body = body
	}
	return r, nil
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// wait returns how long to wait before retry number attempt, or false when the answer's
// Retry-After asks for longer than MaxRetryAfter.
func (t *RetryTransport) wait(resp *http.Response, attempt int) (time.Duration, bool) {
	backoff := t.opts.BackoffMax
	if shift := attempt - 1; shift < 32 && t.opts.BackoffBase<<shift < backoff && t.opts.BackoffBase<<shift > 0 {
		backoff = t.opts.BackoffBase << shift
	}
	jitter := rand.N(backoff)
	retryAfter, ok := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	if !ok {
		return jitter, true
	}
	if retryAfter > t.opts.MaxRetryAfter {
		return 0, false
	}
	return retryAfter + jitter, true
}

// parseRetryAfter reads a Retry-After value: delay-seconds or an HTTP date (RFC 9110 10.2.3).
// A missing, malformed or past value reports false (no wait asked for); so does a negative
// number, which the grammar (1*DIGIT) does not allow. A number of seconds too large for
// an int64, or longer than maxRetryAfterRead, reads as maxRetryAfterRead: as long a wait as any
// cap allows, so it is never read as "no wait" and retried at once.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if digits(v) {
		secs, err := strconv.ParseInt(v, 10, 64)
		if err != nil || secs > int64(maxRetryAfterRead/time.Second) {
			return maxRetryAfterRead, true // ErrRange: more seconds than an int64 holds
		}
		return time.Duration(secs) * time.Second, true
	}
	when, err := http.ParseTime(v)
	if err != nil || !when.After(now) {
		return 0, false
	}
	return min(when.Sub(now), maxRetryAfterRead), true
}

// maxRetryAfterRead is the longest wait parseRetryAfter returns: beyond any MaxRetryAfter, and
// short enough that adding a backoff cannot overflow a time.Duration.
const maxRetryAfterRead = 365 * 24 * time.Hour

// digits reports whether s is one or more ASCII digits, the delay-seconds form.
func digits(s string) bool {
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// discardLimit is how much of a discarded body is read so its connection can be reused.
const discardLimit = 64 << 10

// discard reads resp's body (at most discardLimit) and closes it. It returns resp with the body
// kept in memory when it was read to its end, or nil when it was larger.
func discard(resp *http.Response) *http.Response {
	b, err := io.ReadAll(io.LimitReader(resp.Body, discardLimit+1))
	resp.Body.Close()
	if err != nil || len(b) > discardLimit {
		return nil
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return resp
}

// sleep waits for d, and reports false when ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return ctx.Err() == nil
	case <-ctx.Done():
		return false
	}
}
