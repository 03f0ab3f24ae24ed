package limiter

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// The limiter is tested against a simulated database: a pure function from the number of
// operations running to their mean hold time, and a deterministic event loop that keeps as many
// operations running as the limit and the demand allow. Hold times get a log-normal noise of
// 10 %, from a seeded source, so every run is the same.

// A dbModel is a database's mean hold time with n operations running.
type dbModel func(n int) time.Duration

// cpuBound: latency grows linearly past the cores.
func cpuBound(s time.Duration, cores int) dbModel { return cpuTaken(s, cores, 0) }

// cpuTaken: cpuBound on a server where others runnable processes of another tenant take their
// share of the cores.
func cpuTaken(s time.Duration, cores, others int) dbModel {
	return func(n int) time.Duration {
		return s * time.Duration(max(n+others, cores)) / time.Duration(cores)
	}
}

// sharedCPU: an operation of s that spends 60 % of it on the server's CPU and the rest outside
// (the network, the client), on a server of cores where others runnable processes of another
// tenant take their share of the cores.
func sharedCPU(s time.Duration, cores, others int) dbModel {
	return func(n int) time.Duration {
		return s*4/10 + s*6/10*time.Duration(max(n+others, cores))/time.Duration(cores)
	}
}

// clientShared: a CPU-bound server on two cores that it shares with its client, whose share
// shrinks as more backends run: a third operation makes each 1.38 times as slow, not 1.5, so it
// still buys throughput; past it the latency grows with the concurrency.
func clientShared(s time.Duration) dbModel {
	return func(n int) time.Duration {
		if n == 3 {
			return s * 138 / 100
		}
		return s * time.Duration(max(n, 2)) / 2
	}
}

// slowerBy: m on a machine that runs f times as slow (a slower stretch of a shared host).
func slowerBy(m dbModel, f float64) dbModel {
	return func(n int) time.Duration { return time.Duration(f * float64(m(n))) }
}

// sleepBound: latency flat.
func sleepBound(s time.Duration) dbModel { return func(int) time.Duration { return s } }

// lockBound: one hot row; each transaction takes t, of which h under the row lock, so throughput
// is min(n/t, 1/h) and flat past t/h.
func lockBound(t, h time.Duration) dbModel {
	return func(n int) time.Duration { return max(t, time.Duration(n)*h) }
}

// fastClientBound: a query of 50 µs whose hold time grows with the concurrency because the
// client and the server share the CPU, more slowly than the concurrency: throughput still grows.
func fastClientBound(n int) time.Duration {
	return 50 * time.Microsecond * time.Duration(100+45*(n-1)) / 100
}

// goodput is operations per second with n running.
func (m dbModel) goodput(n int) float64 { return float64(n) / m(n).Seconds() }

// best is the highest goodput with at most p running.
func (m dbModel) best(p int) float64 {
	b := 0.0
	for n := 1; n <= p; n++ {
		b = max(b, m.goodput(n))
	}
	return b
}

// A phase is a stretch of simulated time with one database and one demand (operations that
// want to run; 0 means idle) and one way of ending.
type phase struct {
	d      time.Duration
	db     dbModel
	demand int
	end    Outcome
	fast   time.Duration // hold time of Failed operations (fails fast)
	// jitter: the log-normal spread of a factor on every hold time that changes every
	// jitterSlice, as a shared machine's speed does (0: none).
	jitter float64
	// calm: in this share of the jitterSlices the database is calm instead of db (another
	// tenant's load that leaves some stretches untouched).
	calm      dbModel
	calmShare float64
}

const jitterSlice = 200 * time.Millisecond

// simNoise shifts the seeds of the simulation's noise. A noisy case is one sample of it, written
// against the seeds of 0; comparing two rules takes many (see CONTRIBUTING.md, "Tests").
var simNoise = flag.Uint64("limiter.noise", 0, "draw the limiter simulation's noise from another sample: shifts its seeds by N")

// simTrace is what one simulation saw, per phase.
type simTrace struct {
	limits  [][]int   // the limit at every window close, per phase
	goodput []float64 // OK operations per second, over the last half of each phase
	holdP50 []time.Duration
}

func simulate(alg func() limitAlgorithm, minL, maxL int, phases []phase) simTrace {
	a := newLimit(alg(), minL, maxL)
	rng := rand.New(rand.NewPCG(1+*simNoise, 2))
	jrng := rand.New(rand.NewPCG(3+*simNoise, 4))
	var tr simTrace
	now := time.Duration(0)
	for _, ph := range phases {
		var limits []int
		end := now + ph.d
		half := now + ph.d/2
		var ok int
		var holds []time.Duration
		slice, factor, db := time.Duration(-1), 1.0, ph.db
		for now < end {
			if (ph.jitter > 0 || ph.calm != nil) && now/jitterSlice != slice {
				slice, factor, db = now/jitterSlice, math.Exp(ph.jitter*jrng.NormFloat64()), ph.db
				if ph.calm != nil && jrng.Float64() < ph.calmShare {
					db = ph.calm
				}
			}
			running := min(a.Current(), ph.demand)
			if running == 0 {
				now += 10 * time.Millisecond
				continue
			}
			mean := db(running)
			if ph.end == Failed && ph.fast > 0 {
				mean = ph.fast
			}
			// One completion of running operations each taking about mean, at the machine's
			// speed of the moment: a slower stretch serves fewer.
			now += time.Duration(factor * float64(mean) / float64(running))
			hold := time.Duration(factor * float64(mean) * math.Exp(0.1*rng.NormFloat64()))
			waiting := 0
			if ph.demand > running {
				waiting = 1
			}
			if a.Observe(now, hold, ph.end, running, waiting) {
				limits = append(limits, a.Current())
			}
			if now >= half && ph.end == OK {
				ok++
				holds = append(holds, hold)
			}
		}
		tr.limits = append(tr.limits, limits)
		tr.goodput = append(tr.goodput, float64(ok)/(ph.d/2).Seconds())
		tr.holdP50 = append(tr.holdP50, medianOf(holds))
	}
	return tr
}

// millis is f milliseconds.
func millis(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }

func medianOf(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	h := holdHist{}
	for _, x := range d {
		h.add(x)
	}
	return h.median()
}

func lastOf(l []int) int {
	if len(l) == 0 {
		return -1
	}
	return l[len(l)-1]
}

func rangeOf(l []int) (lo, hi int) {
	lo, hi = math.MaxInt, math.MinInt
	for _, v := range l {
		lo, hi = min(lo, v), max(hi, v)
	}
	return lo, hi
}

var limitAlgorithms = []struct {
	name string
	alg  func() limitAlgorithm
}{{"gradient", func() limitAlgorithm { return new(gradientLimit) }}, {"vegas", func() limitAlgorithm { return vegasLimit{} }}}

const (
	simP = 8
	simS = 5 * time.Millisecond
)

// forAlgorithms runs f for the chosen algorithm, and for the candidates with -v as a report.
func forAlgorithms(t *testing.T, f func(t *testing.T, alg func() limitAlgorithm)) {
	for _, c := range limitAlgorithms {
		t.Run(c.name, func(t *testing.T) {
			if fmt.Sprintf("%T", c.alg()) != fmt.Sprintf("%T", chosenAlgorithm()) {
				t.Skip("a candidate, measured with -run against the chosen one in TestLimiterCandidates")
			}
			f(t, c.alg)
		})
	}
}

