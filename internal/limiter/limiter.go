// Package limiter is gate_concurrent=auto's limit: it turns the hold times of a gate's completed
// operations into the number of operations the gate lets run at once. It knows nothing of the
// gate: the gate calls Observe under its own mutex when an operation ends and reads Current.
// A Limit is not safe for concurrent use; its caller serializes the calls (the gate's mutex).
package limiter

import (
	"context"
	"errors"
	"math"
	"math/bits"
	"time"
)

// A gate whose B moves between a minimum and its ceiling from what the gate
// observes of database work. Every operation that ends hands the limiter one sample, under the
// gate's mutex in release (no lock of its own, no allocation): how long it held its execution
// permit and how it ended. The limiter gathers samples in windows and, when one closes, derives
// the next limit from the window's median hold time against a no-load baseline. Gate waits and
// refusals are never samples: they measure the gate, not the database.

// An Outcome classifies an ended operation for the limiter. The values are ordered: the worst
// Outcome of an operation's statements is its Outcome.
type Outcome uint8

const (
	// OK: the work ended normally; its hold time measures the database's service.
	OK Outcome = iota
	// Failed: it failed for a reason that says nothing about load (a syntax error, a
	// constraint, a lost connection), or its hold time is not the service's alone (the first
	// operation on a new connection, which pays for the server's session start), or the caller's
	// deadline ended it after the gate's queue had spent most of that deadline (the gate tells,
	// from its wait). Not a sample of service time: a fast failure must not look like fast
	// service.
	Failed
	// Overload: it was ended by a timeout while it ran (statement_timeout, lock_timeout,
	// the caller's deadline) or refused by the server for contention or load (serialization
	// failure, deadlock, too many connections). The service took at least its hold time, and
	// such a window never raises the limit. OutcomeOf classifies by the error alone; the gate
	// turns a caller's deadline that its queue spent into Failed.
	Overload
)

// OutcomeOf classifies the error that ended an operation run under ctx. It allocates nothing.
func OutcomeOf(ctx context.Context, err error) Outcome {
	if err == nil {
		return OK
	}
	// Not sqlState: its errors.As allocates, and the limiter adds no allocation per operation.
	for e := err; e != nil; e = errors.Unwrap(e) {
		if s, ok := e.(interface{ SQLState() string }); ok {
			switch s.SQLState() {
			case "57014", "55P03", "40001", "40P01", "53300", "53400":
				return Overload
			}
			break
		}
	}
	if errors.Is(err, context.DeadlineExceeded) || ctx != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return Overload
	}
	return Failed
}

// A limitAlgorithm turns one closed window into the next limit. It sees only windows with
// service samples and without overload (the Limit handles those itself), and must return
// a value the caller then clamps to [min, max].
type limitAlgorithm interface {
	next(limit float64, w *windowStats) float64
	// forget drops what the algorithm remembers of recent windows (a knee, a rise or a fall
	// being judged): the gate was idle for idleForget, and they say nothing of what follows.
	forget()
}

// windowStats is what one window measured.
type windowStats struct {
	rtt      time.Duration // median hold time of service samples (OK and overload), averaged over windows
	raw      time.Duration // this window's median alone
	base     time.Duration // the no-load baseline (see baseline), never above rtt's window
	inflight float64       // mean running operations at the samples
	rebased  bool          // the baseline rose with this window after lasting queueing at the minimum: what was learnt against the old one is void
	unproven bool          // the baseline rose so, and no window at more concurrency has shown it to be the no-load hold time since (see baseline)
	limited  bool          // demand pressed on the limit: at one sample in limitedShare or more, running ≥ limit or operations waited
	ok       int           // samples that ended normally
	overload int           // samples ended by a timeout or a load refusal
	failed   int           // samples that failed for other reasons (not in rtt)
}

