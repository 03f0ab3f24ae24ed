package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// This file turns results into the targets verdict, results.md and results.csv.

// Targets gated is measured against.
const (
	ratioLimit1     = 1.05                   // gated/plain time per op at 1 goroutine
	ratioLimitMany  = 1.10                   // ... at more goroutines
	judgedLoad      = 5.0                    // overload level the targets are judged at
	goodputShare    = 0.90                   // gated goodput ≥ this share of the capacity
	p99Factor       = 3.0                    // gated success p99 ≤ this × unloaded p99
	refusalP99Limit = 100 * time.Microsecond // p99 latency of a refusal
	heapGCFactor    = 2.0                    // GOGC=100: a heap may reach twice what is live
	heapSlack       = 1 << 20                // heap noise allowed between runs
)

// verdict is the outcome of one check: pass, fail, or not computable.
type verdict int

const (
	na verdict = iota
	pass
	fail
)

func verdictOf(ok bool) verdict {
	if ok {
		return pass
	}
	return fail
}

func (v verdict) String() string {
	switch v {
	case pass:
		return "pass"
	case fail:
		return "FAIL"
	}
	return "n/a"
}

// ratioLimit is the overhead target at g goroutines.
func ratioLimit(g int) float64 {
	if g == 1 {
		return ratioLimit1
	}
	return ratioLimitMany
}

// overheadVerdict judges a gated overhead summary (n/a for the other contenders).
func overheadVerdict(s overheadSummary) verdict {
	if s.Contender != gatedName || s.TimeRatio.Median == 0 {
		return na
	}
	return verdictOf(s.TimeRatio.Median <= ratioLimit(s.Goroutines))
}

// rowChecks are the per-row overload checks of a gated row.
type rowChecks struct {
	Goodput, NotBelowPlain, P99, Refusal, Waiting, Heap verdict
	HeapAllowance                                       uint64
}

// checkRow judges gated row i of q (rows come in plain, gated pairs) against the targets. The
// goodput and latency targets are defined at 5× capacity and judged there, but computed at
// every level from 1× up so that the trend shows.
func checkRow(cfg config, q *overloadQuery, i int) rowChecks {
	r, plain := q.Rows[i], q.Rows[i-1]
	var c rowChecks
	if r.Load >= 1 {
		c.Goodput = verdictOf(r.Goodput >= goodputShare*q.Capacity)
		if ref := q.unloadedP99(plainName); ref > 0 && r.Success > 0 {
			c.P99 = verdictOf(float64(r.SuccessP99) <= p99Factor*float64(ref))
		}
	}
	c.NotBelowPlain = verdictOf(r.Goodput >= plain.Goodput)
	if r.Load <= 1 {
		c.NotBelowPlain = na // not an overload: a short queue may refuse a little here by design
	}
	if r.Refused > 0 {
		c.Refusal = verdictOf(r.RefusalP99 <= refusalP99Limit)
	}
	c.Waiting = verdictOf(r.Peaks.Waiting <= cfg.Q)
	// Heap: gated's peak heap may grow with the load only as far as the callers' allocations
	// explain. Two things do: the arrivals in flight (each holding about what one operation
	// allocates, doubled for the GC's headroom), and the allocation rate, which drives the GC's
	// pacing (a heap goal of at least 4 MiB, objects allocated during marking) the same way for
	// plain database/sql at the same level. So the allowance is the larger of the lowest level's
	// peak plus the in-flight share, and plain's peak at this level; plus heapSlack for noise.
	base := q.Rows[1]
	extra := max(0, r.Inflight-base.Inflight)
	c.HeapAllowance = max(base.Peaks.HeapBytes+uint64(float64(extra)*q.BytesPerOp*heapGCFactor), plain.Peaks.HeapBytes) + heapSlack
	c.Heap = verdictOf(r.Peaks.HeapBytes <= c.HeapAllowance)
	return c
}

// target is one line of the targets table.
type target struct {
	Name, Limit, Measured string
	Result                verdict
}