// wantGoodput fails t unless the goodput over phase i of tr is at least share of ref, the
// goodput of what.
func wantGoodput(t *testing.T, tr simTrace, i int, share, ref float64, what string) {
	t.Helper()
	if g := tr.goodput[i]; g < share*ref {
		t.Errorf("goodput %.0f/s, want ≥ %.0f %% of %s's %.0f/s (limits %v)", g, 100*share, what, ref, tr.limits[i])
	}
}

func TestLimiterCPUBoundSettlesAtTheKnee(t *testing.T) {
	forAlgorithms(t, func(t *testing.T, alg func() limitAlgorithm) {
		db := cpuBound(simS, 2)
		tr := simulate(alg, 1, simP, []phase{{d: 30 * time.Second, db: db, demand: 100}})
		wantGoodput(t, tr, 0, 0.95, db.best(simP), "the best fixed limit")
		if p50 := tr.holdP50[0]; p50 > 2*simS {
			t.Errorf("hold p50 %v, want ≤ 2× the unloaded %v (limits %v)", p50, simS, tr.limits[0])
		}
	})
}

func TestLimiterDoesNotCreepOnAMachineWhoseSpeedVaries(t *testing.T) {
	// Four cores whose speed changes by 10 or 15 % from one 200ms stretch to the next, for ten
	// minutes: the hold time stays within the tolerance of the one alone (its knee is 6 permits,
	// 1.5×) and the server's cores stay busy. A baseline measured at the limit by a window of a
	// faster stretch would follow the hold time there, and the limit would climb to the ceiling
	// with twice the hold time alone.
	for _, jitter := range []float64{0.1, 0.15} {
		t.Run(fmt.Sprint(jitter), func(t *testing.T) {
			db := cpuBound(simS, 4)
			tr := simulate(chosenAlgorithm, 1, simP, []phase{{d: 10 * time.Minute, db: db, demand: 100, jitter: jitter}})
			settled := tr.limits[0][len(tr.limits[0])/20:]
			sum := 0
			for _, l := range settled {
				sum += l
			}
			if mean := float64(sum) / float64(len(settled)); mean > 6 {
				t.Errorf("mean limit %.2f over ten minutes, above the knee of 6", mean)
			}
			if p50 := tr.holdP50[0]; p50 > db(1)*3/2 {
				t.Errorf("hold p50 %v, want within the tolerance, 1.5× the %v alone", p50, db(1))
			}
			wantGoodput(t, tr, 0, 0.95, 4/simS.Seconds(), "the cores")
		})
	}
}

func TestLimiterKeepsTheCeilingForASleepingQueryOnANoisyMachine(t *testing.T) {
	// The same machine under a query whose hold time does not grow with the concurrency: the
	// baseline follows the windows at the ceiling instead of sinking to the fastest of them, so
	// the limit stays there.
	for _, jitter := range []float64{0.1, 0.15} {
		t.Run(fmt.Sprint(jitter), func(t *testing.T) {
			db := sleepBound(simS)
			tr := simulate(chosenAlgorithm, 1, simP, []phase{{d: 10 * time.Minute, db: db, demand: 100, jitter: jitter}})
			wantGoodput(t, tr, 0, 0.95, simP/simS.Seconds(), "the ceiling")
		})
	}
}

func TestLimiterKeepsAPermitThatBuysThroughput(t *testing.T) {
	// The third permit's hold time is within the tolerance but not clearly so (1.38× against
	// the margin's 1.35×), and it serves 8.7 % more than two: it stays.
	forAlgorithms(t, func(t *testing.T, alg func() limitAlgorithm) {
		db := clientShared(simS)
		tr := simulate(alg, 1, simP, []phase{{d: 30 * time.Second, db: db, demand: 100}})
		wantGoodput(t, tr, 0, 0.97, db.best(simP), "the best fixed limit")
	})
}

func TestLimiterTakesBackAPermitItGaveUpToASlowerMachine(t *testing.T) {
	// The machine runs 15 or 20 % slower for four seconds: at the knee of 3 the hold time passes
	// the tolerance and the limit falls to 2, where the hold time shows no queueing and the
	// server serves less. The fall cured nothing: the permit comes back.
	for _, f := range []float64{1.15, 1.2} {
		t.Run(fmt.Sprintf("%.2f", f), func(t *testing.T) {
			forAlgorithms(t, func(t *testing.T, alg func() limitAlgorithm) {
				db := clientShared(simS)
				slow := slowerBy(db, f)
				tr := simulate(alg, 1, simP, []phase{
					{d: 20 * time.Second, db: db, demand: 100},
					{d: 4 * time.Second, db: slow, demand: 100},
					{d: 10 * time.Second, db: db, demand: 100},
				})
				wantGoodput(t, tr, 1, 0.97, slow.best(simP), "the best fixed limit on the slower machine")
			})
		})
	}
}

func TestLimiterComesBackAtOnceAfterAStallOfTheMachine(t *testing.T) {
	// The machine stalls for three windows: every hold time 1.5 to 2.2 times as long, at the
	// knee of 3 past the tolerance, so the limit falls to 2 on the stall's last window or the
	// next. The first window after it at 2 that shows no queueing serves less than 3 did before
	// the stall: the fall cured nothing, and the limit is back at 3 after one window. (A higher
	// limit's served rate measured during the stall itself would hide that.)
	for _, f := range []float64{1.5, 1.7, 2.2} {
		t.Run(fmt.Sprintf("%.1f", f), func(t *testing.T) {
			forAlgorithms(t, func(t *testing.T, alg func() limitAlgorithm) {
				db := clientShared(simS)
				tr := simulate(alg, 1, simP, []phase{
					{d: 20 * time.Second, db: db, demand: 100},
					{d: 3 * windowMin, db: slowerBy(db, f), demand: 100},
					{d: 5 * time.Second, db: db, demand: 100},
				})
				if before := lastOf(tr.limits[0]); before != 3 {
					t.Fatalf("limit %d before the stall, want the knee of 3 (limits %v)", before, tr.limits[0])
				}
				after := tr.limits[2]
				if back := slices.Index(after, 3); back < 0 || back > 1 {
					t.Errorf("after the stall the limit took %d windows to come back to 3, want at most 1 (stall %v, after %v)", back, tr.limits[1], after)
				}
			})
		})
	}
}

func TestLimiterUndoesOnlyAFallThatCuredNoQueueing(t *testing.T) {
	base := 4 * time.Millisecond // tolerance 6ms, gradientFlat 4.8ms
	for _, c := range []struct {
		name  string
		limit float64       // the limit in force at the window after the fall
		raw   time.Duration // that window's median at 2 running
		undo  bool
	}{
		// 2 / 4.4ms serve 455/s against the 484/s of 3 / 6.2ms: the permit bought 6 %.
		{"no queueing and less served", 0, millis(4.4), true},
		// 488/s: as much as at 3, so the fall cured queueing.
		{"as much served", 0, millis(4.1), false},
		// 1.225×, beyond gradientFlat but below gradientFallClean: a machine that runs 20 %
		// slower shows that much at the lower limit without queueing, and 408/s is less.
		{"a slower machine at the lower limit", 0, millis(4.9), true},
		// At gradientFallClean: queueing at 2 as well.
		{"queueing at the lower limit", 0, millis(5), false},
		// A window of timeouts lowered the limit since the fall: never raised by it.
		{"lowered meanwhile", 2.2, millis(4.4), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := new(gradientLimit)
			down := g.next(2.6, &windowStats{rtt: millis(6.6), raw: millis(6.2), base: base, inflight: 3, limited: true, ok: 100})
			if down >= 2.5 {
				t.Fatalf("no fall from 2.6 with the hold time at 6.6ms: %v", down)
			}
			limit := down
			if c.limit > 0 {
				limit = c.limit
			}
			got := g.next(limit, &windowStats{rtt: millis(5.5), raw: c.raw, base: base, inflight: 2, limited: true, ok: 100})
			if undone := got >= 2.5; undone != c.undo {
				t.Errorf("at %.2f after the fall, a window of %v at 2 gave %.2f: undone %v, want %v", limit, c.raw, got, undone, c.undo)
			}
			if !c.undo && got > limit {
				t.Errorf("the limit rose from %.2f to %.2f", limit, got)
			}
		})
	}
}

