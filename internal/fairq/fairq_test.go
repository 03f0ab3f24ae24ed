package fairq

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
)

type waiter struct {
	tenant string
	level  int
	seq    int
	it     Item[*waiter]
}

type harness struct {
	q   Queue[*waiter]
	seq int
}

func (h *harness) push(tenant string, level int) *waiter {
	h.seq++
	w := &waiter{tenant: tenant, level: level, seq: h.seq}
	w.it.Value = w
	h.q.Push(&w.it, tenant, level)
	return w
}

func (h *harness) next(t *testing.T, newest bool) *waiter {
	t.Helper()
	it := h.q.Next(newest)
	if it == nil {
		t.Fatal("Next returned nil with waiters queued")
	}
	if it.f != nil {
		t.Fatal("Next left the item queued")
	}
	return it.Value
}

func names(ws []*waiter) []string {
	var s []string
	for _, w := range ws {
		s = append(s, fmt.Sprintf("%s%d", w.tenant, w.seq))
	}
	return s
}

func TestHigherLevelsAreServedFirst(t *testing.T) {
	var h harness
	h.push("", 0)
	h.push("", 1)
	h.push("", 2)
	h.push("", 1)
	var got []int
	for h.q.Len() > 0 {
		got = append(got, h.next(t, false).level)
	}
	if want := []int{2, 1, 1, 0}; !slices.Equal(got, want) {
		t.Fatalf("levels served %v, want %v", got, want)
	}
	if h.q.Next(false) != nil {
		t.Fatal("Next on an empty queue returned an item")
	}
}

func TestTenantsTakeTurnsFirstInFirstOutWithinOne(t *testing.T) {
	var h harness
	for range 3 {
		h.push("a", 1)
	}
	for range 2 {
		h.push("b", 1)
	}
	h.push("c", 1)
	// a is served first (it began waiting first, as a sparse flow), then b and c, each once as
	// sparse flows; then a and b take turns.
	var got []*waiter
	for h.q.Len() > 0 {
		got = append(got, h.next(t, false))
	}
	if want := []string{"a1", "b4", "c6", "a2", "b5", "a3"}; !slices.Equal(names(got), want) {
		t.Fatalf("served %v, want %v", names(got), want)
	}
}

func TestASparseTenantIsServedBeforeTheTurns(t *testing.T) {
	var h harness
	for range 4 {
		h.push("noisy", 1)
	}
	h.next(t, false) // noisy's flow has had its sparse turn and takes turns now
	h.push("small", 1)
	if w := h.next(t, false); w.tenant != "small" {
		t.Fatalf("served %s%d, want the small tenant that had nobody waiting", w.tenant, w.seq)
	}
	// A second waiter of a tenant already queued does not make it sparse again.
	h.push("small", 1)
	h.push("small", 1)
	got := []string{h.next(t, false).tenant, h.next(t, false).tenant}
	if !slices.Equal(got, []string{"small", "noisy"}) {
		t.Fatalf("served %v, want small (sparse again: its flow had emptied), then noisy", got)
	}
}

func TestNewestFirstWithinTheFlow(t *testing.T) {
	var h harness
	h.push("a", 1)
	h.push("a", 1)
	h.push("b", 1)
	if w := h.next(t, true); w.seq != 2 {
		t.Fatalf("served a%d, want a's newest, a2", w.seq)
	}
	if w := h.next(t, true); w.tenant != "b" {
		t.Fatalf("served %s, want b, whose turn it is", w.tenant)
	}
}

func TestVictim(t *testing.T) {
	var h harness
	if h.q.Victim("a", 2) != nil {
		t.Fatal("an empty queue has a victim")
	}
	low1 := h.push("x", 0)
	low2 := h.push("y", 0)
	low3 := h.push("y", 0)
	h.push("n", 1)
	// A high arrival displaces the newest waiter of the lowest level's largest flow.
	if v := h.q.Victim("z", 2); v == nil || v.Value != low3 {
		t.Fatalf("victim of a high arrival %v, want y3", v)
	}
	// So does a normal one; a low one has nobody below it and x, y differ by one.
	if v := h.q.Victim("z", 1); v == nil || v.Value != low3 {
		t.Fatalf("victim of a normal arrival %v, want y3", v)
	}
	if v := h.q.Victim("x", 0); v != nil {
		t.Fatalf("victim of a low arrival of x (1 waiting against y's 2) %v, want none", v.Value)
	}
	if v := h.q.Victim("new", 0); v == nil || v.Value != low3 {
		t.Fatalf("victim of a low arrival of a new tenant (0 against y's 2) %v, want y3", v)
	}
	h.q.Remove(&low3.it)
	if v := h.q.Victim("new", 0); v != nil {
		t.Fatalf("victim of a low arrival of a new tenant (0 against 1 and 1) %v, want none", v.Value)
	}
	h.q.Remove(&low1.it)
	h.q.Remove(&low2.it)
	if v := h.q.Victim("z", 2); v == nil || v.Value.tenant != "n" {
		t.Fatalf("victim of a high arrival once the low level emptied %v, want n's waiter", v)
	}
	if v := h.q.Victim("n", 1); v != nil {
		t.Fatal("an arrival displaced a waiter of its own flow")
	}
}

