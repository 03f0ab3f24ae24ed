package fleet

import (
	"slices"
	"testing"
	"time"
)

// TestFleetExpectsTheEarliestLapse: after a refresh, a member plans its next one at the earliest
// expiry of another lease that nothing but its TTL keeps counted (its lock is gone), and what to
// ask for then: its fair share in the fleet without those leases. Leases whose lock is held, its
// own, expired ones and dead rows plan nothing, so a healthy fleet keeps its regular refreshes.
func TestFleetExpectsTheEarliestLapse(t *testing.T) {
	totals := Share{Conns: 12, Concurrent: []int{10}, Queue: []int{20}}
	m := New(Config{Name: "a", TTL: 3 * time.Second, Refresh: time.Second, Totals: totals}, nil, nil, nil)
	row := func(id int32, live, locked bool, left time.Duration) fleetRow {
		return fleetRow{member: id, live: live, locked: locked, left: left, totals: totals}
	}
	me := row(3, true, true, 3*time.Second)
	me.mine = true
	got := time.Now()

	healthy := &View{mine: true, rows: []fleetRow{
		row(1, true, true, 2*time.Second),
		me,
		row(4, true, true, -time.Second), // its refreshes late, its lock held: counted
		row(5, false, false, -time.Hour), // dead
	}}
	m.expectLapse(healthy, got)
	if !m.lapseAt.IsZero() || m.afterLive != nil {
		t.Errorf("in a fleet whose live leases all hold their locks the member plans a refresh at %v, expecting %v live", m.lapseAt, m.afterLive)
	}

	dying := &View{mine: true, rows: []fleetRow{
		row(1, true, true, 2*time.Second),
		row(2, true, false, 800*time.Millisecond), // crashed: expires first
		me,
		row(6, true, false, 800*time.Millisecond), // crashed with it
		row(7, true, false, 900*time.Millisecond), // crashed later
		row(4, true, true, -time.Second),
		row(5, false, false, -time.Hour),
	}}
	m.expectLapse(dying, got)
	if want := got.Add(800*time.Millisecond + lapseMargin); !m.lapseAt.Equal(want) {
		t.Errorf("the member plans its refresh %v after the last one, want %v: the earliest lapse and the margin", m.lapseAt.Sub(got), want.Sub(got))
	}
	if !slices.Equal(m.afterLive, []int{1, 4, 7}) {
		t.Errorf("the member expects %v live besides it after the lapse, want [1 4 7]", m.afterLive)
	}
	if want := TargetShare(totals, 4, 1); !m.afterTarget.Equal(want) {
		t.Errorf("the member plans to ask for %v, want %v: its share as the second of four", m.afterTarget, want)
	}

	m.expectLapse(&View{rows: dying.rows}, got) // the refresh did not count the member
	if !m.lapseAt.IsZero() || m.afterLive != nil {
		t.Errorf("a member the fleet does not count plans a refresh at %v, expecting %v live", m.lapseAt, m.afterLive)
	}
}
