package gatedhttp

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gatedsql/gated"
)

// MaxRetryAfter is the largest Retry-After that a [Rejecter] sends (the header carries it as 10,
// whole seconds). A longer estimate means operations that take seconds each; telling clients to
// stay away longer than this would mostly keep them away after the backlog is gone.
const MaxRetryAfter = 10 * time.Second

// maxRetryAfterSeconds is MaxRetryAfter as the header spells it.
const maxRetryAfterSeconds = int(MaxRetryAfter / time.Second)

// rateWindow is the shortest interval over which a Rejecter measures the gate's admission rate.
const rateWindow = time.Second

const rejectionBody = "service overloaded: the database is busy, retry later"

// WriteRejection answers err with 503 Service Unavailable and "Retry-After: 1" when
// gated.IsRejected(err) (ErrAdmissionFull, ErrAdmissionTimeout or ErrAdmissionDisplaced) and
// reports whether it did; for any other error, nil included, it writes nothing and returns
// false, so the caller answers as it would have. It must be called before anything else was
// written to w.
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

// A Rejecter answers the refusals of a gated *sql.DB with 503 and a Retry-After derived from
// the state of the gate that refused: the workload a [gated.RejectedError] names (the default
// gate for an error that names none). It is bound to a *gated.Connector (use gated.FromDB to
// find the one behind a *sql.DB) because the error alone says which gate was full, not for how
// long.
//
// A Rejecter is safe for concurrent use; make one per gated *sql.DB and share it between handlers.
type Rejecter struct {
	c     *gated.Connector
	gates map[string]*rateSampler // one per workload of c, made by NewRejecter; read-only
	now   func() time.Time        // time.Now; tests replace it
}

// A rateSampler keeps two samples of one gate's Admitted counter: the rate is measured from
// prev to cur, and prev is at least rateWindow old once the sampler has lived that long.
type rateSampler struct {
	mu                        sync.Mutex
	prevAt, curAt             time.Time
	prevAdmitted, curAdmitted int64
}

// NewRejecter returns a Rejecter for the gates of c, every workload's (c.AllStats). A nil c
// gives a Rejecter that behaves like [WriteRejection] (Retry-After: 1), so that
//
//	c, _ := gated.FromDB(db)
//	rj := gatedhttp.NewRejecter(c)
//
// works whether or not db is gated.
func NewRejecter(c *gated.Connector) *Rejecter {
	r := &Rejecter{c: c, gates: map[string]*rateSampler{}, now: time.Now}
	if c != nil {
		now := r.now()
		for name, s := range c.AllStats() {
			r.gates[name] = &rateSampler{prevAt: now, curAt: now, prevAdmitted: s.Admitted, curAdmitted: s.Admitted}
		}
	}
	return r
}

// WriteRejection is the package's [WriteRejection] with Retry-After set to
// [Rejecter.RetryAfterFor] err: the estimate of the gate that refused.
func (r *Rejecter) WriteRejection(w http.ResponseWriter, err error) bool {
	if !gated.IsRejected(err) {
		return false
	}
	writeRejection(w, r.RetryAfterFor(err))
	return true
}

// RetryAfter returns the Retry-After that the Rejecter would send now for a refusal by the
// default gate; see [Rejecter.RetryAfterWorkload].
func (r *Rejecter) RetryAfter() int { return r.RetryAfterWorkload(gated.DefaultWorkload) }

// RetryAfterFor returns the Retry-After for err, a refusal: the estimate of the gate of the
// workload its [gated.RejectedError] names, or of the default gate when it names none.
func (r *Rejecter) RetryAfterFor(err error) int {
	var re *gated.RejectedError
	if errors.As(err, &re) {
		return r.RetryAfterWorkload(re.Workload)
	}
	return r.RetryAfter()
}

// RetryAfterWorkload returns the Retry-After, in whole seconds from 1 to [MaxRetryAfter] (10), that
// the Rejecter would send now for a refusal by the gate of workload name ("" or "default" for
// the default gate; 1 for a name the Connector does not have). It is the time that gate needs
// to work off what is inside it:
//
//	backlog = Running + Waiting              operations ahead of a newcomer, in that gate
//	rate    = ΔAdmitted / Δt                 that gate's admissions per second, over the history kept
//	wait    = backlog / rate                 rounded up to whole seconds, clamped to [1 s, MaxRetryAfter]
//
// The history is two samples of the gate's Admitted counter, taken only when a Retry-After is
// computed (no goroutine): Δt runs from the older sample, which is replaced by the newer once
// that is rateWindow (1 s) old, so Δt is between 1 and 2 s once the Rejecter has been asked
// for a second, and shorter before: the estimate then uses the history there is (half a second
// in which 2 operations were admitted with 6 inside gives 6 / (2 / 0.5 s) = 1.5 s, so 2). After
// more than 2 s without a call the history starts again, because a calm gate's rate was set by
// demand, not capacity. The edge cases: an empty gate gives 1 (the refusal was a burst that has
// passed); so does a history shorter than a second in which nothing was admitted; nothing
// admitted for a whole second while operations are inside means they take seconds each, and
// gives MaxRetryAfter.
func (r *Rejecter) RetryAfterWorkload(name string) int {
	if r.c == nil {
		return 1
	}
	if name == "" {
		name = gated.DefaultWorkload
	}
	g := r.gates[name]
	s, ok := r.c.WorkloadStats(name)
	if g == nil || !ok {
		return 1
	}
	now := r.now()

	g.mu.Lock()
	if now.Sub(g.curAt) > 2*rateWindow {
		// No refusal for a while: the old samples describe a calmer gate, whose rate was set
		// by demand rather than capacity. Start measuring again.
		g.prevAt, g.prevAdmitted = now, s.Admitted
		g.curAt, g.curAdmitted = now, s.Admitted
	} else if now.Sub(g.curAt) >= rateWindow {
		g.prevAt, g.prevAdmitted = g.curAt, g.curAdmitted
		g.curAt, g.curAdmitted = now, s.Admitted
	}
	elapsed, admitted := now.Sub(g.prevAt), s.Admitted-g.prevAdmitted
	g.mu.Unlock()

	return retryAfterSeconds(s.Running+s.Waiting, admitted, elapsed)
}

// retryAfterSeconds is RetryAfterWorkload's estimate for backlog operations inside the gate and
// admitted admissions during the last elapsed.
func retryAfterSeconds(backlog int, admitted int64, elapsed time.Duration) int {
	switch {
	case backlog <= 0:
		return 1
	case admitted <= 0 && elapsed < rateWindow:
		return 1
	case admitted <= 0:
		return maxRetryAfterSeconds
	}
	wait := float64(backlog) * elapsed.Seconds() / float64(admitted)
	return int(min(max(math.Ceil(wait), 1), float64(maxRetryAfterSeconds)))
}