// Tuning of the limiter. A window closes after windowMin and windowSamples service samples; the
// gradient algorithm keeps the median hold time within gradientTolerance of the baseline.
const (
	windowMin         = 200 * time.Millisecond
	windowSamples     = 16
	gradientTolerance = 1.5
	overloadShare     = 0.1 // share of a window's samples ended by overload that lowers the limit
	overloadBackoff   = 0.9 // factor applied to the limit then
	smoothing         = 4   // the algorithm sees the window medians' moving average, each window weighing 1/smoothing
	limitedShare      = 4   // a window is limited when this share of its samples found demand at the limit (1/4)
	// idleForget: a gate without a completed operation for this long starts a new window and
	// forgets what it was judging: time, not only completed operations, ends an overload.
	idleForget = time.Second
	// baselineDrift and baselineFall are the time constants with which the baseline follows
	// slower windows without queueing and faster ones (see baseline).
	baselineDrift = 2 * time.Second
	baselineFall  = 500 * time.Millisecond
	// rebaseWindows: windows in a row at the minimum limit beyond gradientFlat that move the
	// baseline there (see baseline): a second at the usual window length.
	rebaseWindows = 5
	// proofWindows: windows in a row at more concurrency than an unproven baseline was
	// measured at, within gradientFlat of it, that prove it (see baseline).
	proofWindows = 2
	// coldFaster: a halving in the cold start whose window served this much more than any
	// before it shows a machine that got faster, not a lower limit that serves more.
	coldFaster = 1.5
)

// A Limit is the state of one gate's gate_concurrent=auto. Its caller serializes every call.
type Limit struct {
	alg      limitAlgorithm
	min, max int
	limit    float64

	// The open window.
	start    time.Duration // monoNow of its first sample
	hist     holdHist
	ok       int
	overload int
	failed   int
	sumRun   int64
	limited  int           // samples that found demand at the limit
	waited   int           // samples taken while operations waited
	last     time.Duration // monoNow of the last sample

	base     baseline
	smoothed time.Duration // the window medians' moving average (smoothing): what the algorithm sees
	prevRaw  time.Duration // the window median before the last

	// Cold start (see descend): no baseline yet.
	cold     bool
	coldRate float64       // the most a window served since the descent began
	coldKeep float64       // the lowest limit whose window served within gradientProbeGain of that
	coldRTT  time.Duration // the median hold time of the window before the last halving, 0 before the descent
}

// New returns a limit between min and the ceiling max that starts at max: a fresh gate serves
// what a fixed B = max serves until it has evidence that fewer is better (see descend).
func New(min, max int) *Limit { return newLimit(chosenAlgorithm(), min, max) }

func newLimit(alg limitAlgorithm, min, max int) *Limit {
	return &Limit{alg: alg, min: min, max: max, limit: float64(max), cold: true}
}

// Set sets the limit to n, within its bounds, and ends the cold start: a limit set from outside
// is not a fresh one. For tests of the gate.
func (a *Limit) Set(n int) { a.limit, a.cold = float64(n), false }

// Window returns the samples of the open window by outcome.
func (a *Limit) Window() (ok, overload, failed int) { return a.ok, a.overload, a.failed }

// Current is the limit in execution permits.
func (a *Limit) Current() int {
	return min(max(int(math.Round(a.limit)), a.min), a.max)
}

// SetCeiling changes the largest limit (a fleet share, gate_fleet=on), keeping the limit within
// it. The ceiling is a hard bound: below gate_concurrent_min it wins, and Current returns it.
func (a *Limit) SetCeiling(ceiling int) {
	a.max = ceiling
	a.limit = min(a.limit, float64(max(ceiling, a.min)))
	if a.cold && a.coldRTT == 0 {
		// Not yet descending: a fresh gate serves what a fixed B at its ceiling serves.
		a.limit = float64(max(ceiling, a.min))
	}
}

// Observe records one operation that ended at now (a monotonic clock) after holding its permit for hold,
// with running operations holding permits (itself included) and waiting in the queue. It reports
// whether a window closed and the limit may have changed.
func (a *Limit) Observe(now, hold time.Duration, o Outcome, running, waiting int) bool {
	if now-a.last >= idleForget {
		a.forget()
	}
	a.last = now
	if a.ok+a.overload+a.failed == 0 {
		a.start = now
	}
	switch o {
	case OK:
		a.ok++
		a.hist.add(hold)
	case Overload:
		a.overload++
		a.hist.add(hold)
	default:
		a.failed++
	}
	a.sumRun += int64(running)
	if running >= a.Current() || waiting > 0 {
		a.limited++
	}
	if waiting > 0 {
		a.waited++
	}
	if now-a.start < windowMin || a.ok+a.overload < windowSamples {
		return false
	}
	a.closeWindow(now - a.start)
	return true
}