func TestLimiterUndoesAFallAgainWhileTheMachineStaysSlow(t *testing.T) {
	// A baseline of 4ms (tolerance 6ms); at 3 the hold time is 5.5ms, 545/s. The machine runs
	// 20 % slower and stays so: at 3, 7ms (429/s), past the tolerance, and the limit falls to 2,
	// where 4.8ms (417/s) shows no queueing and serves less than 3 did before: the fall is
	// undone. At 3 again the slow stretch goes on and the limit falls again; that fall is
	// judged against what 3 served before the stretch, not against its slow window since
	// (429/s, within 5 % of 417/s), and is undone too.
	base := 4 * time.Millisecond
	g := new(gradientLimit)
	limit := 3.0
	for range 6 {
		if limit = g.next(limit, &windowStats{rtt: millis(5.5), raw: millis(5.5), base: base, inflight: 3, limited: true, ok: 100}); limit != 3 {
			t.Fatalf("at 3 with the hold time at 5.5ms the limit moved to %.2f", limit)
		}
	}
	for round := range 2 {
		// The limit falls by fractions of a permit, window by window, until it is 2.
		for i := 0; limit >= 2.5; i++ {
			if i == 10 {
				t.Fatalf("round %d: no fall from 3 in ten windows with the hold time at 7ms: %.2f", round, limit)
			}
			limit = g.next(limit, &windowStats{rtt: millis(7), raw: millis(7), base: base, inflight: 3, limited: true, ok: 100})
		}
		if limit = g.next(limit, &windowStats{rtt: millis(6.2), raw: millis(4.8), base: base, inflight: 2, limited: true, ok: 100}); limit < 2.5 {
			t.Errorf("round %d: the fall to 2, where 4.8ms serve less than 3 did, stood: %.2f", round, limit)
			return
		}
	}
}

func TestLimiterJudgesAFallByItsFirstWindowWithoutQueueing(t *testing.T) {
	// A baseline of 4ms (tolerance 6ms, gradientFlat 4.8ms); at 3 the hold time is 5.5ms,
	// 545/s. The machine stalls, a window of 10ms: the limit falls to 2, where 4.4ms serve 455/s.
	base := 4 * time.Millisecond
	at3 := func(raw time.Duration) *windowStats {
		return &windowStats{rtt: raw, raw: raw, base: base, inflight: 3, limited: true, ok: 100}
	}
	for _, c := range []struct {
		name  string
		stall []time.Duration // the windows at 3 before the fall's, after six at 5.5ms
		after []time.Duration // the windows at 2 after the fall
		undo  bool
	}{
		// The first window after the fall still ran in the stall, the second shows none.
		{"queueing until the stall ends", nil, []time.Duration{millis(7), millis(4.4)}, true},
		// Slow for longer than the fall stays open: the slowness lasts, and the fall stands.
		{"queueing for longer", nil, []time.Duration{millis(7), millis(7), millis(4.4)}, false},
		// What 3 served during the stall (3/9ms = 333/s) is no measure of 3.
		{"a stall before the fall", []time.Duration{millis(9), millis(9)}, []time.Duration{millis(4.4)}, true},
		// Slow windows that 3 came back from within the tolerance are 3's own: 3/12ms = 250/s
		// three times, then 5.5ms, leave 417/s, less than 2 serves.
		{"slow windows before the last within the tolerance", []time.Duration{millis(12), millis(12), millis(12), millis(5.5)}, []time.Duration{millis(4.4)}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := new(gradientLimit)
			limit := 3.0
			for range 6 {
				if limit = g.next(limit, at3(millis(5.5))); limit != 3 {
					t.Fatalf("at 3 with the hold time at 5.5ms the limit moved to %.2f", limit)
				}
			}
			for _, raw := range c.stall {
				// Not yet in the moving average the limit follows.
				w := at3(raw)
				w.rtt = millis(5.8)
				limit = g.next(limit, w)
			}
			if limit = g.next(limit, at3(millis(10))); limit >= 2.5 {
				t.Fatalf("no fall from 3 with the hold time at 10ms: %.2f", limit)
			}
			undone := false
			for i, raw := range c.after {
				w := &windowStats{rtt: max(raw, millis(6.5)), raw: raw, base: base, inflight: 2, limited: true, ok: 100}
				next := g.next(limit, w)
				if next >= 2.5 {
					undone = i == len(c.after)-1
					if !undone {
						t.Fatalf("window %d after the fall, of %v, gave %.2f", i, raw, next)
					}
				}
				limit = next
			}
			if undone != c.undo {
				t.Errorf("windows %v after the fall gave %.2f: undone %v, want %v", c.after, limit, undone, c.undo)
			}
		})
	}
}

func TestLimiterSleepBoundClimbsToTheCeiling(t *testing.T) {
	forAlgorithms(t, func(t *testing.T, alg func() limitAlgorithm) {
		tr := simulate(alg, 1, simP, []phase{{d: 10 * time.Second, db: sleepBound(simS), demand: 100}})
		if lo, _ := rangeOf(tr.limits[0][len(tr.limits[0])/2:]); lo != simP {
			t.Errorf("limits %v, want %d over the second half", tr.limits[0], simP)
		}
	})
}

func TestLimiterFastQueryKeepsTheThroughputOfTheCeiling(t *testing.T) {
	forAlgorithms(t, func(t *testing.T, alg func() limitAlgorithm) {
		db := dbModel(fastClientBound)
		tr := simulate(alg, 1, simP, []phase{{d: 5 * time.Second, db: db, demand: 100}})
		wantGoodput(t, tr, 0, 0.97, db.goodput(simP), "the fixed limit P")
	})
}

func TestLimiterLockBoundKeepsGoodput(t *testing.T) {
	forAlgorithms(t, func(t *testing.T, alg func() limitAlgorithm) {
		db := lockBound(1500*time.Microsecond, 600*time.Microsecond)
		tr := simulate(alg, 1, simP, []phase{{d: 20 * time.Second, db: db, demand: 100}})
		wantGoodput(t, tr, 0, 0.97, db.goodput(simP), "the fixed limit P")
	})
}