// targets evaluates gated's targets on res.
func targets(res *results) []target {
	cfg := res.Config
	var out []target
	for _, s := range res.Overhead {
		if s.Contender != gatedName {
			continue
		}
		out = append(out, target{
			Name:     fmt.Sprintf("overhead %s, %s: gated/plain time per op", s.Workload, goroutines(s.Goroutines)),
			Limit:    fmt.Sprintf("≤ %.2f", ratioLimit(s.Goroutines)),
			Measured: fmtStat(s.TimeRatio, "%.3f"),
			Result:   overheadVerdict(s),
		})
	}
	for qi := range res.Overload {
		q := &res.Overload[qi]
		name := q.Query.Name
		gi := judgedRow(q)
		if gi < 0 {
			continue
		}
		g, p := q.Rows[gi], q.Rows[gi-1]
		c := checkRow(cfg, q, gi)
		at := fmt.Sprintf("%g×", g.Load)
		out = append(out,
			target{Name: fmt.Sprintf("overload %s at %s: gated goodput / capacity", name, at),
				Limit:    fmt.Sprintf("≥ %.0f %%", goodputShare*100),
				Measured: fmt.Sprintf("%.1f %% (%.0f of %.0f ops/s)", 100*g.Goodput/q.Capacity, g.Goodput, q.Capacity),
				Result:   c.Goodput},
			target{Name: fmt.Sprintf("overload %s at %s: gated success p99 / unloaded p99", name, at),
				Limit: fmt.Sprintf("≤ %.0f×", p99Factor),
				Measured: fmt.Sprintf("%.2f× (%s vs %s; plain %s)", ratio(g.SuccessP99, q.unloadedP99(plainName)),
					fmtDur(g.SuccessP99), fmtDur(q.unloadedP99(plainName)), fmtDur(p.SuccessP99)),
				Result: c.P99},
			target{Name: fmt.Sprintf("overload %s at %s: gated refusal p99", name, at),
				Limit:    "≤ " + fmtDur(refusalP99Limit),
				Measured: refusalText(g),
				Result:   c.Refusal},
		)
		notBelow, waiting, heap := pass, pass, pass
		var below []string
		maxWaiting := 0
		var worstHeap string
		for i := 1; i < len(q.Rows); i += 2 {
			c := checkRow(cfg, q, i)
			if c.NotBelowPlain == fail {
				notBelow = fail
				below = append(below, fmt.Sprintf("%g×: %.0f < %.0f", q.Rows[i].Load, q.Rows[i].Goodput, q.Rows[i-1].Goodput))
			}
			if c.Waiting == fail {
				waiting = fail
			}
			maxWaiting = max(maxWaiting, q.Rows[i].Peaks.Waiting)
			if c.Heap == fail {
				heap = fail
			}
			if i == len(q.Rows)-1 || c.Heap == fail {
				worstHeap = fmt.Sprintf("%.1f MiB at %g× (allowance %.1f MiB; lowest level %.1f MiB; plain %.1f MiB)",
					mib(q.Rows[i].Peaks.HeapBytes), q.Rows[i].Load, mib(c.HeapAllowance),
					mib(q.Rows[1].Peaks.HeapBytes), mib(q.Rows[i-1].Peaks.HeapBytes))
			}
		}
		for _, r := range q.Unloaded {
			maxWaiting = max(maxWaiting, r.Peaks.Waiting)
			if r.Contender == gatedName && r.Peaks.Waiting > cfg.Q {
				waiting = fail
			}
		}
		belowText := "at every level above 1×"
		if len(below) > 0 {
			belowText = strings.Join(below, "; ")
		}
		out = append(out,
			target{Name: fmt.Sprintf("overload %s: gated goodput never below plain's (levels above 1×)", name),
				Limit: "≥ plain", Measured: belowText, Result: notBelow},
			target{Name: fmt.Sprintf("overload %s: gated waiting (Stats().Waiting, every %v)", name, processEvery),
				Limit: fmt.Sprintf("≤ Q = %d", cfg.Q), Measured: fmt.Sprintf("max %d", maxWaiting), Result: waiting},
			target{Name: fmt.Sprintf("overload %s: gated heap vs offered load", name),
				Limit: "peak ≤ max(lowest level's + in-flight share, plain's) + 1 MiB", Measured: worstHeap, Result: heap},
		)
	}
	return out
}