// forget starts a new window and drops what the limiter was judging: the gate was idle for
// idleForget, and the open window's samples and a pending probe or fall say nothing of what comes
// next. The limit and the baseline stay: they are what the database showed, not an overload.
func (a *Limit) forget() {
	a.hist.reset()
	a.ok, a.overload, a.failed, a.sumRun, a.limited, a.waited = 0, 0, 0, 0, 0, 0
	a.prevRaw = 0
	if a.cold && a.coldRTT > 0 {
		a.limit, a.coldRate, a.coldRTT = a.coldKeep, 0, 0
	}
	a.alg.forget()
}

// closeWindow derives the next limit from the open window, which lasted d, and starts a new one.
func (a *Limit) closeWindow(d time.Duration) {
	n := a.ok + a.overload + a.failed
	w := windowStats{
		rtt: a.hist.median(), inflight: float64(a.sumRun) / float64(n), limited: a.limited*limitedShare >= n,
		ok: a.ok, overload: a.overload, failed: a.failed,
	}
	w.raw = w.rtt
	switch {
	case float64(w.overload) >= overloadShare*float64(w.ok+w.overload):
		if a.cold {
			a.limit = max(a.limit*overloadBackoff, float64(a.min))
			a.reset()
			return
		}
	case a.cold:
		if w.failed <= w.ok {
			a.descend(&w, a.waited*limitedShare >= n)
		}
		a.reset()
		return
	}
	w.rebased = a.base.update(w.rtt, w.inflight, d, a.Current() <= a.min)
	w.base, w.unproven = a.base.value, a.base.prior > 0
	// One window's spike (a pause of the client, another tenant's burst) moves the algorithm
	// a quarter as far; a real change, which lasts, most of the way within a few windows. Two
	// windows in a row above the average are no spike: the slower of them counts at once.
	if a.smoothed == 0 {
		a.smoothed = w.rtt
	}
	a.smoothed += (w.rtt - a.smoothed) / smoothing
	lasting := min(w.raw, a.prevRaw)
	a.prevRaw = w.raw
	w.rtt = max(a.smoothed, lasting, w.base)
	switch {
	case float64(w.overload) >= overloadShare*float64(w.ok+w.overload):
		// Timeouts and load refusals: back off, and never let them raise the limit, however
		// short the surviving samples are.
		a.limit *= overloadBackoff
	case w.failed > w.ok:
		// Mostly failures that say nothing about load: no information.
	default:
		a.limit = a.alg.next(a.limit, &w)
	}
	a.limit = min(max(a.limit, float64(a.min)), float64(a.max))
	a.reset()
}

// reset starts a new window.
func (a *Limit) reset() {
	a.hist.reset()
	a.ok, a.overload, a.failed, a.sumRun, a.limited, a.waited = 0, 0, 0, 0, 0, 0
}

// descend is the cold start. A fresh gate has no no-load hold time to compare with, so it starts
// at its ceiling and serves what a fixed B there serves. When operations wait (demand exceeds the
// limit), it halves the limit, window by window, for as long as a halving shortens the hold time
// (by more than gradientFlat: fewer operations queue less), down to the minimum at most. The last
// window, whose halving shortened nothing, and the one before it show no queueing and measure
// the baseline (see warm). The limit
// then goes back to the lowest one that served as much as any (by Little's law, within
// gradientProbeGain of the most a window served), and the gradient rule takes over. Past a
// CPU-bound server's cores fewer operations serve as much, each sooner, and the limit stays
// low; a sleeping query loses one window at half the limit, once. A halving never serves far more
// (coldFaster) than any limit above it did: a window that does ran on a machine that got faster
// (the client's or the server's CPU was starved while the windows before ran, as when a deploy
// starts beside other work), and the descent ends there, back at the ceiling with that window's
// baseline, instead of reading the shorter hold times as queueing that the halvings cured. Waits
// and refusals never count, only what the database served.
func (a *Limit) descend(w *windowStats, pressed bool) {
	if !pressed {
		// Demand fits the limit: nothing to learn. Halvings it no longer judges are undone.
		if a.coldRTT > 0 {
			a.limit, a.coldRate, a.coldRTT = a.coldKeep, 0, 0
		}
		return
	}
	rate := servedRate(w)
	if a.coldRTT > 0 && rate > coldFaster*a.coldRate {
		// A halving does not serve this much more: the machine got faster (it was starved while
		// the windows before ran), and they measured nothing of it. Back to the ceiling, with
		// this window's median as the baseline: the gradient rule judges the ceiling against it.
		a.limit, a.coldRTT = float64(a.max), 0
		a.warm(w)
		return
	}
	if gradientProbeGain*rate >= a.coldRate {
		a.coldRate, a.coldKeep = max(a.coldRate, rate), float64(a.Current())
	}
	if a.coldRTT > 0 && time.Duration(gradientFlat*float64(w.raw)) >= a.coldRTT || a.Current() <= a.min {
		a.limit = a.coldKeep
		a.warm(w)
		return
	}
	a.coldRTT = w.raw
	a.limit = max(float64(a.min), math.Floor(float64(a.Current())/2))
}

