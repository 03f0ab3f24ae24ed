package gatedhttp

import (
	"sync"
	"time"
)

// budgetSlots is how many slices the budget's window is cut into: deposits and withdrawals expire
// a slice at a time, as in Finagle's WindowedAdder.
const budgetSlots = 10

// A retryBudget allows a retry while, over the last window,
//
//	retries < ratio × requests + floor × window (in seconds)
//
// the token bucket of Finagle's RetryBudget: every request deposits ratio tokens, every retry
// withdraws one, tokens expire after the window, and a constant reserve of floor × window tokens
// lets a client that sends few requests still retry now and then. Safe for concurrent use.
type retryBudget struct {
	ratio   float64
	reserve float64 // floor × window
	slot    time.Duration

	mu    sync.Mutex
	slots [budgetSlots]budgetSlot // guarded by mu
}

type budgetSlot struct {
	epoch       int64 // which slot-sized interval since the Unix epoch the counts belong to
	deposits    int64
	withdrawals int64
}

func newRetryBudget(ratio, perSecond float64, window time.Duration) *retryBudget {
	return &retryBudget{
		ratio:   ratio,
		reserve: perSecond * window.Seconds(),
		slot:    window / budgetSlots,
	}
}

// current returns the slot for now, emptied if it held an older interval; mu is held.
func (b *retryBudget) current(now time.Time) (*budgetSlot, int64) {
	epoch := now.UnixNano() / int64(b.slot)
	s := &b.slots[epoch%budgetSlots]
	if s.epoch != epoch {
		*s = budgetSlot{epoch: epoch}
	}
	return s, epoch
}

// deposit records one request.
func (b *retryBudget) deposit(now time.Time) {
	b.mu.Lock()
	s, _ := b.current(now)
	s.deposits++
	b.mu.Unlock()
}

// withdraw records one retry and reports true when the budget allows it; otherwise it records
// nothing and reports false.
func (b *retryBudget) withdraw(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, epoch := b.current(now)
	var deposits, withdrawals int64
	for i := range b.slots {
		if e := b.slots[i].epoch; e > epoch-budgetSlots && e <= epoch {
			deposits += b.slots[i].deposits
			withdrawals += b.slots[i].withdrawals
		}
	}
	if b.ratio*float64(deposits)+b.reserve-float64(withdrawals) < 1 {
		return false
	}
	s.withdrawals++
	return true
}