func TestLimiterFollowsACapacityDropAndRecovers(t *testing.T) {
	forAlgorithms(t, func(t *testing.T, alg func() limitAlgorithm) {
		full, halved := cpuBound(simS, 2), cpuBound(2*simS, 2)
		tr := simulate(alg, 1, simP, []phase{
			{d: 20 * time.Second, db: full, demand: 100},
			{d: 20 * time.Second, db: halved, demand: 100},
			{d: 20 * time.Second, db: full, demand: 100},
		})
		before := lastOf(tr.limits[0])
		if p50 := tr.holdP50[1]; p50 > 2*2*simS {
			t.Errorf("at half capacity hold p50 %v, want ≤ 2× the unloaded %v (limits %v)", p50, 2*simS, tr.limits[1])
		}
		if g, best := tr.goodput[1], halved.best(simP); g < 0.9*best {
			t.Errorf("at half capacity goodput %.0f/s, want ≥ 90 %% of %.0f/s (limits %v)", g, best, tr.limits[1])
		}
		if g, best := tr.goodput[2], full.best(simP); g < 0.95*best {
			t.Errorf("after the drop goodput %.0f/s, want ≥ 95 %% of %.0f/s (limits %v)", g, best, tr.limits[2])
		}
		if after := lastOf(tr.limits[2]); after < before-1 {
			t.Errorf("limit %d after recovery, %d before the drop", after, before)
		}
	})
}

func TestLimiterGivesWayToAnotherTenant(t *testing.T) {
	// Another tenant's two CPU-bound sessions share the server's two cores: every permit makes
	// every operation slower, and one operation alone is 1.3 times as slow as before. The limit
	// falls first, down to the minimum, and then takes back no more than the tenant's share
	// allows: the hold time it gets at the minimum, within the tolerance. On a noisy machine
	// every hold time of a 200ms stretch is slower or faster by a common factor (log-normal,
	// 10 %): the limit falls as far, and recovers as far when the other tenant stops (a
	// baseline that took the fastest window for the no-load hold time would keep it below).
	for _, c := range []struct {
		name   string
		jitter float64
		hi     int // the highest limit over the second half of the tenant's load (a probe from an untouched stretch on the noisy machine)
	}{{"steady machine", 0, 2}, {"noisy machine", 0.1, 3}} {
		t.Run(c.name, func(t *testing.T) {
			forAlgorithms(t, func(t *testing.T, alg func() limitAlgorithm) {
				alone, shared := sharedCPU(simS, 2, 0), sharedCPU(simS, 2, 2)
				tr := simulate(alg, 1, simP, []phase{
					{d: 20 * time.Second, db: alone, demand: 100, jitter: c.jitter},
					{d: 20 * time.Second, db: shared, demand: 100, jitter: c.jitter},
					{d: 20 * time.Second, db: alone, demand: 100, jitter: c.jitter},
				})
				before := lastOf(tr.limits[0])
				during := tr.limits[1]
				if lo, _ := rangeOf(during); lo > 1 {
					t.Errorf("while the other tenant ran, the limit never fell to the minimum (limits %v)", during)
				}
				if _, hi := rangeOf(during[len(during)/2:]); hi > c.hi {
					t.Errorf("while the other tenant ran, the limit rose to %d (limits %v)", hi, during)
				}
				if p50, want := tr.holdP50[1], shared(2)*105/100; p50 > want {
					t.Errorf("while the other tenant ran, hold p50 %v, want ≤ %v (limits %v)", p50, want, during)
				}
				if after := lastOf(tr.limits[2]); after < before-1 {
					t.Errorf("limit %d after the other tenant stopped, %d before (limits %v)", after, before, tr.limits[2])
				}
				if g, was := tr.goodput[2], tr.goodput[0]; g < 0.95*was {
					t.Errorf("after the other tenant stopped goodput %.0f/s, want ≥ 95 %% of the %.0f/s before (limits %v)", g, was, tr.limits[2])
				}
			})
		})
	}
}

func TestLimiterStaysAtTheMinimumWhileATenantTakesTheCores(t *testing.T) {
	// Another tenant's two CPU-bound sessions take the server's two cores from a CPU-bound
	// query: one operation alone is 1.5 times as slow, and a second makes both a third slower
	// again (within the tolerance of a baseline raised to the first). The rebase at the minimum
	// must not let the limit take that second permit: it would queue behind the tenant.
	forAlgorithms(t, func(t *testing.T, alg func() limitAlgorithm) {
		alone, taken := cpuBound(simS, 2), cpuTaken(simS, 2, 2)
		tr := simulate(alg, 1, simP, []phase{
			{d: 20 * time.Second, db: alone, demand: 100, jitter: 0.1},
			{d: 20 * time.Second, db: taken, demand: 100, jitter: 0.1},
			{d: 20 * time.Second, db: alone, demand: 100, jitter: 0.1},
		})
		during := tr.limits[1]
		if p50, want := tr.holdP50[1], taken(1)*110/100; p50 > want {
			t.Errorf("while the other tenant ran, hold p50 %v, want ≤ %v, 1.1× its hold time at the minimum (limits %v)", p50, want, during)
		}
		wantGoodput(t, tr, 2, 0.95, tr.goodput[0], "the goodput before the tenant")
	})
}

func TestLimiterRecoversAfterATenantWhoseLoadCameAndWent(t *testing.T) {
	// Another tenant's load that leaves some stretches untouched: at the minimum the limit
	// probes from those and fails. When the tenant stops, the hold time below the knee is no
	// faster than it was in the untouched stretches, and the limit must come back all the same,
	// within two seconds (of simulated time).
	forAlgorithms(t, func(t *testing.T, alg func() limitAlgorithm) {
		alone, shared := sharedCPU(simS, 2, 0), sharedCPU(simS, 2, 2)
		tr := simulate(alg, 1, simP, []phase{
			{d: 20 * time.Second, db: alone, demand: 100},
			{d: 20 * time.Second, db: shared, demand: 100, calm: alone, calmShare: 0.15},
			{d: 20 * time.Second, db: alone, demand: 100},
		})
		before, after := lastOf(tr.limits[0]), tr.limits[2]
		if lo, _ := rangeOf(tr.limits[1]); lo > 1 {
			t.Fatalf("while the other tenant ran, the limit never fell to the minimum (limits %v)", tr.limits[1])
		}
		back := slices.IndexFunc(after, func(l int) bool { return l >= before-1 })
		// Windows at the minimum last windowMin here (16 samples of 5 ms take less).
		if limit := int(2 * time.Second / windowMin); back < 0 || back > limit {
			t.Errorf("after the other tenant stopped the limit took %d windows to come back to %d, want at most %d (limits %v)", back, before-1, limit, after)
		}
	})
}