// warm ends the cold start with the baseline w measured: the faster of w's median and the one
// before the last halving when that halving shortened nothing (both windows showed no
// queueing, and the slower of them ran in a slower stretch of the machine), measured at w's
// concurrency, the lower.
func (a *Limit) warm(w *windowStats) {
	base := w.raw
	if a.coldRTT > 0 && time.Duration(gradientFlat*float64(w.raw)) >= a.coldRTT {
		base = min(base, a.coldRTT)
	}
	a.cold, a.coldRate, a.coldRTT = false, 0, 0
	a.base.value, a.base.inflight = base, w.inflight
	a.smoothed, a.prevRaw = base, base
}

// A baseline is the no-load hold time, learnt from window medians (so that one fast outlier never
// becomes it: a median needs half a window's samples), and only from windows at no more
// concurrency than it was measured at (within half an operation), which measure it at theirs
// when they ran fewer. A window at more concurrency says nothing of it: were the baseline
// learnt there, the windows of a limit past the knee within gradientFlat of it would raise it to
// that limit's own hold time, the tolerance with it, and one more permit would project within it
// (traced on the test machine: a baseline from 5.0 to 6.0 ms within 20 s at 3 permits, and
// probes to 4; simulated on four cores whose speed varies, a baseline measured at 5, 6 and then 7
// permits, each a fifth slower than the last, and a limit that climbed to the ceiling); and were
// it pulled down by the faster of them alone, it would sink to a fast stretch of the machine,
// and the limit with it. A faster window pulls it down quickly (time constant baselineFall) but
// not all the way: on a shared machine whose speed varies from one stretch to the next, the
// fastest of many windows would sink it below any typical one. A slower window pulls it up
// slowly (baselineDrift), and only when it shows no queueing at all (within gradientFlat of the
// baseline): so it follows the noise of the windows around it and nothing else.
// A window that is slower than that, even within the tolerance, leaves it where it is. Were the
// baseline to follow such windows, another tenant's load taking the server's CPU would raise it
// step by step while the limit stands, the known failure of limiters built on a moving baseline;
// left alone, the hold time exceeds the tolerance, the limit falls first, and the gate gives way,
// down to its minimum if need be.
// Beyond gradientFlat the baseline moves only where the gate can go no lower: when rebaseWindows
// windows in a row at the minimum limit all showed queueing, within the tolerance or beyond it,
// the slowness is the database's own (a heavier query mix, a slower, degraded or shared server),
// not the gate's load, and the baseline becomes the lowest of their medians. Within the tolerance
// too: on a machine that runs slower for a while, the hold time at the minimum sits about the
// tolerance, on either side of it from one window to the next, and the limit, which cannot fall
// further, must not stay there against a baseline of faster times.
// A baseline so raised is unproven: it may hold another tenant's queueing as well as the
// database's own slowness, and a tolerance on top of it would compound the two. It is proven when
// proofWindows windows in a row at more concurrency than it was measured at show no queueing
// against it (within gradientFlat): the server had room, so the slowness is its own. One is not
// enough on a noisy machine: behind a tenant a second operation makes the hold time about
// 1.2–1.3 × the raised baseline, and one window of a faster stretch comes in below 1.2. Until then a rise from the
// minimum must show just that to stay (gradientLimit.probeHolds): under a tenant that takes the
// cores a second operation queues behind the tenant's (a third more hold time on two cores with
// two competing sessions), on a slower machine or with a heavier query it does not. A rise
// that stayed so and rises again in the same window is judged with the second rise, against
// the limit before both: one lucky window must not leave the second permit standing, unconfirmed,
// when the third's probe fails. It is also
// proven when it falls back to the one it replaced: the slowness has passed. Not within
// gradientFlat of it: behind another tenant one operation alone is about 1.3 × as slow, and the
// windows of a faster stretch pull the baseline within 1.2 × of the old one while the tenant runs
// (simulated on a noisy machine, that proof let the baseline drift back up to the tenant's hold
// time, and the limit took a third permit behind the tenant in 4 of 50 noise samples).
type baseline struct {
	value    time.Duration // 0 before the first window
	inflight float64       // mean running operations of the window that measured it
	slow     int           // windows in a row at the minimum beyond gradientFlat
	least    time.Duration // the lowest median of those
	prior    time.Duration // the baseline before a rebase not yet proven, 0 when none
	room     int           // windows in a row at more concurrency than it was measured at, within gradientFlat of it
}

