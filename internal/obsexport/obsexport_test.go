package obsexport

import (
	"slices"
	"testing"

	"github.com/gatedsql/gated"
)

// TestRejectedYieldsEveryReason: one label value per gated.RejectReason, each with its own Stats
// counter, and stopping when the caller stops.
func TestRejectedYieldsEveryReason(t *testing.T) {
	s := gated.Stats{RejectedFull: 1, RejectedTimeout: 2, RejectedDisplaced: 3}
	type pair struct {
		reason string
		n      int64
	}
	var got []pair
	for reason, n := range Rejected(&s) {
		got = append(got, pair{reason, n})
	}
	want := []pair{{"full", 1}, {"timeout", 2}, {"displaced", 3}}
	if !slices.Equal(got, want) {
		t.Errorf("Rejected = %v, want %v", got, want)
	}
	for _, r := range []gated.RejectReason{gated.RejectFull, gated.RejectTimeout, gated.RejectDisplaced} {
		if !slices.ContainsFunc(got, func(p pair) bool { return p.reason == r.String() }) {
			t.Errorf("reason %s not yielded", r)
		}
	}
	for stop := range len(want) {
		var seen int
		for range Rejected(&s) {
			if seen == stop {
				break
			}
			seen++
		}
		if seen != stop {
			t.Errorf("break after %d: saw %d", stop, seen)
		}
	}
}