func goroutines(n int) string {
	if n == 1 {
		return "1 goroutine"
	}
	return fmt.Sprintf("%d goroutines", n)
}

// judgedRow returns the index of the gated row at the level closest to 5×, or -1.
func judgedRow(q *overloadQuery) int {
	best := -1
	for i := 1; i < len(q.Rows); i += 2 {
		if best < 0 || math.Abs(q.Rows[i].Load-judgedLoad) < math.Abs(q.Rows[best].Load-judgedLoad) {
			best = i
		}
	}
	return best
}

func refusalText(r overloadRow) string {
	if r.Refused == 0 {
		return "no refusals"
	}
	return fmt.Sprintf("%s (%d refused)", fmtDur(r.RefusalP99), r.Refused)
}

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// fmtDur prints a duration with three significant digits in a fitting unit.
func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "–"
	case d < time.Microsecond:
		return fmt.Sprintf("%d ns", d)
	case d < time.Millisecond:
		return fmt.Sprintf("%.3g µs", us(d))
	case d < time.Second:
		return fmt.Sprintf("%.3g ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.3g s", d.Seconds())
}

// fmtStat prints "median (min–max)", or only the median when all rounds agree.
func fmtStat(s stat, format string) string {
	m := fmt.Sprintf(format, s.Median)
	lo, hi := fmt.Sprintf(format, s.Min), fmt.Sprintf(format, s.Max)
	if lo == hi {
		return m
	}
	return fmt.Sprintf("%s (%s–%s)", m, lo, hi)
}

// writeOutputs writes results.md, results.csv, overhead.png and overload.png into dir.
func writeOutputs(res *results, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, "results.md"), func(w io.Writer) error { return writeMarkdown(w, res, "") }); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, "results.csv"), func(w io.Writer) error { return writeCSV(w, res) }); err != nil {
		return err
	}
	if err := overheadChart(res, filepath.Join(dir, "overhead.png")); err != nil {
		return err
	}
	return overloadChart(res, filepath.Join(dir, "overload.png"))
}

// publishResults writes root/BENCHMARKS.md and copies the charts of dir to root/docs/bench/.
func publishResults(res *results, dir, root string) error {
	bench := filepath.Join(root, "docs", "bench")
	if err := os.MkdirAll(bench, 0o755); err != nil {
		return err
	}
	for _, name := range []string{"overhead.png", "overload.png"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(bench, name), b, 0o644); err != nil {
			return err
		}
	}
	return writeFile(filepath.Join(root, "BENCHMARKS.md"), func(w io.Writer) error {
		return writeMarkdown(w, res, "docs/bench/")
	})
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}