// update takes the median rtt of a window that lasted d with inflight operations running on
// average, at the minimum limit or not, and reports whether it rebased: rose after lasting
// queueing at the minimum.
func (b *baseline) update(rtt time.Duration, inflight float64, d time.Duration, atMin bool) (rebased bool) {
	if inflight > b.inflight+0.5 && rtt <= time.Duration(gradientFlat*float64(b.value)) {
		if b.room++; b.room >= proofWindows {
			b.prior = 0
		}
	} else {
		b.room = 0
	}
	switch {
	case b.value == 0:
		b.value, b.inflight = rtt, inflight
	case inflight > b.inflight+0.5:
		b.slow = 0
	case rtt <= b.value:
		b.inflight = min(b.inflight, inflight)
		b.toward(rtt, d, baselineFall)
		b.slow = 0
		if b.value <= b.prior {
			b.prior = 0
		}
	case rtt <= time.Duration(gradientFlat*float64(b.value)):
		b.slow = 0
		b.toward(rtt, d, baselineDrift)
		b.inflight = min(b.inflight, inflight)
	case !atMin:
		b.slow = 0
	default:
		if b.slow == 0 || rtt < b.least {
			b.least = rtt
		}
		if b.slow++; b.slow == rebaseWindows {
			if b.prior == 0 {
				b.prior = b.value
			}
			b.value, b.inflight, b.slow = b.least, inflight, 0
			return true
		}
	}
	return false
}

// toward moves the baseline toward rtt, measured by a window that lasted d, with time constant tau.
func (b *baseline) toward(rtt, d, tau time.Duration) {
	b.value += time.Duration(float64(rtt-b.value) * min(1, float64(d)/float64(tau)))
}

// tolerance is the longest hold time that shows no queueing worth a permit against base: base
// × gradientTolerance, and at least latencySlack above it.
func tolerance(base time.Duration) time.Duration {
	return max(time.Duration(gradientTolerance*float64(base)), base+latencySlack)
}

