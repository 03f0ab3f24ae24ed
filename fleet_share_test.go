package gated

import (
	"fmt"
	"slices"
	"testing"
)

// TestFleetSharesNeverAddUpAboveTheTotals divides every small set of totals among every fleet
// size up to more members than connections, and checks each rule of the arithmetic: the shares of
// one total add up to exactly that total before fit and to at most it after; every share is within
// one of total/n; a fitted share's B fit in its connections beside the lease connection; a gate
// without B has no queue; members beyond the connections get no seat.
func TestFleetSharesNeverAddUpAboveTheTotals(t *testing.T) {
	var cases int
	for conns := 0; conns <= 13; conns++ {
		for _, gates := range [][2][]int{
			{{0}, {0}},
			{{1}, {0}},
			{{conns}, {conns}},
			{{conns / 2}, {3}},
			{{max(conns-3, 0), 2}, {5, 1}},
			{{max(conns-4, 0), 1, 3}, {0, 7, 2}},
			{{conns / 3, conns / 3, conns / 3}, {1, 1, 1}},
		} {
			total := share{conns: conns, concurrent: gates[0], queue: gates[1]}
			if sum(total.concurrent) > conns {
				continue
			}
			for n := 1; n <= conns+4; n++ {
				cases++
				checkShares(t, total, n)
			}
		}
	}
	t.Logf("%d fleets checked", cases)
}

func checkShares(t *testing.T, total share, n int) {
	t.Helper()
	name := fmt.Sprintf("totals %v among %d", total, n)
	var sumConns, sumFitConns int
	sumB := make([]int, len(total.concurrent))
	sumFitB := make([]int, len(total.concurrent))
	sumQ := make([]int, len(total.queue))
	sumFitQ := make([]int, len(total.queue))
	for rank := range n {
		fair := fairShare(total, n, rank)
		fit := fair.fit()
		if !fit.within(fair) {
			t.Fatalf("%s: rank %d: fit %v is above the fair share %v", name, rank, fit, fair)
		}
		if !fit.fit().equal(fit) {
			t.Fatalf("%s: rank %d: fit is not idempotent: %v, then %v", name, rank, fit, fit.fit())
		}
		if !targetShare(total, n, rank).equal(fit) {
			t.Fatalf("%s: rank %d: targetShare differs from the fitted fair share", name, rank)
		}
		checkNear(t, name, rank, "conns", fair.conns, total.conns, n)
		if rank >= total.conns && fair.conns != 0 {
			t.Fatalf("%s: rank %d beyond %d connections has conns %d, want no seat", name, rank, total.conns, fair.conns)
		}
		if b := sum(fit.concurrent); b > fit.dataConns() {
			t.Fatalf("%s: rank %d: B adds up to %d, more than the %d connections beside the lease in %v", name, rank, b, fit.dataConns(), fit)
		}
		sumConns += fair.conns
		sumFitConns += fit.conns
		for g := range total.concurrent {
			checkNear(t, name, rank, fmt.Sprintf("concurrent[%d]", g), fair.concurrent[g], total.concurrent[g], n)
			checkNear(t, name, rank, fmt.Sprintf("queue[%d]", g), fair.queue[g], total.queue[g], n)
			if fit.concurrent[g] == 0 && fit.queue[g] != 0 {
				t.Fatalf("%s: rank %d: gate %d has no B but a queue of %d", name, rank, g, fit.queue[g])
			}
			sumB[g] += fair.concurrent[g]
			sumFitB[g] += fit.concurrent[g]
			sumQ[g] += fair.queue[g]
			sumFitQ[g] += fit.queue[g]
		}
	}
	if sumConns != total.conns || sumFitConns > total.conns {
		t.Fatalf("%s: conns add up to %d (fitted %d), want exactly %d", name, sumConns, sumFitConns, total.conns)
	}
	for g := range total.concurrent {
		if sumB[g] != total.concurrent[g] || sumFitB[g] > total.concurrent[g] {
			t.Fatalf("%s: gate %d: B adds up to %d (fitted %d), want exactly %d", name, g, sumB[g], sumFitB[g], total.concurrent[g])
		}
		if sumQ[g] != total.queue[g] || sumFitQ[g] > total.queue[g] {
			t.Fatalf("%s: gate %d: Q adds up to %d (fitted %d), want exactly %d", name, g, sumQ[g], sumFitQ[g], total.queue[g])
		}
	}
}

