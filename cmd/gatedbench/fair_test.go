package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatedsql/gated"
	"github.com/gatedsql/gated/internal/pgtest"
)

func TestParseFairFlags(t *testing.T) {
	fc, err := parseFairFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if fc.P != 8 || fc.Q != 8 || fc.queueWait != 50*time.Millisecond || fc.deadline != time.Second ||
		fc.noisy != 64 || fc.cardW != 64 || fc.small != 7 || fc.pause != 20*time.Millisecond || fc.keys != 200000 || fc.rounds != 5 {
		t.Errorf("defaults: %+v", fc)
	}
	if got := fc.sleepQuery(); got != "SELECT pg_sleep(0.02)" {
		t.Errorf("query %q", got)
	}
	if got := strings.Join(fc.scenarios, ","); got != "noisy,priority,lockstep,cardinality" {
		t.Errorf("scenarios %q", got)
	}
	// Per round: unloaded, the noisy tenant alone, two mixed loads, two priority loads, two
	// lockstep loads.
	if got, want := fc.estimate(), 5*8*(5*time.Second+500*time.Millisecond); got != want {
		t.Errorf("estimate %v, want %v", got, want)
	}
	fc, err = parseFairFlags([]string{"-rounds", "1", "-phase", "2s", "-scenarios", "cardinality, noisy,noisy"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if fc.rounds != 1 || fc.phase != 2*time.Second || strings.Join(fc.scenarios, ",") != "cardinality,noisy" {
		t.Errorf("-rounds 1 -phase 2s -scenarios cardinality,noisy: %+v", fc)
	}
	if !fc.runs("noisy") || fc.runs("priority") {
		t.Errorf("runs: noisy %v, priority %v", fc.runs("noisy"), fc.runs("priority"))
	}
	if got, want := fc.estimate(), 4*(2*time.Second+500*time.Millisecond); got != want {
		t.Errorf("estimate of noisy and cardinality %v, want %v", got, want)
	}
	if want := "go run ./cmd/gatedbench fair -rounds 1 -phase 2s -scenarios 'cardinality, noisy,noisy'"; fc.command != want {
		t.Errorf("command %q, want %q", fc.command, want)
	}
	for _, args := range [][]string{
		{"-scenarios", "noisy,overload"},
		{"-rounds", "0"},
		{"-small", "0"},
		{"-keys", "0"},
		{"-card-workers", "0"},
		{"-phase", "0s"},
		{"-P", "0"},
		{"extra"},
	} {
		if _, err := parseFairFlags(args, io.Discard); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}

func TestFailKindTellsTheRefusalsApart(t *testing.T) {
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	for _, c := range []struct {
		err, ctxErr error
		want        int
	}{
		{&gated.RejectedError{Workload: "default", Reason: gated.RejectDisplaced}, nil, kindDisplaced},
		{fmt.Errorf("query: %w", gated.ErrAdmissionDisplaced), nil, kindDisplaced},
		{&gated.RejectedError{Workload: "default", Reason: gated.RejectFull}, nil, kindFull},
		{&gated.RejectedError{Workload: "default", Reason: gated.RejectTimeout}, nil, kindTimeout},
		// A refusal is a refusal even if the deadline passed meanwhile.
		{gated.ErrAdmissionTimeout, expired.Err(), kindTimeout},
		{context.DeadlineExceeded, nil, kindDeadline},
		{errors.New("conn closed"), expired.Err(), kindDeadline},
		{errors.New("syntax error"), nil, kindOther},
	} {
		if got := failKind(c.err, c.ctxErr); got != c.want {
			t.Errorf("failKind(%v, %v) = %s, want %s", c.err, c.ctxErr, kindNames[got], kindNames[c.want])
		}
	}
}

// fakeTally counts ok successes of d and the failures by kind.
func fakeTally(ok int64, d time.Duration, fails map[int]int64) *tally {
	t := &tally{OK: ok, Calls: ok}
	for range ok {
		t.Hist.record(d)
	}
	for k, n := range fails {
		t.Fail[k] = n
		t.Calls += n
	}
	return t
}

func TestWorstSmallTakesEachMeasureFromItsOwnWorst(t *testing.T) {
	p := &phaseResult{Elapsed: time.Second, Groups: map[string]*tally{
		noisyGroup: fakeTally(1000, time.Second, map[int]int64{kindFull: 9000}), // not small: ignored
		"small-1":  fakeTally(90, 30*time.Millisecond, map[int]int64{kindFull: 10}),
		"small-2":  fakeTally(100, 80*time.Millisecond, nil),
		"small-3":  fakeTally(99, 20*time.Millisecond, map[int]int64{kindDisplaced: 1}),
	}}
	w := worstSmall(p, smallNames(3))
	if w.RateOf != "small-1" || w.Rate != 0.9 {
		t.Errorf("worst rate %v of %s, want 0.9 of small-1", w.Rate, w.RateOf)
	}
	if w.P99Of != "small-2" || w.P99 < 79*time.Millisecond || w.P99 > 81*time.Millisecond {
		t.Errorf("worst p99 %v of %s, want 80ms of small-2", w.P99, w.P99Of)
	}
	// A small tenant that made no call at all is the worst, with a success rate of 0.
	if w := worstSmall(p, smallNames(4)); w.RateOf != "small-4" || w.Rate != 0 {
		t.Errorf("with a silent small-4: worst rate %v of %s", w.Rate, w.RateOf)
	}
	if got := p.goodput("small-1", "small-2"); got != 190 {
		t.Errorf("goodput of two small tenants %v, want 190", got)
	}
	if got := p.goodput(); got != 1289 {
		t.Errorf("goodput of all %v, want 1289", got)
	}
}

func TestSpacingOfMeasuresTheGapsBetweenSuccesses(t *testing.T) {
	// Two groups of four successes 20 ms apart, each group within 0.3 ms, given out of order.
	t0 := time.Now()
	var ends []time.Time
	for g := range 5 {
		for k := range 4 {
			ends = append(ends, t0.Add(time.Duration(g)*20*time.Millisecond+time.Duration(k)*100*time.Microsecond))
		}
	}
	ends[0], ends[len(ends)-1] = ends[len(ends)-1], ends[0]
	s := spacingOf(ends, 100*time.Millisecond)
	// 19 gaps: 15 of 0.1 ms within the groups, 4 of 19.7 ms between them.
	if want := 15.0 / 19; s.Close != want {
		t.Errorf("close %v, want %v", s.Close, want)
	}
	near := func(d, want time.Duration) bool { return d >= want*98/100 && d <= want*102/100 }
	if !near(s.P50, 100*time.Microsecond) || !near(s.P90, 19700*time.Microsecond) || !near(s.P99, 19700*time.Microsecond) {
		t.Errorf("gaps p50 %v, p90 %v, p99 %v; want 0.1 ms, 19.7 ms and 19.7 ms", s.P50, s.P90, s.P99)
	}
	if s.Even != 5*time.Millisecond {
		t.Errorf("evenly spaced %v, want 5ms (20 successes in 100ms)", s.Even)
	}
	// Evenly spaced successes have no close ones, and every gap is the even one.
	ends = ends[:0]
	for k := range 10 {
		ends = append(ends, t0.Add(time.Duration(k)*2*time.Millisecond))
	}
	if s := spacingOf(ends, 20*time.Millisecond); s.Close != 0 || !near(s.P50, 2*time.Millisecond) || !near(s.P99, 2*time.Millisecond) || s.Even != 2*time.Millisecond {
		t.Errorf("evenly spaced: %+v", s)
	}
	if s := spacingOf(ends[:1], time.Second); s != (spacing{}) {
		t.Errorf("one success: %+v, want nothing", s)
	}
}

func TestToNextReleaseIsTheLeastWaitAnyOrderCouldGive(t *testing.T) {
	t0 := time.Now()
	at := func(ms float64) time.Time { return t0.Add(time.Duration(ms * float64(time.Millisecond))) }
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	releases := []time.Time{at(10), at(10.5), at(30)}
	for _, c := range []struct {
		call admittedCall
		want time.Duration
	}{
		{admittedCall{at(8), ms(2.5)}, ms(2)},        // waited past the next release: that release
		{admittedCall{at(10.5), ms(4)}, 0},           // called at a release
		{admittedCall{at(11), ms(19)}, ms(19)},       // served at the next release
		{admittedCall{at(12), ms(0.001)}, ms(0.001)}, // a permit was free: its own wait
		{admittedCall{at(31), ms(0.002)}, ms(0.002)}, // after every release: its own wait
	} {
		var h histogram
		toNextRelease(&h, releases, []admittedCall{c.call})
		if got := h.quantile(1); h.count() != 1 || got < c.want*98/100 || got > c.want*102/100 {
			t.Errorf("a call %v after the start that waited %v: %d recorded, %v; want %v", c.call.at.Sub(t0), c.call.wait, h.count(), got, c.want)
		}
	}
}

// fairRoundOf is a round in which the contenders with classes meet every target and those
// without miss every one.
func fairRoundOf(unloaded time.Duration) fairRound {
	small := func(ok int64, d time.Duration, fails map[int]int64) map[string]*tally {
		return map[string]*tally{"small-1": fakeTally(ok, d, fails), "small-2": fakeTally(100, 25*time.Millisecond, nil)}
	}
	with := &phaseResult{Elapsed: time.Second, Groups: small(100, 30*time.Millisecond, nil)}
	with.Groups[noisyGroup] = fakeTally(300, 400*time.Millisecond, map[int]int64{kindDisplaced: 50, kindFull: 5000})
	without := &phaseResult{Elapsed: time.Second, Groups: small(50, 90*time.Millisecond, map[int]int64{kindFull: 50})}
	without.Groups[noisyGroup] = fakeTally(200, 60*time.Millisecond, map[int]int64{kindFull: 9000})
	high := func(ok int64, fails map[int]int64, d time.Duration) *phaseResult {
		return &phaseResult{Elapsed: time.Second, Groups: map[string]*tally{
			highGroup:   fakeTally(ok, d, fails),
			normalGroup: fakeTally(390, 70*time.Millisecond, map[int]int64{kindFull: 9000}),
		}}
	}
	return fairRound{
		Unloaded:   unloaded,
		UnloadedSt: 19 * time.Millisecond,
		NoisyAlone: &phaseResult{Elapsed: time.Second, Groups: map[string]*tally{noisyGroup: fakeTally(400, 160*time.Millisecond, nil)}},
		Noisy:      map[string]*phaseResult{withTenants: with, noTenants: without},
		Priority: map[string]*phaseResult{
			withHigh:   high(1000, nil, 30*time.Millisecond),
			noPriority: high(500, map[int]int64{kindTimeout: 400, kindFull: 100}, 60*time.Millisecond),
		},
		Lockstep: map[string]*phaseResult{
			onPlain: {Elapsed: time.Second, Groups: map[string]*tally{lockGroup: fakeTally(380, 40*time.Millisecond, nil)},
				Spacing: spacing{Close: 0.75, P50: 100 * time.Microsecond, P90: 19 * time.Millisecond, P99: 20 * time.Millisecond, Even: 2600 * time.Microsecond}},
			onGated: {Elapsed: time.Second, Groups: map[string]*tally{lockGroup: fakeTally(370, 40*time.Millisecond, nil)},
				Spacing: spacing{Close: 0.7, P50: 200 * time.Microsecond, P90: 18 * time.Millisecond, P99: 21 * time.Millisecond, Even: 2700 * time.Microsecond}},
		},
		Card: map[string]*cardResult{
			withTenants: {Keys: 1000, Growth: 1 << 20, Elapsed: time.Second, Total: *fakeTally(900, time.Millisecond, map[int]int64{kindFull: 100})},
			noTenants:   {Growth: 9 << 20, Elapsed: time.Second, Total: *fakeTally(900, time.Millisecond, map[int]int64{kindFull: 100})},
		},
	}
}

func TestFairTargetsJudgeBothContendersOnTheMedians(t *testing.T) {
	r := &fairReport{cfg: fairDefaults()}
	r.cfg.small = 2
	r.cfg.keys = 1000
	r.rounds = []fairRound{fairRoundOf(20 * time.Millisecond), fairRoundOf(20 * time.Millisecond), fairRoundOf(20 * time.Millisecond)}
	// One round with a slow unloaded p99 does not move the medians.
	r.rounds[1].Unloaded = 100 * time.Millisecond
	ts := fairTargets(r)
	if len(ts) != 6 {
		t.Fatalf("%d targets, want 6: %+v", len(ts), ts)
	}
	for _, tg := range ts {
		if tg.withV != pass || tg.noV != fail {
			t.Errorf("%s (%s): with %s %s, without %s %s; want pass and FAIL", tg.name, tg.limit, tg.with, tg.withV, tg.without, tg.noV)
		}
	}
	var b strings.Builder
	r.markdown(&b)
	md := b.String()
	for _, want := range []string{
		"| noisy: the worst small tenant's success rate | ≥ 99.00 % | 100.00 % | pass | 50.00 % | FAIL |",
		"| noisy: goodput of all tenants / the noisy tenant's alone | ≥ 0.95 | 1.25 | pass | 0.88 | FAIL |",
		"| noisy: the worst small tenant's success p99 / unloaded p99 | ≤ 2.0 | 1.50 (0.30–1.50) | pass |",
		"| priority: the high worker's success rate | ≥ 99.90 % | 100.00 % | pass | 50.00 % | FAIL |",
		"| the same / that round's unloaded p99 | 1.50 (0.30–1.50) | 3.00 (0.60–3.00) |",
		"| cardinality: heap growth after 1000 calls (MiB) | ≤ 8.00 | 1.00 | pass | 9.00 | FAIL |",
		"| small-1 | no tenants | 100 | 50.00 % | 89.",
		"| the high worker's failures: timeout | 0 | 400 |",
		"| failed: full | 100 | 100 |",
		"Unloaded p99 (one worker alone, first in each round): 20 ms (20 ms–100 ms), its statement time's p99 in the driver 19 ms.",
		"| | plain database/sql | gated |",
		"| goodput (/s) | 380 | 370 |",
		"| successes ending within 1 ms of the one before | 75.00 % | 70.00 % |",
		"| the same: p99 | 20 ms | 21 ms |",
		"| the same, were they evenly spaced | 2.6 ms | 2.7 ms |",
		"## Noisy neighbour", "## Priority", "## Lockstep", "## Cardinality",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the report lacks %q:\n%s", want, md)
		}
	}
	// A scenario that did not run has neither targets nor a section.
	for i := range r.rounds {
		r.rounds[i].Priority, r.rounds[i].Lockstep, r.rounds[i].Card = nil, nil, nil
	}
	if ts := fairTargets(r); len(ts) != 3 {
		t.Errorf("noisy only: %d targets, want 3", len(ts))
	}
	b.Reset()
	r.markdown(&b)
	if strings.Contains(b.String(), "## Priority") || strings.Contains(b.String(), "## Lockstep") || strings.Contains(b.String(), "## Cardinality") {
		t.Errorf("sections of scenarios that did not run:\n%s", b.String())
	}
}

func TestFairPhaseCountsEveryGroupAndPauses(t *testing.T) {
	// Worker 0 succeeds, worker 1 is refused at once and never backs off, worker 2 is refused at
	// once and pauses, worker 3 runs into its deadline.
	refusal := &gated.RejectedError{Workload: "default", Reason: gated.RejectFull}
	call := func(ctx context.Context, w int) error {
		switch w {
		case 1, 2:
			return refusal
		case 3:
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}
	const pause, start = 20 * time.Millisecond, 30 * time.Millisecond
	ws := append(workers(1, "ok", nil, 0), workers(1, "spin", nil, 0)...)
	ws = append(ws, workers(1, "paused", tenant("paused"), pause)...)
	ws = append(ws, workers(1, "late", priority(gated.PriorityHigh), 0)...)
	ws[0].start = start
	var first atomic.Int64 // when worker 0 first called
	counted := call
	call = func(ctx context.Context, w int) error {
		if w == 0 {
			first.CompareAndSwap(0, time.Now().UnixNano())
		}
		return counted(ctx, w)
	}
	// Worker 0's calls wait 1 ms in the gate and release their permit, as gated tells an Observer.
	var obs gated.Observer
	attach := func(o gated.Observer) func() {
		obs = o
		return func() { obs = nil }
	}
	withEvents := call
	call = func(ctx context.Context, w int) error {
		if w == 0 {
			obs.Observe(gated.Event{Kind: gated.EventAdmitted, Duration: time.Millisecond, Context: ctx})
			obs.Observe(gated.Event{Kind: gated.EventStatement, Duration: 3 * time.Millisecond, Context: ctx})
			obs.Observe(gated.Event{Kind: gated.EventHold, Context: ctx})
		}
		return withEvents(ctx, w)
	}
	t0 := time.Now()
	res, err := fairPhase(context.Background(), call, ws, 5*time.Millisecond, time.Millisecond, 100*time.Millisecond, attach)
	if err != nil {
		t.Fatal(err)
	}
	if obs != nil {
		t.Error("the Observer is still attached after the phase")
	}
	if waited := time.Duration(first.Load() - t0.UnixNano()); waited < start {
		t.Errorf("worker 0 called %v after the phase began, before its start of %v", waited, start)
	}
	g := res.group("ok")
	if g.OK == 0 || g.OK != g.Calls || g.Hist.count() != uint64(g.OK) {
		t.Errorf("ok: %+v", g)
	}
	// Every success waited 1 ms and ran one statement; the least wait any order could have given
	// it is no more than its own.
	if w, st := g.Wait.quantile(0.5), g.Stmt.quantile(0.5); g.Wait.count() != uint64(g.OK) || g.Next.count() != uint64(g.OK) || g.Stmt.count() != uint64(g.OK) ||
		w < 984*time.Microsecond || w > 1016*time.Microsecond || st < 2952*time.Microsecond || st > 3048*time.Microsecond {
		t.Errorf("ok: %d successes, %d waits (median %v), %d statements (median %v), %d times to the next release",
			g.OK, g.Wait.count(), w, g.Stmt.count(), st, g.Next.count())
	}
	if got := g.Next.quantile(1); got > 1016*time.Microsecond {
		t.Errorf("ok: the least wait any order could have given is %v, more than the 1 ms waited", got)
	}
	if g := res.group("spin"); g.Next.count() != 0 || g.Wait.count() != 0 || g.Stmt.count() != 0 {
		t.Errorf("spin, never admitted: %d waits, %d statements, %d times to the next release", g.Wait.count(), g.Stmt.count(), g.Next.count())
	}
	// Only the successes are spaced: those of worker 0, one after another.
	if want := res.Elapsed / time.Duration(g.OK); res.Spacing.Even != want || res.Spacing.P50 <= 0 {
		t.Errorf("spacing %+v of %d successes in %v, want evenly spaced %v", res.Spacing, g.OK, res.Elapsed, want)
	}
	if g := res.group("spin"); g.OK != 0 || g.Fail[kindFull] == 0 || g.Fail[kindFull] != g.Calls {
		t.Errorf("spin: %d calls, %d full", g.Calls, g.Fail[kindFull])
	}
	// Every failure is followed by a pause: at most one call per pause, and one more at the edge.
	g = res.group("paused")
	if g.Calls == 0 || g.Fail[kindFull] != g.Calls || g.Calls > int64(res.Elapsed/pause)+1 {
		t.Errorf("paused: %d calls, %d full in %v with a pause of %v", g.Calls, g.Fail[kindFull], res.Elapsed, pause)
	}
	if g := res.group("late"); g.Calls == 0 || g.Fail[kindDeadline] != g.Calls {
		t.Errorf("late: %d calls, %d past the deadline", g.Calls, g.Fail[kindDeadline])
	}
	// A context that ends stops the phase with its error.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := fairPhase(ctx, call, ws, time.Millisecond, time.Millisecond, time.Hour, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("with an ended context: %v", err)
	}
}

// TestFairRunsAgainstTheServer runs every scenario for one short round with few workers against
// the test server and checks that every group made calls and the report was written.
func TestFairRunsAgainstTheServer(t *testing.T) {
	url := pgtest.URL(t)
	out := t.TempDir()
	fc, err := parseFairFlags([]string{"-rounds", "1", "-phase", "200ms", "-warmup", "50ms", "-noisy", "4", "-small", "2", "-keys", "300", "-out", out}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	fc.url = url
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var log strings.Builder
	rep, err := runFair(ctx, fc, &log)
	if err != nil {
		t.Fatalf("runFair: %v\nprogress:\n%s", err, log.String())
	}
	if len(rep.rounds) != 1 {
		t.Fatalf("%d rounds, want 1", len(rep.rounds))
	}
	rd := rep.rounds[0]
	if rd.Unloaded <= 0 || rd.UnloadedSt <= 0 || rd.UnloadedSt > rd.Unloaded || rd.NoisyAlone.goodput() <= 0 {
		t.Errorf("unloaded p99 %v, its statement time's %v; the noisy tenant's goodput alone %v", rd.Unloaded, rd.UnloadedSt, rd.NoisyAlone.goodput())
	}
	check := func(what string, p *phaseResult, groups ...string) {
		t.Helper()
		if p == nil {
			t.Errorf("%s: not run", what)
			return
		}
		for _, g := range groups {
			if tl := p.group(g); tl.Calls == 0 || tl.Fail[kindOther] != 0 {
				t.Errorf("%s, %s: %d calls, %d unexpected errors (%s)", what, g, tl.Calls, tl.Fail[kindOther], tl.FirstOther)
			}
		}
	}
	for _, c := range []string{withTenants, noTenants} {
		check("noisy "+c, rd.Noisy[c], noisyGroup, "small-1", "small-2")
		cr := rd.Card[c]
		if cr == nil || cr.Total.Calls != 300 || cr.Total.Fail[kindOther] != 0 || cr.Waiting != 0 {
			t.Errorf("cardinality %s: %+v", c, cr)
		}
	}
	for _, c := range []string{withHigh, noPriority} {
		check("priority "+c, rd.Priority[c], highGroup, normalGroup)
	}
	// What gated told the Observer reached the tallies: every success of the high worker ran a
	// statement, and the normal workers' successes queued behind the others.
	if p := rd.Priority[withHigh]; p != nil {
		if h := p.group(highGroup); h.Stmt.count() != uint64(h.OK) || h.Wait.count() < uint64(h.OK) {
			t.Errorf("priority high: %d successes, %d statement times, %d waits", h.OK, h.Stmt.count(), h.Wait.count())
		}
		if n := p.group(normalGroup); n.Next.count() != uint64(n.OK) || n.Next.quantile(1) > n.Wait.quantile(1)*102/100 {
			t.Errorf("priority high: %d successes of the normal workers, %d least waits up to %v, waits up to %v", n.OK, n.Next.count(), n.Next.quantile(1), n.Wait.quantile(1))
		}
	}
	for _, c := range []string{onPlain, onGated} {
		check("lockstep "+c, rd.Lockstep[c], lockGroup)
		if p := rd.Lockstep[c]; p != nil && (p.group(lockGroup).OK != p.group(lockGroup).Calls || p.Spacing.Even <= 0) {
			t.Errorf("lockstep %s: %d of %d calls succeeded, spacing %+v", c, p.group(lockGroup).OK, p.group(lockGroup).Calls, p.Spacing)
		}
	}
	var stdout strings.Builder
	if err := rep.write(&stdout); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(out, "fair.md"))
	if err != nil {
		t.Fatal(err)
	}
	if string(md) != stdout.String() || !strings.Contains(string(md), "## Targets") || !strings.Contains(string(md), "## Lockstep") || !strings.Contains(string(md), "## Cardinality") {
		t.Errorf("fair.md and stdout:\n%s\n---\n%s", md, stdout.String())
	}
	if t.Failed() {
		t.Logf("progress:\n%s", log.String())
	}
}
