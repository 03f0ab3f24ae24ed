package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// scenarioResult is one scenario's runs, by contender.
type scenarioResult struct {
	Name, Title string
	Capacity    float64       // plain, closed loop, P goroutines
	Unloaded    time.Duration // plain's success p99 at 0.1× capacity
	Loads       []float64
	Runs        map[string][]runResult
	Order       []string
	Phase       time.Duration // drop and fail: the length of each phase
}

type overheadRow struct {
	Goroutines  int
	Fixed, Auto stat // ops/s
	Ratio       stat // auto's time per op / fixed's

	AutoLimit    float64 // auto's limit, mean of samples every millisecond during its runs
	AutoLimitMin int     // and the lowest sample
}

type overheadResult struct{ Rows []overheadRow }

type adaptiveReport struct {
	cfg       adaptiveConfig
	start     time.Time
	load      string
	scenarios []*scenarioResult
	overhead  *overheadResult
	targets   []targetRow
}

type targetRow struct{ name, limit, measured, result string }

func (r *adaptiveReport) add(s *scenarioResult) { r.scenarios = append(r.scenarios, s) }

// runsAt returns the runs of contender at load.
func (s *scenarioResult) runsAt(contender string, load float64) []runResult {
	var out []runResult
	for _, r := range s.Runs[contender] {
		if r.Load == load {
			out = append(out, r)
		}
	}
	return out
}

func goodputs(rs []runResult) stat {
	var v []float64
	for _, r := range rs {
		v = append(v, r.Goodput)
	}
	return statOf(v)
}

func p99s(rs []runResult) stat {
	var v []float64
	for _, r := range rs {
		v = append(v, float64(r.P99))
	}
	return statOf(v)
}

func limits(rs []runResult) stat {
	var v []float64
	for _, r := range rs {
		v = append(v, meanLimit(r.Series))
	}
	return statOf(v)
}

// perRunMean is f over the runs, averaged and rounded down: a count per run.
func perRunMean(rs []runResult, f func(runResult) int64) int64 {
	var n int64
	for _, r := range rs {
		n += f(r)
	}
	return n / int64(max(1, len(rs)))
}

func fmtStatR(s stat, f func(float64) string) string {
	if s.Min == s.Max {
		return f(s.Median)
	}
	return fmt.Sprintf("%s (%s–%s)", f(s.Median), f(s.Min), f(s.Max))
}

func fops(v float64) string { return fmt.Sprintf("%.0f", v) }
func fms(v float64) string  { return fmtDur(time.Duration(v)) }
func flim(v float64) string { return fmt.Sprintf("%.1f", v) }

func passFail(ok bool) string {
	if ok {
		return "pass"
	}
	return "FAIL"
}

func (r *adaptiveReport) target(name, limit, measured string, ok bool) {
	r.targets = append(r.targets, targetRow{name, limit, measured, passFail(ok)})
}