func TestBaselineDriftsOnlyWithoutQueueingOrAfterLastingQueueingAtTheMinimum(t *testing.T) {
	near := func(got, want time.Duration) bool { return got > want-time.Microsecond && got < want+time.Microsecond }
	win := 200 * time.Millisecond
	var b baseline
	b.update(millis(2), 1, win, true)
	// Beyond the tolerance (3ms) above the minimum: the gate's own load, however long.
	for range 20 {
		if b.update(millis(8), 3, win, false) || b.value != millis(2) {
			t.Fatalf("a window beyond the tolerance above the minimum moved the baseline to %v", b.value)
		}
	}
	// Within the tolerance but beyond gradientFlat (2.4ms), at its concurrency: queueing,
	// maybe another tenant's, which the limit must answer first.
	for range 20 {
		if b.update(millis(2.9), 1, win, false); b.value != millis(2) {
			t.Fatalf("a window at 1.45× the baseline moved it to %v", b.value)
		}
	}
	// Within gradientFlat at more concurrency than it was measured at: no drift either.
	b.update(millis(2.3), 3, win, false)
	if b.value != millis(2) {
		t.Fatalf("a window at 3 running moved a baseline measured at 1 to %v", b.value)
	}
	// Within gradientFlat at its concurrency: a tenth of the way (200ms of baselineDrift).
	b.update(millis(2.3), 1, win, true)
	if want := millis(2.03); !near(b.value, want) {
		t.Fatalf("drift within gradientFlat: baseline %v, want %v", b.value, want)
	}
	// A faster window: two fifths of the way (200ms of baselineFall), not all of it, so that
	// the luckiest of many noisy windows does not become the baseline.
	b.update(millis(1.5), 1, win, true)
	if want := millis(2.03 - 0.4*0.53); !near(b.value, want) {
		t.Fatalf("after a faster window the baseline is %v, want %v", b.value, want)
	}
	// At the minimum beyond gradientFlat (2.18ms): only rebaseWindows in a row move it; a
	// window without queueing starts the count again.
	for _, rtt := range []float64{5, 6, 4.5, 7, 2.1, 5, 6, 5.5, 4} {
		before := b.value
		if b.update(millis(rtt), 1, 0, true) || b.value != before {
			t.Fatalf("window of %vms: the baseline moved to %v before %d slow windows in a row", rtt, b.value, rebaseWindows)
		}
	}
	if !b.update(millis(4.8), 1, win, true) || b.value != millis(4) {
		t.Fatalf("after %d slow windows in a row at the minimum the baseline is %v, want the lowest of them, 4ms", rebaseWindows, b.value)
	}
	// Within the tolerance (6ms) but beyond gradientFlat (4.8ms) at the minimum, windows on
	// either side of the tolerance: lasting slowness all the same, where the gate can go no
	// lower (a machine that runs slower, which the limit cannot answer).
	for i, rtt := range []float64{5.9, 6.2, 5.6, 6.1, 5.7} {
		rebased := b.update(millis(rtt), 1, win, true)
		if last := i == rebaseWindows-1; rebased != last || !last && b.value != millis(4) {
			t.Fatalf("window %d of %vms at the minimum: rebased %v, baseline %v", i+1, rtt, rebased, b.value)
		}
	}
	if b.value != millis(5.6) {
		t.Errorf("after %d windows in a row at the minimum within the tolerance but beyond gradientFlat the baseline is %v, want the lowest of them, 5.6ms", rebaseWindows, b.value)
	}
}

func TestBaselineRaisedAtTheMinimumIsUnprovenUntilTheServerShowsRoom(t *testing.T) {
	win := 200 * time.Millisecond
	rebase := func(b *baseline, rtt time.Duration) {
		t.Helper()
		for i := range rebaseWindows {
			if rebased := b.update(rtt, 1, win, true); rebased != (i == rebaseWindows-1) {
				t.Fatalf("window %d of %v at the minimum: rebased %v", i+1, rtt, rebased)
			}
		}
	}
	var b baseline
	b.update(millis(2), 1, win, true)
	if b.prior != 0 {
		t.Fatalf("a first baseline is unproven")
	}
	rebase(&b, millis(3))
	if b.value != millis(3) || b.prior != millis(2) {
		t.Fatalf("after a rebase: baseline %v, replacing %v; want 3ms replacing 2ms", b.value, b.prior)
	}
	// At the concurrency it was measured at, no window proves it.
	b.update(millis(3.2), 1, win, true)
	if b.prior == 0 {
		t.Fatalf("a window at the minimum within gradientFlat proved the baseline")
	}
	// A second rebase keeps the baseline it replaced first.
	rebase(&b, millis(4))
	if b.prior != millis(2) {
		t.Fatalf("after a second rebase the baseline replaced is %v, want 2ms", b.prior)
	}
	// Queueing at more concurrency proves nothing; no queueing there proves it.
	b.update(millis(5.2), 2, win, false)
	if b.prior == 0 {
		t.Fatalf("a window at 2 running at 1.3× the baseline proved it")
	}
	// One window at 2 running within gradientFlat may be a faster stretch of the machine
	// under another tenant's load; two in a row prove it.
	for i, want := range []bool{false, true} {
		b.update(millis(4.4), 2, win, false)
		if proven := b.prior == 0; proven != want || b.value != millis(4) {
			t.Fatalf("window %d at 2 running within gradientFlat: baseline %v, proven %v; want 4ms, proven %v", i+1, b.value, proven, want)
		}
	}
	// Falling back to the one it replaced proves it too; falling back within gradientFlat of
	// it does not: another tenant's load makes one operation 1.3 times as slow, and a faster
	// stretch of the machine brings such a window within 1.2 times the old baseline.
	rebase(&b, millis(6))
	for range 20 {
		b.update(millis(4.6), 1, win, true)
		if b.prior == 0 {
			t.Fatalf("baseline %v, above the 4ms it replaced, proven by faster windows at 4.6ms", b.value)
		}
	}
	if b.value > millis(4.7) {
		t.Fatalf("20 windows at 4.6ms left the baseline at %v", b.value)
	}
	for b.prior != 0 {
		before := b.value
		b.update(millis(3.8), 1, win, true)
		if b.prior != 0 && b.value <= millis(4) {
			t.Fatalf("baseline %v, back at the 4ms it replaced, still unproven", b.value)
		}
		if b.value >= before {
			t.Fatalf("a faster window left the baseline at %v", b.value)
		}
	}
}

func TestBaselineLearnsOnlyFromWindowsAtNoMoreConcurrencyThanItWasMeasuredAt(t *testing.T) {
	// Measured at 2 running, 5ms. At 3 the hold time is usually 6.5ms (1.3×: queueing); one
	// window of a faster stretch of the machine comes in at 4.8ms, and others within
	// gradientFlat of the baseline. None of them moves it: were it measured at 3, the usual
	// windows there would pull it up to the hold time at 3, and the tolerance with it; were it
	// pulled down by the fast ones alone, it would sink below any typical window. At the
	// ceiling of a sleeping query, 8 running, the same: the baseline is what 2 showed.
	win := 200 * time.Millisecond
	var b baseline
	b.update(millis(5), 2, win, false)
	for _, w := range []struct {
		rtt      time.Duration
		inflight float64
	}{{millis(4.8), 3}, {millis(5.9), 3}, {millis(5.5), 3}, {millis(4.2), 8}, {millis(5.8), 8}} {
		for range 20 {
			b.update(w.rtt, w.inflight, win, false)
		}
		if b.value != millis(5) || b.inflight != 2 {
			t.Fatalf("windows of %v at %.0f running moved the baseline to %v measured at %.1f running", w.rtt, w.inflight, b.value, b.inflight)
		}
	}
	// A window at 2.5 running, within half an operation of 2, does move it, and one at fewer
	// running measures it there.
	b.update(millis(5.5), 2.5, win, false)
	if b.value <= millis(5) || b.inflight != 2 {
		t.Errorf("a window of 5.5ms at 2.5 running: baseline %v measured at %.1f running, want above 5ms at 2", b.value, b.inflight)
	}
	b.update(millis(4.5), 1, win, false)
	if b.inflight != 1 {
		t.Errorf("a faster window at 1 running left the baseline measured at %.1f running", b.inflight)
	}
}