// checkNear fails unless v is total/n rounded down or up.
func checkNear(t *testing.T, name string, rank int, what string, v, total, n int) {
	t.Helper()
	if lo := total / n; v < lo || v > lo+1 || (v == lo+1 && total%n == 0) {
		t.Fatalf("%s: rank %d: %s = %d, not within one of %d/%d", name, rank, what, v, total, n)
	}
}

// TestFleetShareExtrasFollowTheExtraConnections checks that the member with an extra connection
// also gets the extra permits, so that fit does not waste them: 5 connections and B=4 between
// two members are 3+2 connections and 2+1 permits in use, not 2+2 with one clamped away.
func TestFleetShareExtrasFollowTheExtraConnections(t *testing.T) {
	total := share{conns: 5, concurrent: []int{3}, queue: []int{3}}
	a, b := targetShare(total, 2, 0), targetShare(total, 2, 1)
	if a.conns != 3 || b.conns != 2 || a.concurrent[0] != 2 || b.concurrent[0] != 1 {
		t.Fatalf("shares %v and %v, want conns 3 and 2 with B 2 and 1", a, b)
	}
}

// TestFleetShareWithMoreMembersThanConnections shows what members beyond the budget get: the
// first gate_max_conns members hold a seat of one connection, their lease, and no permit; the
// others hold nothing and refuse every operation.
func TestFleetShareWithMoreMembersThanConnections(t *testing.T) {
	total := share{conns: 3, concurrent: []int{3}, queue: []int{6}}
	var got []int
	for rank := range 5 {
		s := targetShare(total, 5, rank)
		got = append(got, s.conns, s.concurrent[0], s.queue[0])
	}
	want := []int{1, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0}
	if !slices.Equal(got, want) {
		t.Fatalf("conns, B, Q by rank = %v, want %v", got, want)
	}
}

func TestFleetShareArraysRoundTrip(t *testing.T) {
	for _, v := range [][]int{nil, {0}, {3, 12, 0}} {
		s := sqlInts(v)
		got, err := parseInts(s[1 : len(s)-1])
		if err != nil || !slices.Equal(got, v) {
			t.Fatalf("%v -> %q -> %v, %v", v, s, got, err)
		}
	}
	if _, err := parseInts("1,x"); err == nil {
		t.Fatal("parseInts accepted 1,x")
	}
}

// TestFleetGrowingNeverLowersAGate: growing from a fitted share toward any grant at least as
// large gives a share that is nowhere below the one held, nowhere above the grant, and fitted;
// so growing into a grant that raises one gate never takes permits from another.
func TestFleetGrowingNeverLowersAGate(t *testing.T) {
	total := share{conns: 9, concurrent: []int{5, 3}, queue: []int{4, 2}}
	var cases int
	for n := 1; n <= 5; n++ {
		for rank := range n {
			have := targetShare(total, n, rank)
			for dc := 0; dc <= 3; dc++ {
				for db0 := 0; db0 <= 3; db0++ {
					for db1 := 0; db1 <= 3; db1++ {
						grant := have.clone()
						grant.conns += dc
						grant.concurrent[0] += db0
						grant.concurrent[1] += db1
						grant.queue[0] += db0
						grant.queue[1]++
						got := have.growToward(grant)
						cases++
						if !have.within(got) || !got.within(grant) || !got.fit().equal(got) {
							t.Fatalf("from %v toward %v: %v (must be between them, and fitted)", have, grant, got)
						}
					}
				}
			}
		}
	}
	t.Logf("%d growths checked", cases)
}
