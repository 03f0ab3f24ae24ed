package gatedhttp

import (
	"testing"
	"time"
)

func TestRetryBudgetAllowsRatioOfRequestsPlusFloor(t *testing.T) {
	b := newRetryBudget(0.2, 1, 10*time.Second) // reserve: 1/s × 10 s = 10 retries
	t0 := time.Unix(1_000_000, 0)
	for range 100 {
		b.deposit(t0)
	}
	allowed := 0
	for b.withdraw(t0.Add(time.Second)) {
		allowed++
		if allowed > 1000 {
			t.Fatal("budget never ran out")
		}
	}
	if want := 100*0.2 + 10; allowed != int(want) {
		t.Errorf("retries allowed after 100 requests = %d, want %v (20 %% + floor of 10)", allowed, want)
	}
	// After the window, deposits and withdrawals have expired: only the floor is left.
	later := t0.Add(11 * time.Second)
	allowed = 0
	for b.withdraw(later) {
		allowed++
		if allowed > 1000 {
			t.Fatal("budget never ran out")
		}
	}
	if allowed != 10 {
		t.Errorf("retries allowed a window later without requests = %d, want the floor's 10", allowed)
	}
}

func TestRetryBudgetWithoutFloorNeedsRequests(t *testing.T) {
	b := newRetryBudget(0.2, 0, 10*time.Second)
	now := time.Unix(1_000_000, 0)
	if b.withdraw(now) {
		t.Fatal("retry allowed before any request")
	}
	for range 4 {
		b.deposit(now)
	}
	if b.withdraw(now) {
		t.Fatal("retry allowed after 4 requests at 20 % (0.8 tokens)")
	}
	b.deposit(now)
	if !b.withdraw(now) {
		t.Fatal("retry refused after 5 requests at 20 %")
	}
	if b.withdraw(now) {
		t.Fatal("second retry allowed after 5 requests at 20 %")
	}
}