// write writes adaptive.md and the charts into the output directory.
func (r *adaptiveReport) write(stdout io.Writer) error {
	r.targets = nil
	var b strings.Builder
	c := r.cfg
	fmt.Fprintf(&b, "# gatedbench adaptive\n\n* Run: %s UTC; load average at the start %s.\n", r.start.UTC().Format("2006-01-02 15:04"), r.load)
	fmt.Fprintf(&b, "* P = %d, Q = %d, deadline = gate_queue_wait = %v, gate_queue_order = %s; %d rounds of %v measured after %v of warm-up at the same load; medians (min–max) over rounds.\n\n",
		c.P, c.Q, c.deadline, c.order, c.rounds, c.duration, c.warmup)
	var body strings.Builder
	for _, s := range r.scenarios {
		r.scenarioSection(&body, s)
		if err := scenarioChart(s, filepath.Join(c.out, "adaptive-"+s.Name+".png")); err != nil {
			return err
		}
	}
	if o := r.overhead; o != nil {
		fmt.Fprintf(&body, "## Overhead: auto against fixed B = P, closed loop SELECT 1\n\n| goroutines | fixed ops/s | auto ops/s | auto/fixed time per op | auto's limit: mean, lowest |\n|---:|---:|---:|---:|---:|\n")
		for _, row := range o.Rows {
			fmt.Fprintf(&body, "| %d | %s | %s | %s | %.2f, %d |\n", row.Goroutines, fmtStatR(row.Fixed, fops), fmtStatR(row.Auto, fops), fmtStatR(row.Ratio, func(v float64) string { return fmt.Sprintf("%.3f", v) }), row.AutoLimit, row.AutoLimitMin)
			r.target(fmt.Sprintf("overhead %d goroutines: auto/fixed time per op", row.Goroutines), "≤ 1.03", fmt.Sprintf("%.3f", row.Ratio.Median), row.Ratio.Median <= 1.03)
		}
		body.WriteString("\n")
	}
	b.WriteString("## Targets\n\n| target | limit | measured | result |\n|---|---|---|---|\n")
	for _, t := range r.targets {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", t.name, t.limit, t.measured, t.result)
	}
	b.WriteString("\n")
	b.WriteString(body.String())
	if err := os.WriteFile(filepath.Join(c.out, "adaptive.md"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	_, err := io.WriteString(stdout, b.String())
	return err
}

func (r *adaptiveReport) scenarioSection(b *strings.Builder, s *scenarioResult) {
	fmt.Fprintf(b, "## %s\n\n", s.Title)
	if s.Capacity > 0 {
		fmt.Fprintf(b, "Capacity %.0f ops/s (plain, %d goroutines, closed loop)", s.Capacity, r.cfg.P)
		if s.Unloaded > 0 {
			fmt.Fprintf(b, "; unloaded p99 (plain at 0.1×) %s", fmtDur(s.Unloaded))
		}
		b.WriteString(".\n\n")
	}
	fmt.Fprintf(b, "| load | contender | goodput/s | success p99 | mean limit | refused | deadline | other |\n|---:|---|---:|---:|---:|---:|---:|---:|\n")
	for _, load := range s.Loads {
		for _, name := range s.Order {
			rs := s.runsAt(name, load)
			if len(rs) == 0 {
				continue
			}
			fmt.Fprintf(b, "| %g× | %s | %s | %s | %s | %d | %d | %d |\n", load, name, fmtStatR(goodputs(rs), fops), fmtStatR(p99s(rs), fms),
				fmtStatR(limits(rs), flim), perRunMean(rs, func(r runResult) int64 { return r.Refused }),
				perRunMean(rs, func(r runResult) int64 { return r.Deadline }), perRunMean(rs, func(r runResult) int64 { return r.Other }))
		}
	}
	b.WriteString("\n")
	for _, name := range s.Order {
		for _, rr := range s.Runs[name] {
			if rr.FirstOther != "" {
				fmt.Fprintf(b, "First other error of %s: `%s`\n\n", name, rr.FirstOther)
				break
			}
		}
	}
	switch s.Name {
	case "cpu":
		r.cpuTargets(b, s)
	case "sleep":
		for _, load := range s.Loads {
			a, f := s.runsAt("auto", load), s.runsAt(fmt.Sprintf("B=%d", r.cfg.P), load)
			ga, gf := goodputs(a).Median, goodputs(f).Median
			pa, pf := p99s(a).Median, p99s(f).Median
			r.target(fmt.Sprintf("sleep %g×: auto goodput / B=P", load), "≥ 0.95", fmt.Sprintf("%.3f (%.0f vs %.0f)", ga/gf, ga, gf), ga >= 0.95*gf)
			r.target(fmt.Sprintf("sleep %g×: auto p99 / B=P", load), "≤ 1.05", fmt.Sprintf("%.3f (%s vs %s)", pa/pf, fms(pa), fms(pf)), pa <= 1.05*pf)
		}
	case "lock":
		a, f := s.runsAt("auto", 5), s.runsAt(fmt.Sprintf("B=%d", r.cfg.P), 5)
		ga, gf := goodputs(a).Median, goodputs(f).Median
		pa, pf := p99s(a).Median, p99s(f).Median
		r.target("lock 5×: auto goodput / B=P", "≥ 0.97", fmt.Sprintf("%.3f (%.0f vs %.0f)", ga/gf, ga, gf), ga >= 0.97*gf)
		r.target("lock 5×: auto p99 vs B=P", "≤ B=P's", fmt.Sprintf("%s vs %s", fms(pa), fms(pf)), pa <= pf)
	case "drop":
		r.dropTargets(b, s)
	case "fail":
		r.failTargets(b, s)
	case "steady":
		r.steadyTargets(b, s)
	case "lend":
		idle := func(n string) string { return n + ", batch idle" }
		sat := func(n string) string { return n + ", batch saturated" }
		g0, g1 := goodputs(s.Runs[idle("no lending")]).Median, goodputs(s.Runs[idle("lending")]).Median
		r.target("lend: web goodput with batch idle, lending / today", "≥ 1.2", fmt.Sprintf("%.2f (%.0f vs %.0f)", g1/g0, g1, g0), g1 >= 1.2*g0)
		p0, p1 := p99s(s.Runs[idle("no lending")]).Median, p99s(s.Runs[sat("lending")]).Median
		r.target("lend: web p99 with batch saturated (lending) / web alone", "≤ 1.5", fmt.Sprintf("%.2f (%s vs %s)", p1/p0, fms(p1), fms(p0)), p1 <= 1.5*p0)
	}
	fmt.Fprintf(b, "![%s](adaptive-%s.png)\n\n", s.Name, s.Name)
}

func (r *adaptiveReport) cpuTargets(b *strings.Builder, s *scenarioResult) {
	best, bestName := 0.0, ""
	var fixed []string
	for k := 1; k <= r.cfg.P; k++ {
		n := fmt.Sprintf("B=%d", k)
		fixed = append(fixed, n)
		if g := goodputs(s.runsAt(n, 5)).Median; g > best {
			best, bestName = g, n
		}
	}
	a, p := s.runsAt("auto", 5), s.runsAt(peerName, 5)
	ga, pa := goodputs(a).Median, p99s(a).Median
	gp, pp := goodputs(p).Median, p99s(p).Median
	fmt.Fprintf(b, "C* = %.0f ops/s (%s).\n\n", best, bestName)
	vsBest, vsC := pairedByRound(s, "auto", fixed, bestName, 5)
	ratio := func(v float64) string { return fmt.Sprintf("%.3f", v) }
	fmt.Fprintf(b, "Paired by round (a round runs every contender once, so a slower stretch of the machine weighs on all of them): auto / that round's best fixed B %s; auto / that round's %s %s.\n\n",
		fmtStatR(vsBest, ratio), bestName, fmtStatR(vsC, ratio))
	r.target("cpu 5×: auto goodput / C*", "≥ 95 %", fmt.Sprintf("%.1f %% (%.0f of %.0f, %s)", 100*ga/best, ga, best, bestName), ga >= 0.95*best)
	r.target("cpu 5×: auto goodput / that round's best fixed B, in every round", "≥ 0.95", fmtStatR(vsBest, ratio), vsBest.Median > 0 && vsBest.Min >= 0.95)
	r.target("cpu 5×: auto success p99 / unloaded", "≤ 3×", fmt.Sprintf("%.2f× (%s vs %s)", pa/float64(s.Unloaded), fms(pa), fmtDur(s.Unloaded)), pa <= 3*float64(s.Unloaded))
	r.target("cpu 5×: auto ahead of "+peerName, "goodput and p99", fmt.Sprintf("goodput %.0f vs %.0f, p99 %s vs %s", ga, gp, fms(pa), fms(pp)), ga >= gp && pa <= pp)
}

// pairedByRound compares contender with the fixed-B contenders round by round at load: its
// goodput over the best of them in the same round, and over ref's in the same round. C* is the
// highest of several medians, each as noisy as the contender's own, so a contender that served
// as much as the best fixed B shows below it by about the noise between rounds; the paired
// ratios show how far that noise reaches.
func pairedByRound(s *scenarioResult, contender string, fixed []string, ref string, load float64) (vsBest, vsRef stat) {
	var best, byRef []float64
	for _, cr := range s.runsAt(contender, load) {
		top, refG := 0.0, 0.0
		for _, n := range fixed {
			for _, fr := range s.runsAt(n, load) {
				if fr.Round != cr.Round {
					continue
				}
				top = max(top, fr.Goodput)
				if n == ref {
					refG = fr.Goodput
				}
			}
		}
		if top > 0 {
			best = append(best, cr.Goodput/top)
		}
		if refG > 0 {
			byRef = append(byRef, cr.Goodput/refG)
		}
	}
	return statOf(best), statOf(byRef)
}

// dropTargets: after the competing load starts, how long until the p99 of every later second
// (a 1 s window sliding by one step) is within 3× unloaded; after it stops, how long until the
// goodput (1 s moving mean) is back to 90 % of the first phase's second half. And while it runs,
// each contender's goodput against B=P's in the same round and the median of its windowed p99s
// against unloaded: a table of every contender, so that the fixed limits show what any limit can
// reach on the slowed server, and auto's two targets.
func (r *adaptiveReport) dropTargets(b *strings.Builder, s *scenarioResult) {
	step := r.cfg.step.Seconds()
	ph := s.Phase.Seconds()
	type dropRun struct {
		goodput float64 // successes per second while the competing load ran
		p99     float64 // the median of the windowed p99s then
	}
	runs := map[string]map[int]dropRun{}
	for _, name := range s.Order {
		runs[name] = map[int]dropRun{}
		for _, rr := range s.Runs[name] {
			settle, recover := -1.0, -1.0
			last := -1.0
			var during []float64 // the windowed p99s while the competing load ran
			var before, n, good, m float64
			for _, p := range rr.Series {
				switch {
				case p.T >= ph/2 && p.T < ph:
					before += p.Goodput
					n++
				case p.T >= ph && p.T < 2*ph:
					good += p.Goodput
					m++
				}
			}
			win := int(math.Round(1 / step))
			for i := range rr.Series {
				p := rr.Series[i]
				if p.T < ph || p.T+1 > 2*ph || i+win > len(rr.Series) {
					continue
				}
				var h coarseHist
				for _, q := range rr.Series[i : i+win] {
					if q.hist != nil {
						h.merge(q.hist)
					}
				}
				if h.quantile(0.99) > 3*s.Unloaded || h.total.Load() == 0 {
					last = p.T - ph + 1
				}
				during = append(during, float64(h.quantile(0.99)))
			}
			settle = max(last, 0)
			before /= max(n, 1)
			runs[name][rr.Round] = dropRun{goodput: good / max(m, 1), p99: statOf(during).Median}
			for i := range rr.Series {
				p := rr.Series[i]
				if p.T < 2*ph || i+win > len(rr.Series) {
					continue
				}
				var g float64
				for _, q := range rr.Series[i : i+win] {
					g += q.Goodput
				}
				if g/float64(win) >= 0.9*before {
					recover = p.T - 2*ph + 1
					break
				}
			}
			fmt.Fprintf(b, "* %s round %d: p99 within 3× unloaded %.2fs after the competing load began (and stayed so); windowed p99 during the load %s; goodput back to 90 %% of before (%.0f/s) %.2fs after it stopped.\n",
				name, rr.Round+1, settle, fmtStatR(statOf(during), func(v float64) string { return fms(v) }), before, recover)
			if name == "auto" {
				r.target(fmt.Sprintf("drop round %d: windowed p99 back within 3× unloaded", rr.Round+1), "≤ 5 s", fmt.Sprintf("%.2f s", settle), settle <= 5)
				r.target(fmt.Sprintf("drop round %d: goodput back after the load stops", rr.Round+1), "≤ 5 s", fmt.Sprintf("%.2f s", recover), recover >= 0 && recover <= 5)
			}
		}
	}
	ref := fmt.Sprintf("B=%d", r.cfg.P)
	if len(runs[ref]) == 0 {
		b.WriteString("\n")
		return
	}
	fmt.Fprintf(b, "\nWhile the competing load ran (medians over rounds, min–max; goodput against %s's in the same round, p99 the median of the windowed p99s, against unloaded %s):\n\n", ref, fms(float64(s.Unloaded)))
	b.WriteString("| contender | goodput/s | of " + ref + "'s | p99 | of unloaded |\n|---|---:|---:|---:|---:|\n")
	for _, name := range s.Order {
		var g, share, p, x []float64
		for round, d := range runs[name] {
			f, ok := runs[ref][round]
			if !ok {
				continue
			}
			g, p, x = append(g, d.goodput), append(p, d.p99), append(x, d.p99/float64(s.Unloaded))
			share = append(share, d.goodput/max(f.goodput, 1e-9))
		}
		if len(g) == 0 {
			continue
		}
		f2 := func(v float64) string { return fmt.Sprintf("%.2f", v) }
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s |\n", name, fmtStatR(statOf(g), fops), fmtStatR(statOf(share), f2), fmtStatR(statOf(p), fms), fmtStatR(statOf(x), f2))
		if name == "auto" {
			sh, px := statOf(share), statOf(x)
			r.target("drop: auto goodput during the load / "+ref+"'s", "≥ 0.8", fmtStatR(sh, f2), sh.Median >= 0.8)
			r.target("drop: auto median windowed p99 during the load / unloaded", "≤ 3", fmtStatR(px, f2), px.Median <= 3)
		}
	}
	b.WriteString("\n")
}

func (r *adaptiveReport) failTargets(b *strings.Builder, s *scenarioResult) {
	rr := s.Runs["auto"][0]
	ph := s.Phase.Seconds()
	var settled float64
	var n int
	hi := [2]float64{}
	for _, p := range rr.Series {
		switch {
		case p.T >= ph/2 && p.T < ph:
			settled += p.Limit
			n++
		case p.T >= ph && p.T < 2*ph:
			hi[0] = max(hi[0], p.Limit)
		case p.T >= 2*ph:
			hi[1] = max(hi[1], p.Limit)
		}
	}
	settled /= float64(max(n, 1))
	fmt.Fprintf(b, "Settled limit %.1f; highest while failing at once %.1f, while timing out %.1f.\n\n", settled, hi[0], hi[1])
	r.target("fail: limit while the query fails at once", "≤ settled", fmt.Sprintf("max %.1f vs %.1f", hi[0], settled), hi[0] <= math.Ceil(settled))
	r.target("fail: limit while the query times out", "≤ settled", fmt.Sprintf("max %.1f vs %.1f", hi[1], settled), hi[1] <= math.Ceil(settled))
}

func (r *adaptiveReport) steadyTargets(b *strings.Builder, s *scenarioResult) {
	st, ok := steadyBand(s.Runs["auto"][0].Series, steadySettle)
	if !ok {
		return
	}
	fmt.Fprintf(b, "After the first %.0f s: mean limit %.2f, per-second means %.2f–%.2f; %d of %d seconds within ±15 %% of the mean.\n\n",
		steadySettle, st.mean, st.lo, st.hi, st.in, st.n)
	minutes := make([]string, len(st.minutes))
	for i, m := range st.minutes {
		minutes[i] = fmt.Sprintf("%.2f", m)
	}
	fmt.Fprintf(b, "Per minute: %s; trend %+.3f permits per minute (a creep shows as a trend, a limit that follows the machine as minutes apart without one).\n\n",
		strings.Join(minutes, ", "), st.trend)
	r.target("steady 2×: per-second limit within ±15 % of its mean", "every second", fmt.Sprintf("%d of %d (worst %.0f %%)", st.in, st.n, 100*st.worst), st.in == st.n)
}

// steadySettle is how long the steady scenario gives the limit to find its level, in seconds:
// the band is measured after it.
const steadySettle = 30.0

// steadyStats is what steadyBand measured of a limit over time.
type steadyStats struct {
	mean, lo, hi float64   // of the per-second means
	in, n        int       // seconds within ±15 % of mean, of n
	worst        float64   // the largest relative distance of a second from mean
	minutes      []float64 // the mean of each whole minute
	trend        float64   // least-squares slope of the per-second means, permits per minute
}

// steadyBand measures the limit of series (one point per second) after its first settle
// seconds; ok is false when nothing is left.
func steadyBand(series []point1, settle float64) (st steadyStats, ok bool) {
	var ts, ls []float64
	for _, p := range series {
		if p.T >= settle {
			ts, ls = append(ts, p.T), append(ls, p.Limit)
		}
	}
	if len(ls) == 0 {
		return st, false
	}
	st.n = len(ls)
	var sum, sumT float64
	for i, l := range ls {
		sum += l
		sumT += ts[i]
	}
	st.mean = sum / float64(st.n)
	meanT := sumT / float64(st.n)
	var cov, varT float64
	for i, l := range ls {
		d := math.Abs(l-st.mean) / st.mean
		st.worst = max(st.worst, d)
		if d <= 0.15 {
			st.in++
		}
		cov += (ts[i] - meanT) * (l - st.mean)
		varT += (ts[i] - meanT) * (ts[i] - meanT)
	}
	if varT > 0 {
		st.trend = 60 * cov / varT
	}
	for i := 0; i+60 <= len(ls); i += 60 {
		m := 0.0
		for _, l := range ls[i : i+60] {
			m += l
		}
		st.minutes = append(st.minutes, m/60)
	}
	st.lo, st.hi = slices.Min(ls), slices.Max(ls)
	return st, true
}

// scenarioChart draws, per load, the limit, the goodput and the p99 of successes over time, one
// line per contender (for cpu: auto, the peer, plain, B = P and the best fixed B), first round.
func scenarioChart(s *scenarioResult, path string) error {
	names := s.Order
	if s.Name == "cpu" && len(names) > 5 {
		best, bestName := 0.0, ""
		for _, n := range names {
			if strings.HasPrefix(n, "B=") {
				if g := goodputs(s.runsAt(n, 5)).Median; g > best {
					best, bestName = g, n
				}
			}
		}
		keep := []string{"auto", peerName, plainName, names[len(names)-4]}
		if !slices.Contains(keep, bestName) {
			keep = append(keep, bestName)
		}
		names = keep
	}
	var cols [][3]*plot.Plot
	type column struct {
		load  float64
		title string
		runs  func(name string) []runResult
		names []string
	}
	var columns []column
	if s.Name == "lend" {
		for _, label := range []string{"batch idle", "batch saturated"} {
			var ns []string
			for _, n := range names {
				if strings.HasSuffix(n, label) {
					ns = append(ns, n)
				}
			}
			columns = append(columns, column{title: "web, " + label, runs: func(n string) []runResult { return s.Runs[n] }, names: ns})
		}
	} else {
		for _, load := range s.Loads {
			columns = append(columns, column{load: load, title: fmt.Sprintf("%s, %g×", s.Name, load), runs: func(n string) []runResult { return s.runsAt(n, load) }, names: names})
		}
	}
	for _, col := range columns {
		lp := newPlot(col.title+": limit", "seconds", "execution permits")
		gp := newPlot("goodput", "seconds", "ops/s")
		pp := newPlot("p99 of successes", "seconds", "ms")
		for i, n := range col.names {
			rs := col.runs(n)
			if len(rs) == 0 {
				continue
			}
			var lim, good, p99 plotter.XYs
			for _, p := range rs[0].Series {
				lim = append(lim, plotter.XY{X: p.T, Y: p.Limit})
				good = append(good, plotter.XY{X: p.T, Y: p.Goodput})
				p99 = append(p99, plotter.XY{X: p.T, Y: float64(p.P99) / 1e6})
			}
			for _, pl := range []struct {
				p   *plot.Plot
				xys plotter.XYs
			}{{lp, lim}, {gp, good}, {pp, p99}} {
				l, err := plotter.NewLine(pl.xys)
				if err != nil {
					return err
				}
				l.Color = plotutil.Color(i)
				l.Width = vg.Points(1.2)
				l.Dashes = plotutil.Dashes(i % 3)
				pl.p.Add(l)
				pl.p.Legend.Add(n, l)
			}
		}
		if s.Unloaded > 0 {
			x1 := 0.0
			for _, n := range col.names {
				if rs := col.runs(n); len(rs) > 0 && len(rs[0].Series) > 0 {
					x1 = rs[0].Series[len(rs[0].Series)-1].T
					break
				}
			}
			if x1 > 0 {
				if err := addLimit(pp, "3× unloaded p99", 0, x1, 3*float64(s.Unloaded)/1e6, 1); err != nil {
					return err
				}
			}
		}
		lp.Y.Min, gp.Y.Min, pp.Y.Min = 0, 0, 0
		cols = append(cols, [3]*plot.Plot{headroom(lp), headroom(gp), headroom(pp)})
	}
	if len(cols) == 0 {
		return nil
	}
	grid := make([][]*plot.Plot, 3)
	for _, c := range cols {
		for i := range 3 {
			grid[i] = append(grid[i], c[i])
		}
	}
	return saveGrid(grid, path, s.Title)
}