// gradientLimit is a gradient limiter in the manner of Netflix's Gradient2, with the growth
// rule replaced: the limit falls by half of how far the median hold time exceeds the tolerance,
// gradientTolerance × baseline (at least latencySlack above it), and rises, only while demand
// presses on it, by the largest step that keeps the hold time within tolerance even if it grew
// in proportion to the concurrency (the worst case, a CPU-bound server past its cores). So it
// neither creeps up at a steady gradient nor oscillates around the knee, and on a server whose
// latency stays flat it climbs to the ceiling in a few windows. Where that projection forbids
// even one more permit but the hold time shows no queueing at all (within gradientFlat of the
// baseline, as at a limit of 1), it rises by one.
//
// A limit it had to leave is the knee. A rise is a probe: if the very next window's own median is
// not clearly within the tolerance (gradientProbeMargin of it) and the rise did not buy throughput
// (gradientProbeGain), the limit goes straight back (a probe costs one window, not the several the
// moving average needs to notice); a probe that stays goes back all the same when the window after
// it fails the same test, for one window may show a faster stretch of the server, or a few
// percent more served, by chance. Then
// it does not rise to the knee again for gradientMemory windows, twice that after each probe that
// failed in a row (up to gradientMemoryMax), so that under steady load it stays where it is. The
// knee is forgotten at once when the hold time below it falls under gradientRecovered of the
// highest it has been since the knee was found (starting from what it was then or, after a fall,
// what it should have become): the server has room again (another tenant's load ended); and when
// the baseline rebased, since it was found against the old one.
//
// A fall is judged as a rise is: if the first window after a fall that lowered the limit in force
// to show no queueing at the lower limit (below gradientFallClean × the baseline), one of the next
// gradientFallOpen, served gradientProbeGain less than the higher limit did lately (levelRate, up
// to its last window within the tolerance), the limit goes straight back. The fall cured nothing:
// the server ran slower, as a shared machine does for a stretch or stalls for a few windows, and
// the hold time at the knee passed the tolerance while the permit still bought throughput. The
// windows at the lower limit before that one still ran in the slow stretch or straddled its end,
// and the windows at the higher limit that led to the fall ran in it: neither measures what a
// limit serves. Where the load is the gate's own (a CPU-bound server past its cores), the lower
// limit serves as much; where another tenant takes the server, it still queues after those
// windows; in both the fall stands.
type gradientLimit struct {
	knee      float64       // the limit last lowered from, 0 when none is remembered
	memory    int           // windows left before knee is forgotten
	fails     int           // probes to the knee that failed in a row
	kneeRTT   time.Duration // the highest hold time below the knee since it was found
	probed    float64       // the limit before the last window's rise, 0 when it did not rise
	confirm   float64       // the limit before a rise the last window let stay, 0 when none
	probeRTT  time.Duration
	probeRate float64 // what the window before the rise served: running operations per second of hold time
	fell      float64 // the limit in force before a fall below it that is still being judged, 0 when none
	fellTo    float64 // the limit that fall returned, and the falls since that judge it too
	fellRate  float64 // what the limit it fell from served (levelCalm then)
	fellOpen  int     // windows left in which that fall may still be judged
	level     float64 // the limit in force over the last windows
	levelRate float64 // what it served lately while demand pressed on it: the mean of its windows, the last weighing at least 1/smoothing
	levelN    int     // how many windows levelRate has seen
	levelCalm float64 // levelRate before the windows beyond the tolerance since the last one within it
}

const (
	gradientFlat      = 1.2
	gradientMemory    = 5
	gradientMemoryMax = 80
	gradientRecovered = 0.8
	// gradientFallOpen: windows after a fall in which the first one without queueing at the
	// lower limit judges it: the slow stretch that caused it may outlast it by as much.
	gradientFallOpen = 2
	// gradientFallClean: a window at the lower limit below this × the baseline shows no
	// queueing worth the fall. Above gradientFlat: on a machine that runs 20 % slower, the
	// lower limit's hold time is that much above the baseline with no queueing at all, and a
	// tenant that takes the cores makes it 30 % or more.
	gradientFallClean = 1.25
	// gradientProbeMargin: a rise must leave this much of the tolerance unused to stay, so that
	// between two limits that serve alike (past the knee, where only the latency grows) the
	// lower one wins instead of a walk between them.
	gradientProbeMargin = 0.9
	// gradientProbeGain: a rise whose median is within the tolerance but not clearly so stays
	// all the same when its window served this much more than the one before it: the permit
	// buys throughput (Protego's marginal-throughput rule), as where the server's cores are
	// shared with a client whose share shrinks as more backends run.
	gradientProbeGain = 1.05
	// latencySlack is the least hold time the tolerance allows above the baseline: for fast
	// queries (SELECT 1 takes 50 µs here) the client's own CPU makes the hold time grow with
	// the concurrency long before the database is saturated, and throughput still grows with
	// it; a tenth of a millisecond of queueing is not worth halving the throughput for. The
	// ceiling bounds such a gate, as a fixed B does.
	latencySlack = time.Millisecond
)

// probeHolds reports whether the rise before window w stays: its own median clearly within the
// tolerance tol, or within it while the window served gradientProbeGain more than the one before.
// Against an unproven baseline (see baseline) it must show no queueing at all.
func (a *gradientLimit) probeHolds(w *windowStats, tol float64) bool {
	raw := float64(w.raw)
	if w.unproven {
		return raw <= gradientFlat*float64(w.base)
	}
	return raw <= gradientProbeMargin*tol || raw <= tol && servedRate(w) >= gradientProbeGain*a.probeRate
}

