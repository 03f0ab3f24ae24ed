package testwait

import (
	"testing"
	"testing/synctest"
	"time"
)

func TestLimitEndsBeforeTheDeadline(t *testing.T) {
	deadline, ok := t.Deadline()
	if !ok {
		t.Skip("no -timeout: nothing to end before")
	}
	if l := Limit(t); time.Now().Add(l).After(deadline) || l > maxWait || l < time.Second {
		t.Errorf("Limit = %v with %v left before the deadline", l, time.Until(deadline))
	}
}

func TestForPollsInASynctestBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		For(t, "two seconds of the bubble's clock", func() bool { return time.Since(start) >= 2*time.Second })
		if d := time.Since(start); d < 2*time.Second || d > 2*time.Second+10*time.Millisecond {
			t.Errorf("For returned after %v of the bubble's clock", d)
		}
	})
}