// writeMarkdown writes the report; imgPrefix is the path of the charts relative to the report.
func writeMarkdown(w io.Writer, res *results, imgPrefix string) error {
	cfg, env := res.Config, res.Env
	var b strings.Builder
	pf := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }

	pf("# gated benchmarks\n\n")
	pf("Produced by `cmd/gatedbench`. The exact command:\n\n```sh\n%s\n```\n\n", cfg.Command)
	pf("Run it yourself with `go run ./cmd/gatedbench` (about %.0f minutes; `-quick` for a smoke run under a minute; "+
		"`-h` lists the flags); `-publish .` rewrites this file and the charts in docs/bench/.\n\n", estimate(defaults()).Minutes())
	if cfg.Note != "" {
		pf("> **Note.** %s\n\n", cfg.Note)
	}
	pf("* Run: %s, took %v.\n", env.Start.UTC().Format("2006-01-02 15:04 UTC"), env.Elapsed.Round(time.Second))
	pf("* Client: %s, %s/%s, %d CPUs; load average at the start %s.\n", env.GoVersion, env.OS, env.Arch, env.CPUs, env.LoadAvg)
	pf("* Server: %s (max_connections %d), on the same machine.\n", firstWords(env.Server, 2), env.ServerConn)
	pf("* Settings: P = %d physical connections; overload gate B = %d, Q = %d, gate_queue_wait = deadline = %v, gate_queue_order = %s; "+
		"overhead gate B = P, Q = %d (≥ goroutines: nothing refused).\n", cfg.P, cfg.B, cfg.Q, cfg.Deadline, cfg.Order, max(cfg.Q, maxInt(cfg.Goroutines)))
	pf("* Overhead: %d interleaved rounds (order rotating), %v measured per contender and cell after %v warm-up; "+
		"values are the median over rounds (min–max).\n", cfg.Rounds, cfg.Cell, cfg.Warmup)
	pf("* Overload: capacity measured closed loop with P goroutines on plain for %v; unloaded latency at %g× capacity; "+
		"each level offers Poisson arrivals for %v, each with its own %v deadline; at most %d in flight.\n"+
		"* A forced GC precedes every measurement, so that none pays for, or reports, the previous one's garbage.\n\n",
		cfg.CapacityFor, cfg.Unloaded, cfg.Duration, cfg.Deadline, cfg.MaxInflight)

	if ts := targets(res); len(ts) > 0 {
		pf("## Targets\n\n| target | limit | measured | result |\n|---|---|---|---|\n")
		for _, t := range ts {
			pf("| %s | %s | %s | %s |\n", t.Name, t.Limit, t.Measured, t.Result)
		}
		pf("\n")
	}

	if len(res.Overhead) > 0 {
		pf("## Overhead\n\n")
		pf("Closed loop, no deadline. *time/op vs plain* is each round's plain ops/s divided by the contender's "+
			"(pairs measured seconds apart), target ≤ %.2f at 1 goroutine and ≤ %.2f above. "+
			"Allocations and CPU are the whole process's, per operation.\n\n", ratioLimit1, ratioLimitMany)
		for _, wl := range overheadWorkloads {
			pf("### %s\n\n", workloadTitle[wl])
			pf("| goroutines | contender | ops/s | time/op vs plain | target | p50 µs | p99 µs | allocs/op | CPU µs/op | errors |\n")
			pf("|---:|---|---:|---:|---|---:|---:|---:|---:|---:|\n")
			for _, s := range res.Overhead {
				if s.Workload != wl {
					continue
				}
				pf("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %d |\n", s.Goroutines, s.Contender,
					fmtStat(s.OpsPerSec, "%.0f"), fmtStat(s.TimeRatio, "%.3f"), overheadVerdict(s),
					fmtStat(s.P50us, "%.0f"), fmtStat(s.P99us, "%.0f"), fmtStat(s.AllocsPerOp, "%.1f"),
					fmtStat(s.CPUus, "%.1f"), s.Errors)
			}
			pf("\n")
		}
		pf("![overhead](%soverhead.png)\n\n", imgPrefix)
	}

	if len(res.Overload) > 0 {
		pf("## Overload\n\n")
		pf("Open-loop Poisson arrivals at multiples of the measured capacity; plain and gated see the same arrival "+
			"sequence. *goodput* counts successes within the deadline per second. Latencies count from the start of "+
			"the call; *start lag* is how late the arrival's goroutine started. *Live heap* is what the last GC found "+
			"live, the heap without its garbage. Checks (gated rows): goodput ≥ %.0f %% of capacity, goodput ≥ plain's "+
			"(above 1×), success p99 ≤ %.0f× plain's unloaded p99, refusal p99 ≤ %s, peak waiting ≤ Q, peak heap "+
			"≤ the larger of the lowest level's peak + %.0f× bytes/op per additional arrival in flight, and plain's "+
			"peak at the same level (the GC paces both by the callers' allocation rate), + %.0f MiB. The targets "+
			"judge goodput, p99 and refusal latency at %g×; the others at every level.\n\n", goodputShare*100,
			p99Factor, fmtDur(refusalP99Limit), heapGCFactor, mib(heapSlack), judgedLoad)
		for qi := range res.Overload {
			q := &res.Overload[qi]
			pf("### %s\n\n", q.Query.Title)
			pf("Capacity %.0f ops/s (plain, %d goroutines, closed loop; p99 %s; %.0f B allocated per op). "+
				"Unloaded (%g× capacity) p99: plain %s, gated %s.\n\n", q.Capacity, cfg.P, fmtDur(q.CapacityP99),
				q.BytesPerOp, cfg.Unloaded, fmtDur(q.unloadedP99(plainName)), fmtDur(q.unloadedP99(gatedName)))
			pf("| load | contender | offered/s | goodput/s | of capacity | success p50 | success p99 | refusal p99 | refused: full + timeout | deadline | late | other | dropped |\n")
			pf("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
			for _, r := range append(append([]overloadRow(nil), q.Unloaded...), q.Rows...) {
				refused := "–"
				if r.Contender == gatedName {
					refused = fmt.Sprintf("%d + %d", r.RejectedFull, r.RejectedTimeout)
				}
				pf("| %g× | %s | %.0f | %.0f | %.0f %% | %s | %s | %s | %s | %d | %d | %d | %d |\n", r.Load, r.Contender,
					r.Offered, r.Goodput, 100*r.Goodput/q.Capacity, fmtDur(r.SuccessP50), fmtDur(r.SuccessP99),
					fmtDur(r.RefusalP99), refused, r.Deadline, r.Late, r.Other, r.Dropped)
			}
			for _, r := range q.Rows {
				if r.FirstOther != "" {
					pf("\nFirst other error of %s at %g×: `%s`\n", r.Contender, r.Load, r.FirstOther)
				}
			}
			pf("\n| load | contender | CPU µs/arrival | allocs/arrival | start lag p99 | peak in flight | peak goroutines | peak heap MiB | peak live heap MiB | "+
				"peak server conns | peak waiting | goodput ≥%.0f%% | ≥ plain | p99 ≤%.0f× | refusal ≤%s | waiting ≤Q | heap |\n",
				goodputShare*100, p99Factor, fmtDur(refusalP99Limit))
			pf("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|---|---|---|\n")
			for i, r := range q.Rows {
				c := rowChecks{}
				waiting := "–"
				if r.Contender == gatedName {
					c = checkRow(cfg, q, i)
					waiting = strconv.Itoa(r.Peaks.Waiting)
				}
				pf("| %g× | %s | %.1f | %.1f | %s | %d | %d | %.1f | %.1f | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Load, r.Contender,
					us(r.CPUPerArrival), r.AllocsPerArrival, fmtDur(r.LagP99), r.Inflight, r.Peaks.Goroutines, mib(r.Peaks.HeapBytes), mib(r.Peaks.LiveBytes),
					serverConns(r.Peaks.ServerConns), waiting,
					c.Goodput, c.NotBelowPlain, c.P99, c.Refusal, c.Waiting, c.Heap)
			}
			pf("\n")
		}
		pf("![overload](%soverload.png)\n", imgPrefix)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func serverConns(n int) string {
	if n < 0 {
		return "n/a"
	}
	return strconv.Itoa(n)
}

func firstWords(s string, n int) string {
	f := strings.Fields(s)
	return strings.Join(f[:min(n, len(f))], " ")
}

func maxInt(vs []int) int {
	m := 0
	for _, v := range vs {
		m = max(m, v)
	}
	return m
}

// csvHeader is the header of results.csv: one measured value per line ("long" form), so that
// both sections and the targets share one file and any tool can pivot it.
var csvHeader = []string{"section", "workload", "level", "contender", "metric", "unit", "median", "min", "max"}

// writeCSV writes every measured value of res as one line.
func writeCSV(w io.Writer, res *results) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvHeader); err != nil {
		return err
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }
	line := func(section, workload, level, contender, metric, unit string, s stat) {
		cw.Write([]string{section, workload, level, contender, metric, unit, f(s.Median), f(s.Min), f(s.Max)})
	}
	one := func(section, workload, level, contender, metric, unit string, v float64) {
		cw.Write([]string{section, workload, level, contender, metric, unit, f(v), "", ""})
	}
	for _, s := range res.Overhead {
		g := strconv.Itoa(s.Goroutines)
		line("overhead", s.Workload, g, s.Contender, "throughput", "ops/s", s.OpsPerSec)
		line("overhead", s.Workload, g, s.Contender, "time_ratio_vs_plain", "ratio", s.TimeRatio)
		line("overhead", s.Workload, g, s.Contender, "p50", "us", s.P50us)
		line("overhead", s.Workload, g, s.Contender, "p99", "us", s.P99us)
		line("overhead", s.Workload, g, s.Contender, "allocs_per_op", "allocs", s.AllocsPerOp)
		line("overhead", s.Workload, g, s.Contender, "cpu_per_op", "us", s.CPUus)
		one("overhead", s.Workload, g, s.Contender, "errors", "count", float64(s.Errors))
	}
	for qi := range res.Overload {
		q := &res.Overload[qi]
		name := q.Query.Name
		one("overload", name, "", plainName, "capacity", "ops/s", q.Capacity)
		one("overload", name, "", plainName, "capacity_p99", "us", us(q.CapacityP99))
		one("overload", name, "", plainName, "bytes_per_op", "bytes", q.BytesPerOp)
		for _, r := range append(append([]overloadRow(nil), q.Unloaded...), q.Rows...) {
			lv := strconv.FormatFloat(r.Load, 'g', -1, 64)
			for _, m := range []struct {
				metric, unit string
				v            float64
			}{
				{"offered", "ops/s", r.Offered}, {"goodput", "ops/s", r.Goodput},
				{"goodput_share_of_capacity", "ratio", r.Goodput / q.Capacity},
				{"success_p50", "us", us(r.SuccessP50)}, {"success_p99", "us", us(r.SuccessP99)},
				{"refusal_p99", "us", us(r.RefusalP99)}, {"start_lag_p99", "us", us(r.LagP99)},
				{"arrivals", "count", float64(r.Arrivals)}, {"success", "count", float64(r.Success)},
				{"late", "count", float64(r.Late)}, {"refused", "count", float64(r.Refused)},
				{"refused_full", "count", float64(r.RejectedFull)}, {"refused_timeout", "count", float64(r.RejectedTimeout)},
				{"deadline", "count", float64(r.Deadline)}, {"other", "count", float64(r.Other)},
				{"dropped", "count", float64(r.Dropped)}, {"peak_inflight", "count", float64(r.Inflight)},
				{"peak_goroutines", "count", float64(r.Peaks.Goroutines)}, {"peak_heap", "bytes", float64(r.Peaks.HeapBytes)},
				{"peak_live_heap", "bytes", float64(r.Peaks.LiveBytes)},
				{"cpu_per_arrival", "us", us(r.CPUPerArrival)}, {"allocs_per_arrival", "allocs", r.AllocsPerArrival},
				{"peak_server_conns", "count", float64(r.Peaks.ServerConns)},
				{"peak_waiting", "count", float64(r.Peaks.Waiting)}, {"peak_running", "count", float64(r.Peaks.Running)},
			} {
				one("overload", name, lv, r.Contender, m.metric, m.unit, m.v)
			}
		}
	}
	// Targets: 1 passed, 0 failed, empty when not computable; the measured text is in results.md.
	for _, t := range targets(res) {
		v := ""
		switch t.Result {
		case pass:
			v = "1"
		case fail:
			v = "0"
		}
		cw.Write([]string{"target", t.Name, t.Limit, gatedName, "pass", "bool", v, "", ""})
	}
	cw.Flush()
	return cw.Error()
}