// servedRate is the throughput a window shows by Little's law: its operations running on average
// over its median hold time.
func servedRate(w *windowStats) float64 {
	if w.raw <= 0 {
		return 0
	}
	return w.inflight / w.raw.Seconds()
}

func (a *gradientLimit) forget() {
	a.knee, a.memory, a.fails, a.probed, a.confirm, a.fell = 0, 0, 0, 0, 0, 0
}

func (a *gradientLimit) next(limit float64, w *windowStats) float64 {
	if w.rebased {
		a.knee, a.memory, a.fails, a.confirm = 0, 0, 0, 0
	}
	if a.memory > 0 {
		if a.memory--; a.memory == 0 {
			a.knee = 0
		}
	}
	// Growth is reckoned from the limit in force, the rounded one: a limit of 1.8 admits 2.
	cur := max(1, math.Round(limit))
	rtt, base, tol := float64(w.rtt), float64(w.base), float64(tolerance(w.base))
	probed, fell, confirm := a.probed, a.fell, a.confirm
	a.probed, a.confirm = 0, 0
	if cur != a.level {
		a.level, a.levelRate, a.levelCalm, a.levelN = cur, 0, 0, 0
	}
	rate := servedRate(w)
	if w.limited {
		a.levelN++
		a.levelRate += (rate - a.levelRate) / float64(min(a.levelN, smoothing))
		// The windows beyond the tolerance since the last one within it are the slow stretch
		// a fall would leave: what the limit served then says nothing of what it serves.
		// The first window at a limit counts whatever it shows: the limit has nothing else.
		if float64(w.raw) <= tol || a.levelN == 1 {
			a.levelCalm = a.levelRate
		}
	}
	if fell > 0 {
		// The fall is judged by the first window at the lower limit that shows no queueing, if
		// one comes within gradientFallOpen windows: those before it still ran in the slow
		// stretch that caused the fall, or straddled its end.
		clean := float64(w.raw) < gradientFallClean*base
		switch {
		case limit < a.fellTo:
			// Timeouts lowered it since the fall, and it is not raised past them.
			a.fell = 0
		case clean && w.limited && a.fellRate >= gradientProbeGain*rate:
			// The fall cured no queueing: the server is slower, not saturated. Take it back.
			// The limit it returns to is the level it was, with what it served before the
			// slow stretch: the windows there since are that stretch, not its measure.
			a.knee, a.memory, a.fell = 0, 0, 0
			a.level, a.levelRate, a.levelCalm, a.levelN = fell, a.fellRate, a.fellRate, 1
			return fell
		case clean || a.fellOpen <= 1:
			a.fell = 0
		default:
			a.fellOpen--
		}
	}
	if probed > 0 && !a.probeHolds(w, tol) {
		// The probe failed: back at once, and wait longer before the next one.
		a.fails++
		a.setKnee(cur, a.probeRTT)
		// Never above the limit in force: a window of timeouts may have lowered it since.
		return min(probed, limit)
	}
	if probed > 0 {
		// Only this window ran at the new limit: its own median, not an average of windows at
		// the old one, says whether there is room for more.
		rtt = max(rtt, float64(w.raw))
		a.confirm = probed
	} else if confirm > 0 {
		// The window after the one that let the probe stay confirms it by the same test: one
		// window's median may pass it by chance, when the server ran a little faster for
		// those 200 ms or the served rates of the two windows differ by a few percent of
		// noise, and the moving average would then take several windows to notice.
		if !a.probeHolds(w, tol) {
			a.fails++
			a.setKnee(cur, a.probeRTT)
			return min(confirm, limit)
		}
		a.fails = 0
	}
	if rtt > tol {
		next := limit * max(0.5, (1+tol/rtt)/2)
		// The hold time the lower limit should show if the server is saturated: only one
		// clearly below that says it has room again.
		a.setKnee(cur, time.Duration(float64(w.rtt)*next/limit))
		switch {
		case a.fell > 0:
			// A fall still being judged: its own, so the limit it returned moves with it.
			a.fellTo = next
		case math.Round(next) < cur:
			a.fell, a.fellTo, a.fellRate, a.fellOpen = cur, next, a.levelCalm, gradientFallOpen
		}
		return next
	}
	if a.knee > 0 && w.rtt < time.Duration(gradientRecovered*float64(a.kneeRTT)) {
		a.knee, a.memory, a.fails = 0, 0, 0
	}
	if a.knee > 0 {
		// What the limit below the knee shows while the knee is remembered, at its highest: a
		// probe rises only from a window without queueing, so the hold time when it failed may
		// be the fastest of a slower stretch (another tenant's load leaves some windows
		// untouched), and measured against that the server would never seem to have room again.
		a.kneeRTT = max(a.kneeRTT, w.rtt)
	}
	if !w.limited {
		return limit
	}
	next := cur
	// rtt × (cur+step)/cur ≤ tol.
	if step := math.Floor(cur * (tol/rtt - 1)); step >= 1 {
		next = cur + step
	} else if rtt <= gradientFlat*base {
		next = cur + 1
	}
	if a.knee > 0 {
		next = min(next, a.knee-1)
	}
	if next <= cur {
		return limit
	}
	a.fell = 0
	if a.confirm > 0 && w.unproven {
		// This window let a rise from an unproven baseline stay, unconfirmed, and rises
		// again: the next window judges both against the limit before them, so that a
		// second rise that fails takes back the first too (see baseline).
		a.probed, a.confirm = a.confirm, 0
	} else {
		a.probed, a.probeRTT, a.probeRate = cur, w.rtt, servedRate(w)
	}
	return next
}

