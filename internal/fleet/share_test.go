package fleet

import (
	"fmt"
	"slices"
	"testing"
)

// TestFleetSharesNeverAddUpAboveTheTotals divides every small set of totals among every fleet
// size up to more members than connections, and checks each rule of the arithmetic: the shares of
// one total add up to exactly that total before fit and to at most it after; the seats are the
// first min(n, P, ΣB) ranks, and every seat's share is within one of total/seats; a fitted share's
// B fit in its connections (the lease connection is outside the share); a seated member has a
// permit; a gate without B has no queue; members beyond the seats get nothing.
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
			total := Share{Conns: conns, Concurrent: gates[0], Queue: gates[1]}
			if Sum(total.Concurrent) > conns {
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

func checkShares(t *testing.T, total Share, n int) {
	t.Helper()
	name := fmt.Sprintf("totals %v among %d", total, n)
	var sumConns, sumFitConns int
	sumB := make([]int, len(total.Concurrent))
	sumFitB := make([]int, len(total.Concurrent))
	sumQ := make([]int, len(total.Queue))
	sumFitQ := make([]int, len(total.Queue))
	seats := min(n, total.Conns)
	if b := Sum(total.Concurrent); b > 0 {
		seats = min(seats, b)
	}
	for rank := range n {
		fair := fairShare(total, n, rank)
		fit := fair.fit()
		if !fit.Within(fair) {
			t.Fatalf("%s: rank %d: fit %v is above the fair share %v", name, rank, fit, fair)
		}
		if !fit.fit().Equal(fit) {
			t.Fatalf("%s: rank %d: fit is not idempotent: %v, then %v", name, rank, fit, fit.fit())
		}
		if !TargetShare(total, n, rank).Equal(fit) {
			t.Fatalf("%s: rank %d: TargetShare differs from the fitted fair share", name, rank)
		}
		if rank >= seats {
			if !fair.Equal(ZeroShare(len(total.Concurrent))) {
				t.Fatalf("%s: rank %d beyond the %d seats has %v, want nothing", name, rank, seats, fair)
			}
			continue
		}
		checkNear(t, name, rank, "conns", fair.Conns, total.Conns, seats)
		if fit.Conns < 1 {
			t.Fatalf("%s: rank %d of %d seats has no connection: %v", name, rank, seats, fit)
		}
		if b := Sum(fit.Concurrent); b > fit.DataConns() || (b < 1 && Sum(total.Concurrent) > 0) {
			t.Fatalf("%s: rank %d: B adds up to %d in %v, want 1 to its %d connections", name, rank, b, fit, fit.DataConns())
		}
		sumConns += fair.Conns
		sumFitConns += fit.Conns
		for g := range total.Concurrent {
			checkNear(t, name, rank, fmt.Sprintf("concurrent[%d]", g), fair.Concurrent[g], total.Concurrent[g], seats)
			checkNear(t, name, rank, fmt.Sprintf("queue[%d]", g), fair.Queue[g], total.Queue[g], seats)
			if fit.Concurrent[g] == 0 && fit.Queue[g] != 0 {
				t.Fatalf("%s: rank %d: gate %d has no B but a queue of %d", name, rank, g, fit.Queue[g])
			}
			sumB[g] += fair.Concurrent[g]
			sumFitB[g] += fit.Concurrent[g]
			sumQ[g] += fair.Queue[g]
			sumFitQ[g] += fit.Queue[g]
		}
	}
	if seats == 0 {
		return // no connection to share: everyone holds nothing, checked above
	}
	if sumConns != total.Conns || sumFitConns > total.Conns {
		t.Fatalf("%s: conns add up to %d (fitted %d), want exactly %d", name, sumConns, sumFitConns, total.Conns)
	}
	for g := range total.Concurrent {
		if sumB[g] != total.Concurrent[g] || sumFitB[g] > total.Concurrent[g] {
			t.Fatalf("%s: gate %d: B adds up to %d (fitted %d), want exactly %d", name, g, sumB[g], sumFitB[g], total.Concurrent[g])
		}
		if sumQ[g] != total.Queue[g] || sumFitQ[g] > total.Queue[g] {
			t.Fatalf("%s: gate %d: Q adds up to %d (fitted %d), want exactly %d", name, g, sumQ[g], sumFitQ[g], total.Queue[g])
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
// also gets the extra permits, so that fit does not waste them: 3 connections and B=3 between
// two members are 2+1 connections and 2+1 permits in use, not 1+2 with one clamped away.
func TestFleetShareExtrasFollowTheExtraConnections(t *testing.T) {
	total := Share{Conns: 3, Concurrent: []int{3}, Queue: []int{3}}
	a, b := TargetShare(total, 2, 0), TargetShare(total, 2, 1)
	if a.Conns != 2 || b.Conns != 1 || a.Concurrent[0] != 2 || b.Concurrent[0] != 1 {
		t.Fatalf("shares %v and %v, want conns 2 and 1 with B 2 and 1", a, b)
	}
}

// TestFleetShareWithMoreMembersThanConnections shows what members beyond the budget get: the
// first gate_max_conns members hold a seat of one working connection and one permit (their lease
// connection is outside the share); the others hold nothing and refuse every operation.
func TestFleetShareWithMoreMembersThanConnections(t *testing.T) {
	total := Share{Conns: 3, Concurrent: []int{3}, Queue: []int{6}}
	var got []int
	for rank := range 5 {
		s := TargetShare(total, 5, rank)
		got = append(got, s.Conns, s.Concurrent[0], s.Queue[0])
	}
	want := []int{1, 1, 2, 1, 1, 2, 1, 1, 2, 0, 0, 0, 0, 0, 0}
	if !slices.Equal(got, want) {
		t.Fatalf("conns, B, Q by rank = %v, want %v", got, want)
	}
}

// TestFleetShareSeatedMembersHaveAPermit: a member with a connection always has a permit, also
// when there are fewer permits than connections (the seats are then as many as the permits), and
// with seven members on twelve connections, where a lease counted inside the share left two of
// them a connection and no permit.
func TestFleetShareSeatedMembersHaveAPermit(t *testing.T) {
	for _, tc := range []struct {
		total Share
		n     int
		want  []int // conns, B by rank
	}{
		{Share{Conns: 12, Concurrent: []int{12}, Queue: []int{12}}, 7, []int{2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1}},
		{Share{Conns: 12, Concurrent: []int{12}, Queue: []int{12}}, 6, []int{2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2}},
		{Share{Conns: 8, Concurrent: []int{3}, Queue: []int{3}}, 5, []int{3, 1, 3, 1, 2, 1, 0, 0, 0, 0}},
		{Share{Conns: 6, Concurrent: []int{1, 2}, Queue: []int{0, 0}}, 4, []int{2, 1, 2, 1, 2, 1, 0, 0}},
	} {
		var got []int
		for rank := range tc.n {
			s := TargetShare(tc.total, tc.n, rank)
			got = append(got, s.Conns, Sum(s.Concurrent))
			if s.Conns > 0 && Sum(s.Concurrent) < 1 {
				t.Errorf("totals %v among %d: rank %d is seated with no permit: %v", tc.total, tc.n, rank, s)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("totals %v among %d: conns, B by rank = %v, want %v", tc.total, tc.n, got, tc.want)
		}
	}
}

func TestFleetShareArraysRoundTrip(t *testing.T) {
	for _, v := range [][]int{nil, {0}, {3, 12, 0}} {
		s := SQLInts(v)
		got, err := ParseInts(s[1 : len(s)-1])
		if err != nil || !slices.Equal(got, v) {
			t.Fatalf("%v -> %q -> %v, %v", v, s, got, err)
		}
	}
	if _, err := ParseInts("1,x"); err == nil {
		t.Fatal("parseInts accepted 1,x")
	}
}

// TestFleetGrowingNeverLowersAGate: growing from a fitted share toward any grant at least as
// large gives a share that is nowhere below the one held, nowhere above the grant, and fitted;
// so growing into a grant that raises one gate never takes permits from another.
func TestFleetGrowingNeverLowersAGate(t *testing.T) {
	total := Share{Conns: 9, Concurrent: []int{5, 3}, Queue: []int{4, 2}}
	var cases int
	for n := 1; n <= 5; n++ {
		for rank := range n {
			have := TargetShare(total, n, rank)
			for dc := 0; dc <= 3; dc++ {
				for db0 := 0; db0 <= 3; db0++ {
					for db1 := 0; db1 <= 3; db1++ {
						grant := have.Clone()
						grant.Conns += dc
						grant.Concurrent[0] += db0
						grant.Concurrent[1] += db1
						grant.Queue[0] += db0
						grant.Queue[1]++
						got := have.GrowToward(grant)
						cases++
						if !have.Within(got) || !got.Within(grant) || !got.fit().Equal(got) {
							t.Fatalf("from %v toward %v: %v (must be between them, and fitted)", have, grant, got)
						}
					}
				}
			}
		}
	}
	t.Logf("%d growths checked", cases)
}