// TestInvariantsUnderRandomOperations checks, after every one of many random pushes, removals
// and services, what the gate relies on: the count, each flow first in first out, Next serving
// the highest level, and Victim choosing as documented, against a plain model of the waiters.
func TestInvariantsUnderRandomOperations(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h harness
	var live []*waiter // in push order
	tenants := []string{"", "a", "b", "c", "d"}
	for i := range 50000 {
		switch op := r.IntN(10); {
		case (op < 5 && len(live) < 100) || len(live) == 0:
			live = append(live, h.push(tenants[r.IntN(len(tenants))], r.IntN(Levels)))
		case op < 7:
			j := r.IntN(len(live))
			h.q.Remove(&live[j].it)
			live = slices.Delete(live, j, j+1)
		case op < 9:
			newest := r.IntN(4) == 0
			w := h.next(t, newest)
			top := -1
			for _, x := range live {
				top = max(top, x.level)
			}
			if w.level != top {
				t.Fatalf("op %d: Next served level %d with level %d waiting", i, w.level, top)
			}
			// Oldest (or newest) of its flow.
			for _, x := range live {
				if x != w && x.tenant == w.tenant && x.level == w.level && (x.seq < w.seq) != newest {
					t.Fatalf("op %d: Next served %s%d before %s%d of the same flow (newest=%v)", i, w.tenant, w.seq, x.tenant, x.seq, newest)
				}
			}
			live = slices.DeleteFunc(live, func(x *waiter) bool { return x == w })
		default:
			tenant, lvl := tenants[r.IntN(len(tenants))], r.IntN(Levels)
			checkVictim(t, i, &h.q, live, tenant, lvl)
		}
		if h.q.Len() != len(live) {
			t.Fatalf("op %d: Len %d, want %d", i, h.q.Len(), len(live))
		}
	}
	for h.q.Len() > 0 {
		h.next(t, false)
	}
	if len(h.q.flows) != 0 {
		t.Fatalf("an empty queue keeps %d flows", len(h.q.flows))
	}
	for l := range h.q.levels {
		if h.q.levels[l].anon != nil {
			t.Fatalf("an empty queue keeps the flow of the empty tenant at level %d", l)
		}
	}
}

func checkVictim(t *testing.T, i int, q *Queue[*waiter], live []*waiter, tenant string, lvl int) {
	t.Helper()
	count := map[flowKey]int{}
	lowest := Levels
	for _, x := range live {
		count[flowKey{x.tenant, int8(x.level)}]++
		lowest = min(lowest, x.level)
	}
	most := func(l int) int {
		m := 0
		for k, n := range count {
			if int(k.level) == l {
				m = max(m, n)
			}
		}
		return m
	}
	v := q.Victim(tenant, lvl)
	var want int // the victim's level, or -1 for none
	switch {
	case lowest < lvl:
		want = lowest
	case lowest == lvl && count[flowKey{tenant, int8(lvl)}]+1 < most(lvl):
		want = lvl
	default:
		want = -1
	}
	if want < 0 {
		if v != nil {
			t.Fatalf("op %d: arrival %q at %d displaces %s%d, want nobody", i, tenant, lvl, v.Value.tenant, v.Value.seq)
		}
		return
	}
	if v == nil {
		t.Fatalf("op %d: arrival %q at %d displaces nobody, want a waiter at level %d", i, tenant, lvl, want)
	}
	w := v.Value
	if w.level != want || count[flowKey{w.tenant, int8(w.level)}] != most(want) {
		t.Fatalf("op %d: victim %s%d at level %d of a flow of %d, want level %d and a flow of %d",
			i, w.tenant, w.seq, w.level, count[flowKey{w.tenant, int8(w.level)}], want, most(want))
	}
	for _, x := range live {
		if x.tenant == w.tenant && x.level == w.level && x.seq > w.seq {
			t.Fatalf("op %d: victim %s%d is not its flow's newest (%d is)", i, w.tenant, w.seq, x.seq)
		}
	}
}

// TestDistinctKeysLeaveNothingBehind: a million tenants, each waiting once with at most 64
// waiting at a time, leave the queue no larger than 64 waiters ever made it.
func TestDistinctKeysLeaveNothingBehind(t *testing.T) {
	var h harness
	fill := func(from, to int) {
		var live []*waiter
		for i := from; i < to; i++ {
			live = append(live, h.push(fmt.Sprintf("tenant-%d", i), i%Levels))
			if len(live) == 64 {
				for _, w := range live {
					h.q.Remove(&w.it)
				}
				live = live[:0]
			}
		}
	}
	fill(0, 10000) // the queue's own growth: its map and flows for 64 waiters
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fill(10000, 1010000)
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 256<<10 {
		t.Fatalf("the heap grew by %d KiB over a million distinct keys", grew>>10)
	}
	runtime.KeepAlive(&h)
}

// BenchmarkPushNext: one waiter in and one served, with 32 waiting: all without a tenant, and
// across 8 tenants.
func BenchmarkPushNext(b *testing.B) {
	for _, tenants := range []int{0, 8} {
		b.Run(fmt.Sprint("tenants=", tenants), func(b *testing.B) {
			var h harness
			var idle []*waiter
			for i := range 64 {
				w := &waiter{}
				if tenants > 0 {
					w.tenant = fmt.Sprintf("t%d", i%tenants)
				}
				w.it.Value = w
				idle = append(idle, w)
			}
			for _, w := range idle[32:] {
				h.q.Push(&w.it, w.tenant, 1)
			}
			idle = idle[:32]
			b.ReportAllocs()
			for b.Loop() {
				w := idle[len(idle)-1]
				h.q.Push(&w.it, w.tenant, 1)
				idle[len(idle)-1] = h.q.Next(false).Value
			}
		})
	}
}