func TestLimiterFollowsAHeavierQueryMix(t *testing.T) {
	// The service time doubles at every concurrency and stays so: the limit must not stay
	// pinned at the minimum for ever, as it would if the old baseline never moved.
	forAlgorithms(t, func(t *testing.T, alg func() limitAlgorithm) {
		heavy := cpuBound(2*simS, 2)
		tr := simulate(alg, 1, simP, []phase{
			{d: 20 * time.Second, db: cpuBound(simS, 2), demand: 100},
			{d: 60 * time.Second, db: heavy, demand: 100},
		})
		wantGoodput(t, tr, 1, 0.95, heavy.best(simP), "the best fixed limit")
	})
}

func TestLimiterStaysSteadyUnderSteadyOverload(t *testing.T) {
	forAlgorithms(t, func(t *testing.T, alg func() limitAlgorithm) {
		for _, db := range []struct {
			name string
			m    dbModel
		}{{"cpu", cpuBound(simS, 2)}, {"lock", lockBound(1500*time.Microsecond, 600*time.Microsecond)}, {"sleep", sleepBound(simS)}} {
			tr := simulate(alg, 1, simP, []phase{{d: 30 * time.Second, db: db.m, demand: 100}, {d: 10 * time.Minute, db: db.m, demand: 100}})
			// The limit averaged over every ten windows (two seconds) against the mean of
			// the whole run.
			l := tr.limits[1]
			sum := 0
			for _, v := range l {
				sum += v
			}
			mean := float64(sum) / float64(len(l))
			for i := 0; i+10 <= len(l); i += 10 {
				s := 0
				for _, v := range l[i : i+10] {
					s += v
				}
				if m := float64(s) / 10; math.Abs(m-mean) > 0.15*mean {
					t.Errorf("%s: second %d: mean limit %.1f, more than ±15 %% from the run's %.2f", db.name, i/10, m, mean)
					break
				}
			}
		}
	})
}

func TestLimiterDoesNotRiseWithoutDemand(t *testing.T) {
	forAlgorithms(t, func(t *testing.T, alg func() limitAlgorithm) {
		// Two operations at a time on a server with room for eight, after a CPU-bound load
		// brought the limit to its knee: the limit follows demand up to 2 and stops there,
		// instead of creeping to the ceiling at a steady gradient.
		tr := simulate(alg, 1, simP, []phase{
			{d: 20 * time.Second, db: cpuBound(simS, 2), demand: 100},
			{d: 60 * time.Second, db: sleepBound(simS), demand: 2},
		})
		if _, hi := rangeOf(tr.limits[1]); hi > 3 {
			t.Errorf("limits %v, want at most 3 for a demand of 2", tr.limits[1])
		}
	})
}

func TestLimiterDoesNotRiseOnFailuresOrTimeouts(t *testing.T) {
	forAlgorithms(t, func(t *testing.T, alg func() limitAlgorithm) {
		for _, c := range []struct {
			name string
			ph   phase
		}{
			{"fast failures", phase{d: 30 * time.Second, db: cpuBound(simS, 2), demand: 100, end: Failed, fast: 50 * time.Microsecond}},
			{"steady timeouts", phase{d: 30 * time.Second, db: sleepBound(time.Second), demand: 100, end: Overload}},
		} {
			db := cpuBound(simS, 2)
			tr := simulate(alg, 1, simP, []phase{{d: 20 * time.Second, db: db, demand: 100}, c.ph})
			before := lastOf(tr.limits[0])
			if _, hi := rangeOf(tr.limits[1]); hi > before {
				t.Errorf("%s: the limit rose from %d to %d (limits %v)", c.name, before, hi, tr.limits[1])
			}
		}
	})
}

func TestLimiterIgnoresOneFastOutlier(t *testing.T) {
	forAlgorithms(t, func(t *testing.T, alg func() limitAlgorithm) {
		a := newLimit(alg(), 1, simP)
		now := time.Duration(0)
		feed := func(n int, hold time.Duration) {
			for range n {
				now += time.Millisecond
				a.Observe(now, hold, OK, a.Current(), 1)
			}
		}
		feed(2000, 10*time.Millisecond)
		before := a.Current()
		feed(1, time.Microsecond)
		feed(2000, 10*time.Millisecond)
		if got := a.Current(); got < before {
			t.Errorf("limit fell from %d to %d after one 1 µs sample", before, got)
		}
		if a.base.value < 9*time.Millisecond {
			t.Errorf("baseline %v after one 1 µs sample, want about 10ms", a.base.value)
		}
	})
}

// TestLimiterCandidates prints, with -v, how each candidate algorithm does in every simulated
// scenario; the comparison that chose chosenAlgorithm.
func TestLimiterCandidates(t *testing.T) {
	cpu, lock := cpuBound(simS, 2), lockBound(1500*time.Microsecond, 600*time.Microsecond)
	for _, c := range limitAlgorithms {
		var line string
		tr := simulate(c.alg, 1, simP, []phase{{d: 30 * time.Second, db: cpu, demand: 100}})
		line += fmt.Sprintf("cpu %.0f%% p50 %v lim %v; ", 100*tr.goodput[0]/cpu.best(simP), tr.holdP50[0], lastOf(tr.limits[0]))
		tr = simulate(c.alg, 1, simP, []phase{{d: 30 * time.Second, db: lock, demand: 100}})
		line += fmt.Sprintf("lock %.0f%% of P lim %v; ", 100*tr.goodput[0]/lock.goodput(simP), lastOf(tr.limits[0]))
		tr = simulate(c.alg, 1, simP, []phase{{d: 10 * time.Second, db: sleepBound(simS), demand: 100}})
		line += fmt.Sprintf("sleep lim %v; ", lastOf(tr.limits[0]))
		tr = simulate(c.alg, 1, simP, []phase{{d: 20 * time.Second, db: cpu, demand: 100}, {d: 20 * time.Second, db: cpuBound(2*simS, 2), demand: 100}, {d: 20 * time.Second, db: cpu, demand: 100}})
		line += fmt.Sprintf("drop p50 %v %.0f%% / recovered %.0f%%", tr.holdP50[1], 100*tr.goodput[1]/cpuBound(2*simS, 2).best(simP), 100*tr.goodput[2]/cpu.best(simP))
		t.Logf("%-8s %s", c.name, line)
	}
}

func TestLimiterObserveAllocatesNothing(t *testing.T) {
	a := newLimit(chosenAlgorithm(), 1, simP)
	now := time.Duration(0)
	if allocs := testing.AllocsPerRun(10000, func() {
		now += 100 * time.Microsecond
		a.Observe(now, 5*time.Millisecond, OK, a.Current(), 1)
	}); allocs != 0 {
		t.Errorf("observe allocates %v times per sample", allocs)
	}
}