// setKnee remembers that the limit had to leave knee, and rtt, the hold time below it then.
func (a *gradientLimit) setKnee(knee float64, rtt time.Duration) {
	a.knee, a.kneeRTT = knee, rtt
	a.memory = min(gradientMemory<<min(a.fails, 8), gradientMemoryMax)
}

// vegasLimit is TCP Vegas's rule as Netflix's VegasLimit applies it: the operations queued in
// the database are estimated as limit × (1 − baseline/rtt); the limit rises by one while fewer
// than alpha queue and falls by one when more than beta do. The thresholds grow with log10 of the
// limit and are at least 1 and 2, since gated's limits are small.
type vegasLimit struct{}

func (vegasLimit) forget() {}

func (vegasLimit) next(limit float64, w *windowStats) float64 {
	queue := limit * (1 - float64(w.base)/float64(w.rtt))
	alpha := max(1, 3*math.Log10(limit))
	beta := max(2, 6*math.Log10(limit))
	switch {
	case queue > beta:
		return limit - 1
	case queue < alpha && w.limited:
		return limit + 1
	}
	return limit
}

// holdHist is a log-linear histogram of hold times: histSub buckets per power of two of
// microseconds, about 9 % wide, from 1 µs to well over a minute. Fixed size, so that recording
// allocates nothing.
type holdHist struct {
	n     [histBuckets]uint32
	total uint32
}

const (
	histSubBits = 3
	histSub     = 1 << histSubBits
	histBuckets = 40 * histSub
)

func histBucket(d time.Duration) int {
	v := uint64(max(d, 0)) >> 10 // about microseconds
	if v < histSub {
		return int(v)
	}
	e := bits.Len64(v) - 1 - histSubBits
	i := (e+1)*histSub + int(v>>e)&(histSub-1)
	return min(i, histBuckets-1)
}

// histBounds returns the lower bound and the width of bucket i.
func histBounds(i int) (lo, width time.Duration) {
	if i < histSub {
		return time.Duration(i) << 10, 1 << 10
	}
	e := i/histSub - 1
	m := uint64(histSub + i%histSub)
	return time.Duration(m << e << 10), time.Duration(uint64(1) << e << 10)
}

func (h *holdHist) add(d time.Duration) {
	h.n[histBucket(d)]++
	h.total++
}

// median interpolates within the median's bucket, so that a limiter comparing two medians sees
// differences smaller than a bucket.
func (h *holdHist) median() time.Duration {
	half := float64(h.total) / 2
	var seen uint32
	for i, c := range h.n {
		if c > 0 && float64(seen+c) >= half {
			lo, width := histBounds(i)
			return lo + time.Duration(float64(width)*(half-float64(seen))/float64(c))
		}
		seen += c
	}
	return 0
}

func (h *holdHist) reset() { *h = holdHist{} }

// chosenAlgorithm returns a new state of the algorithm of gate_concurrent=auto (see BENCHMARKS.md for the comparison).
func chosenAlgorithm() limitAlgorithm { return new(gradientLimit) }
