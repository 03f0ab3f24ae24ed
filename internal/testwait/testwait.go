// Package testwait is the tests' one way to wait for a condition: poll it, never sleep for a
// guessed time, and fail with what was awaited before the test binary's own deadline kills the
// run with a goroutine dump instead.
package testwait

import (
	"testing"
	"time"
)

// maxWait bounds the wait when the test has no deadline, or one further away (and in a
// testing/synctest bubble, whose clock starts far before the deadline).
const maxWait = 10 * time.Minute

// For polls cond every millisecond until it holds. It fails t, naming what, once the test is
// about to run out of time: a tenth (at least 5 s) before t's deadline (go test -timeout), so that
// cleanup and the failure's report still run. Safe in a testing/synctest bubble, where the
// polling advances the bubble's clock.
func For(t testing.TB, what string, cond func() bool) {
	t.Helper()
	limit := Limit(t)
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("still not %s after %v (waits end shortly before the test's deadline)", what, limit.Round(time.Second))
		}
		time.Sleep(time.Millisecond)
	}
}

// Limit is how long For waits for t: until a tenth of the time left (at least 5 s) before t's
// deadline, at most maxWait.
func Limit(t testing.TB) (limit time.Duration) {
	// In a testing/synctest bubble, Deadline panics: the bubble's clock is not the deadline's.
	defer func() {
		if recover() != nil {
			limit = maxWait
		}
	}()
	d, ok := t.(interface{ Deadline() (time.Time, bool) })
	if !ok {
		return maxWait
	}
	deadline, ok := d.Deadline()
	if !ok {
		return maxWait
	}
	left := time.Until(deadline)
	limit = left - max(left/10, 5*time.Second)
	return min(max(limit, time.Second), maxWait)
}
