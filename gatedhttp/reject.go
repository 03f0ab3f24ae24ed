package gatedhttp

import (
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gatedsql/gated"
)

// MaxRetryAfter is the largest Retry-After, in seconds, that a [Rejecter] sends. A longer estimate
// means operations that take seconds each; telling clients to stay away longer than this would
// mostly keep them away after the backlog is gone.
const MaxRetryAfter = 10

// rateWindow is the shortest interval over which a Rejecter measures the gate's admission rate.
const rateWindow = time.Second

const rejectionBody = "service overloaded: the database is busy, retry later"

// WriteRejection answers err with 503 Service Unavailable and "Retry-After: 1" when
// gated.IsRejected(err) (ErrAdmissionFull or ErrAdmissionTimeout) and reports whether it did;
// for any other error, nil included, it writes nothing and returns false, so the caller answers
// as it would have. It must be called before anything else was written to w.
//
// Without the gate it cannot estimate when capacity frees up, so it sends the smallest valid
// value: a gate refuses for the state of this instant, and one second is longer than a typical
// database operation. Prefer a [Rejecter], which derives the value from the gate's state; this
// function is for handlers that only see the error.
func WriteRejection(w http.ResponseWriter, err error) bool {
	if !gated.IsRejected(err) {
		return false
	}
	writeRejection(w, 1)
	return true
}

func writeRejection(w http.ResponseWriter, seconds int) {
	h := w.Header()
	h.Set("Retry-After", strconv.Itoa(seconds))
	h.Set("Cache-Control", "no-store")
	http.Error(w, rejectionBody, http.StatusServiceUnavailable)
}

// A Rejecter answers the refusals of one gate with 503 and a Retry-After derived from that
// gate's state. It is bound to a *gated.Connector (use gated.FromDB to find the one behind a
// *sql.DB) because the error alone says only that the gate was full, not for how long.
//
// A Rejecter is safe for concurrent use; make one per gated *sql.DB and share it between handlers.
type Rejecter struct {
	c *gated.Connector

	mu sync.Mutex
	// Two samples of the gate's Admitted counter, guarded by mu: the rate is measured from prev
	// to now, and prev is at least rateWindow old once the Rejecter has lived that long.
	prevAt, curAt             time.Time
	prevAdmitted, curAdmitted int64
}

// NewRejecter returns a Rejecter for the gate of c. A nil c gives a Rejecter that behaves like
// [WriteRejection] (Retry-After: 1), so that
//
//	c, _ := gated.FromDB(db)
//	rj := gatedhttp.NewRejecter(c)
//
// works whether or not db is gated.
func NewRejecter(c *gated.Connector) *Rejecter {
	r := &Rejecter{c: c}
	if c != nil {
		now, admitted := time.Now(), c.Stats().Admitted
		r.prevAt, r.curAt = now, now
		r.prevAdmitted, r.curAdmitted = admitted, admitted
	}
	return r
}

// WriteRejection is the package's [WriteRejection] with Retry-After set to [Rejecter.RetryAfter].
func (r *Rejecter) WriteRejection(w http.ResponseWriter, err error) bool {
	if !gated.IsRejected(err) {
		return false
	}
	writeRejection(w, r.RetryAfter())
	return true
}

// RetryAfter returns the Retry-After, in whole seconds from 1 to [MaxRetryAfter], that the
// Rejecter would send now. It is the time the gate needs to work off what is inside it:
//
//	backlog = Running + Waiting              operations ahead of a newcomer
//	rate    = ΔAdmitted / Δt                 admissions per second over the last 1–2 s
//	wait    = backlog / rate                 rounded up to whole seconds, clamped to [1, MaxRetryAfter]
//
// The rate is sampled only when RetryAfter runs (no goroutine), so after more than 2 s without a
// call the measurement starts again. An empty gate gives 1 (the refusal was a burst that has
// passed); so does less than a second of history. When nothing was admitted for a whole second
// while operations are inside, they take seconds each, and it gives MaxRetryAfter. The estimate is for the default gate: the error
// does not say which workload refused.
func (r *Rejecter) RetryAfter() int {
	if r.c == nil {
		return 1
	}
	s := r.c.Stats()
	now := time.Now()

	r.mu.Lock()
	if now.Sub(r.curAt) > 2*rateWindow {
		// No refusal for a while: the old samples describe a calmer gate, whose rate was set
		// by demand rather than capacity. Start measuring again.
		r.prevAt, r.prevAdmitted = now, s.Admitted
		r.curAt, r.curAdmitted = now, s.Admitted
	} else if now.Sub(r.curAt) >= rateWindow {
		r.prevAt, r.prevAdmitted = r.curAt, r.curAdmitted
		r.curAt, r.curAdmitted = now, s.Admitted
	}
	elapsed, admitted := now.Sub(r.prevAt), s.Admitted-r.prevAdmitted
	r.mu.Unlock()

	return retryAfterSeconds(s.Running+s.Waiting, admitted, elapsed)
}

// retryAfterSeconds is RetryAfter's estimate for backlog operations inside the gate and admitted
// admissions during the last elapsed.
func retryAfterSeconds(backlog int, admitted int64, elapsed time.Duration) int {
	switch {
	case backlog <= 0:
		return 1
	case admitted <= 0 && elapsed < rateWindow:
		return 1
	case admitted <= 0:
		return MaxRetryAfter
	}
	wait := float64(backlog) * elapsed.Seconds() / float64(admitted)
	return int(min(max(math.Ceil(wait), 1), MaxRetryAfter))
}