func TestOutcomeOf(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), -time.Second)
	defer cancel()
	for _, c := range []struct {
		ctx  context.Context
		err  error
		want Outcome
	}{
		{context.Background(), nil, OK},
		{context.Background(), errors.New("syntax error"), Failed},
		{context.Background(), stateErr("57014"), Overload},
		{context.Background(), stateErr("55P03"), Overload},
		{context.Background(), stateErr("40001"), Overload},
		{context.Background(), stateErr("53300"), Overload},
		{context.Background(), stateErr("23505"), Failed},
		{ctx, errors.New("gated: canceled"), Overload},
		{context.Background(), fmt.Errorf("x: %w", context.DeadlineExceeded), Overload},
	} {
		if got := OutcomeOf(c.ctx, c.err); got != c.want {
			t.Errorf("OutcomeOf(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

type stateErr string

func (e stateErr) Error() string    { return "server error " + string(e) }
func (e stateErr) SQLState() string { return string(e) }

func TestHoldHistMedian(t *testing.T) {
	for _, d := range []time.Duration{0, 500 * time.Nanosecond, 3 * time.Microsecond, 100 * time.Microsecond, 5 * time.Millisecond, 123 * time.Millisecond, 7 * time.Second, time.Hour} {
		var h holdHist
		h.add(d)
		got := h.median()
		if d >= 10*time.Microsecond && d < time.Minute && (float64(got) < 0.9*float64(d) || float64(got) > 1.1*float64(d)) {
			t.Errorf("median of {%v} = %v, want within 10 %%", d, got)
		}
	}
}

func TestLimiterStartsAtTheCeilingAndDescendsOnlyWhileFewerServeAsMuch(t *testing.T) {
	for _, c := range []struct {
		name   string
		db     dbModel
		demand int
		lo, hi int // the lowest limit of the run, and the last
	}{
		// Demand within the ceiling: nothing waits, nothing to learn, the ceiling stays.
		{"demand within the ceiling", cpuBound(simS, 2), 3, simP, simP},
		// A sleeping query: the one halving costs half the throughput and is undone.
		{"sleeping query", sleepBound(simS), 100, simP / 2, simP},
		// A CPU-bound one: fewer serve as much, down to one, which serves half: back to two.
		{"CPU-bound query", cpuBound(simS, 2), 100, 1, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := simulate(chosenAlgorithm, 1, simP, []phase{{d: 5 * time.Second, db: c.db, demand: c.demand}})
			l := tr.limits[0]
			if lo, _ := rangeOf(l); lo < c.lo {
				t.Errorf("the limit fell to %d, want ≥ %d (limits %v)", lo, c.lo, l)
			}
			if c.hi > 0 && lastOf(l) != c.hi {
				t.Errorf("the limit ended at %d, want %d (limits %v)", lastOf(l), c.hi, l)
			}
			if c.hi < 0 && (lastOf(l) < 2 || lastOf(l) > 3) {
				t.Errorf("the limit ended at %d, want the knee, 2 or 3 (limits %v)", lastOf(l), l)
			}
		})
	}
}

// A gate that starts while its machine is starved (other work takes the cores the client and the
// server share: every operation is slow, and a limit serves about what any other does) and
// whose machine then gets its cores back: the descent that began in the starved windows must not
// keep a limit it chose from them. A sleeping query then serves what the ceiling serves within
// a second of the starvation's end.
func TestLimiterColdStartOnAStarvedMachineKeepsNoLimitItChoseThere(t *testing.T) {
	starved := func(n int) time.Duration { return 20*time.Millisecond + time.Duration(n)*30*time.Millisecond }
	sleep := sleepBound(20 * time.Millisecond)
	for _, d := range []time.Duration{500 * time.Millisecond, time.Second} {
		t.Run(d.String(), func(t *testing.T) {
			tr := simulate(chosenAlgorithm, 1, simP, []phase{
				{d: d, db: starved, demand: 40},
				{d: time.Second, db: sleep, demand: 40},
			})
			wantGoodput(t, tr, 1, 0.9, sleep.goodput(simP), "the fixed limit P")
		})
	}
}

// Idle forgets: samples of an overload that left a window open, then a second of idle time, say
// nothing of the load after it. The window after the idle time holds only what came after.
func TestLimiterForgetsAnOpenWindowAfterIdleTime(t *testing.T) {
	a := newLimit(chosenAlgorithm(), 1, simP)
	now := time.Duration(0)
	feed := func(n int, every, hold time.Duration, o Outcome) {
		for range n {
			now += every
			a.Observe(now, hold, o, a.Current(), 0)
		}
	}
	// Warm: flat service at the ceiling.
	feed(200, time.Millisecond, 5*time.Millisecond, OK)
	before := a.Current()
	// Ten timeouts, fewer than a window's samples: the window stays open.
	feed(10, time.Millisecond, time.Second, Overload)
	now += 2 * time.Second
	feed(windowSamples, windowMin/windowSamples+time.Millisecond, 5*time.Millisecond, OK)
	if got := a.Current(); got < before {
		t.Errorf("the limit fell from %d to %d on timeouts from before two idle seconds", before, got)
	}
}

func TestLimiterJudgesTheNextRiseByTheProbeAlone(t *testing.T) {
	g := new(gradientLimit)
	base := 4 * time.Millisecond // tolerance 6ms, gradientFlat 4.8ms
	// Little queueing at 2: a probe to 3.
	if up := g.next(2, &windowStats{rtt: millis(4.4), raw: millis(4.4), base: base, inflight: 2, limited: true, ok: 100}); up != 3 {
		t.Fatalf("no probe from 2 with the hold time at 1.1× the baseline: %v", up)
	}
	// The probe holds (5.2ms, within the margin), while the average over windows, still mostly
	// at 2, is 4.6ms: within gradientFlat, but the only window at 3 is not.
	if got := g.next(3, &windowStats{rtt: millis(4.6), raw: millis(5.2), base: base, inflight: 3, limited: true, ok: 100}); got != 3 {
		t.Errorf("after a probe to 3 at 1.3× the baseline the limit went on to %v", got)
	}
}

func TestLimiterTakesBackBothRisesFromAnUnprovenBaselineWhenTheSecondFails(t *testing.T) {
	// A baseline of 6ms raised at the minimum, unproven (tolerance 9ms, gradientFlat 7.2ms).
	// A rise from 1 to 2 stays on one window at 7ms, within gradientFlat, and that window rises
	// again to 3, whose window queues: the rise to 2, which no window confirmed, goes back too.
	// Against a proven baseline the rise to 2 stands (it was judged by the usual test).
	base := 6 * time.Millisecond
	for _, c := range []struct {
		unproven bool
		want     float64
	}{{true, 1}, {false, 2}} {
		g := new(gradientLimit)
		win := func(raw time.Duration, inflight float64) *windowStats {
			return &windowStats{rtt: raw, raw: raw, base: base, inflight: inflight, limited: true, ok: 100, unproven: c.unproven}
		}
		if up := g.next(1, win(millis(6.5), 1)); up != 2 {
			t.Fatalf("unproven %v: no rise from 1 with the hold time at 1.08× the baseline: %v", c.unproven, up)
		}
		if up := g.next(2, win(millis(7), 2)); up != 3 {
			t.Fatalf("unproven %v: the window at 2 within gradientFlat gave %v, want a rise to 3", c.unproven, up)
		}
		if got := g.next(3, win(millis(9.5), 3)); got != c.want {
			t.Errorf("unproven %v: after the probe to 3 failed the limit is %v, want %v", c.unproven, got, c.want)
		}
	}
}

func TestLimiterFailedProbeNeverRaisesALimitLoweredMeanwhile(t *testing.T) {
	g := new(gradientLimit)
	base := 10 * time.Millisecond
	// No queueing at a limit of 4 with demand at it: a probe upwards.
	up := g.next(4, &windowStats{rtt: base, raw: base, base: base, limited: true, ok: 100})
	if up <= 4 {
		t.Fatalf("no probe from 4 with the hold time at the baseline: %v", up)
	}
	// A window of timeouts lowered the limit (closeWindow's overload branch) below where the
	// probe began; then the probe's result comes in, past the tolerance.
	slow := 3 * base
	if got := g.next(3.6, &windowStats{rtt: slow, raw: slow, base: base, limited: true, ok: 100}); got > 3.6 {
		t.Errorf("the failed probe raised the limit from 3.6 to %v", got)
	}
}

func TestLimiterConfirmsAProbeByTheWindowAfterIt(t *testing.T) {
	base := 4 * time.Millisecond // tolerance 6ms, margin 5.4ms
	for _, c := range []struct {
		name     string
		raw      time.Duration // the median of the window after the probe's
		inflight float64       // its running operations
		want     float64
	}{
		{"beyond the tolerance", millis(7.2), 3, 2},
		// Within the tolerance, beyond the margin, and 3/5.8ms = 517/s against the 455/s
		// of 2 before the probe: the permit buys throughput.
		{"within it", millis(5.8), 3, 3},
		// The same median with 2.7 running: 466/s, 2.4 % more, and the probe's own window
		// (3/5.2ms = 577/s) was a fast one: it goes back.
		{"within it but serving no more", millis(5.8), 2.7, 2},
	} {
		g := new(gradientLimit)
		if up := g.next(2, &windowStats{rtt: millis(4.4), raw: millis(4.4), base: base, inflight: 2, limited: true, ok: 100}); up != 3 {
			t.Fatalf("no probe from 2 with the hold time at 1.1× the baseline: %v", up)
		}
		// The probe's window was a fast one, within the margin by chance: it stays.
		if got := g.next(3, &windowStats{rtt: millis(4.6), raw: millis(5.2), base: base, inflight: 3, limited: true, ok: 100}); got != 3 {
			t.Fatalf("the probe within the margin did not stay: %v", got)
		}
		// The moving average is still within the tolerance; the window's own median says.
		got := g.next(3, &windowStats{rtt: millis(5.2), raw: c.raw, base: base, inflight: c.inflight, limited: true, ok: 100})
		if got != c.want {
			t.Errorf("%s: the window after the probe at %v: limit %v, want %v", c.name, c.raw, got, c.want)
		}
		if got != 2 {
			continue
		}
		// Back at 2 without queueing, the knee is remembered: no probe to 3 at once.
		if again := g.next(2, &windowStats{rtt: millis(4.4), raw: millis(4.4), base: base, inflight: 2, limited: true, ok: 100}); again != 2 {
			t.Errorf("a probe to %v at once after the confirmation failed", again)
		}
	}
}

func TestLimiterColdStartBaselineIsTheFasterOfTheWindowsThatShowedNoQueueing(t *testing.T) {
	// The descent halves 8 to 4 (10ms to 5ms: queueing) and 4 to 2, whose window ran in a
	// slower stretch of the machine: 5.8ms, no shorter than 4's. Neither queued; the faster
	// is the baseline, measured at 2 running.
	a := newLimit(chosenAlgorithm(), 1, simP)
	now := time.Duration(0)
	window := func(hold time.Duration) {
		for range 50 {
			now += 5 * time.Millisecond
			a.Observe(now, hold, OK, a.Current(), 1)
		}
	}
	for _, w := range []struct {
		hold  time.Duration
		limit int // after the window
	}{{10 * time.Millisecond, 4}, {5 * time.Millisecond, 2}, {millis(5.8), 4}} {
		window(w.hold)
		if got := a.Current(); got != w.limit {
			t.Fatalf("after a window of %v the limit is %d, want %d", w.hold, got, w.limit)
		}
	}
	if a.cold {
		t.Fatalf("still descending")
	}
	if b := a.base.value; b < millis(4.9) || b > millis(5.1) {
		t.Errorf("baseline %v after windows of 5ms at 4 and 5.8ms at 2, want the faster, 5ms", b)
	}
	if a.base.inflight != 2 {
		t.Errorf("baseline measured at %.1f running, want 2", a.base.inflight)
	}
}

var sweepForm = flag.String("limiter.sweep", "short", "TestLimiterScenariosHoldOnEveryNoiseSample: short (noise samples 0..9) or full (0..49)")

// TestLimiterScenariosHoldOnEveryNoiseSample runs every case of this package that the noise can
// move (the tests named TestLimiter* and TestBaseline*, the loop of CONTRIBUTING.md) over many
// samples of the simulation's noise and fails when a case fails on too many of them. The bar is
// 48 samples of 50: with -limiter.sweep=full it runs samples 0..49 and allows 2 failures per
// case. By default it runs 0..9 and allows 1 per case: a case that fails on 2 samples in 50 fails
// on 2 or more of 10 in about 6 % of such ten-sample runs, one at 4 in 50 in about 18 %. Each
// sample runs in a process of its own, this test binary with -limiter.noise set, GOMAXPROCS of
// them at once: the noise is a flag read by every simulation, and a failing case must not fail
// this test by itself.
func TestLimiterScenariosHoldOnEveryNoiseSample(t *testing.T) {
	if *simNoise != 0 {
		t.Skip("a sweep shifts the noise itself")
	}
	samples, allowed := 10, 1
	switch *sweepForm {
	case "short":
	case "full":
		samples, allowed = 50, 2
	default:
		t.Fatalf("-limiter.sweep=%s: want short or full", *sweepForm)
	}
	failLine := regexp.MustCompile(`^\s*--- FAIL: (\S+)`)
	// One process per sample, as many at once as this one may use threads.
	outs := make([][]byte, samples)
	errs := make([]error, samples)
	next := make(chan int, samples)
	for s := range samples {
		next <- s
	}
	close(next)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), samples) {
		wg.Go(func() {
			for s := range next {
				cmd := exec.Command(os.Args[0], "-test.run=^(TestLimiter|TestBaseline)", "-test.skip=^TestLimiterScenariosHoldOnEveryNoiseSample$", fmt.Sprintf("-limiter.noise=%d", s))
				outs[s], errs[s] = cmd.CombinedOutput()
			}
		})
	}
	wg.Wait()
	failures := map[string][]int{}
	for s, out := range outs {
		var failed []string
		for sc := bufio.NewScanner(bytes.NewReader(out)); sc.Scan(); {
			if m := failLine.FindStringSubmatch(sc.Text()); m != nil {
				failed = append(failed, m[1])
			}
		}
		if errs[s] != nil && len(failed) == 0 {
			t.Fatalf("noise sample %d: %v, and no case failed:\n%s", s, errs[s], out)
		}
		// Count each failing case once, at its innermost subtest.
		for _, name := range failed {
			if !slices.ContainsFunc(failed, func(o string) bool { return strings.HasPrefix(o, name+"/") }) {
				failures[name] = append(failures[name], s)
			}
		}
	}
	names := make([]string, 0, len(failures))
	for name := range failures {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		samplesFailed := failures[name]
		if len(samplesFailed) > allowed {
			t.Errorf("%s failed on %d of %d noise samples, want at most %d: %v", name, len(samplesFailed), samples, allowed, samplesFailed)
		} else {
			t.Logf("%s failed on %d of %d noise samples: %v", name, len(samplesFailed), samples, samplesFailed)
		}
	}
}
