package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// This file turns the rounds of gatedbench fair into its targets and fair.md.

// Targets of gatedbench fair, judged on the medians over rounds.
const (
	smallSuccessTarget = 0.99    // every small tenant's success rate beside the noisy one
	highSuccessTarget  = 0.999   // the high-priority worker's success rate
	fairP99Factor      = 2.0     // success p99 ≤ this × the round's unloaded p99
	fairGoodputShare   = 0.95    // goodput of the mixed load ≥ this × the noisy tenant's alone
	cardHeapLimit      = 8 << 20 // heap growth after the cardinality run's keys
)

type fairReport struct {
	cfg     fairConfig
	start   time.Time
	elapsed time.Duration
	load    string // load average at the start
	cpus    int
	server  string // PostgreSQL server_version
	rounds  []fairRound
}

// overRounds is f over the rounds where it has a value, as median and min–max.
func overRounds(rounds []fairRound, f func(rd fairRound) (float64, bool)) stat {
	var vs []float64
	for _, rd := range rounds {
		if v, ok := f(rd); ok {
			vs = append(vs, v)
		}
	}
	return statOf(vs)
}

// phaseStat is f of contender c's phase in m (Noisy or Priority) over the rounds that ran it.
func phaseStat(rounds []fairRound, m func(fairRound) map[string]*phaseResult, c string, f func(rd fairRound, p *phaseResult) float64) stat {
	return overRounds(rounds, func(rd fairRound) (float64, bool) {
		p := m(rd)[c]
		if p == nil {
			return 0, false
		}
		return f(rd, p), true
	})
}

func noisyOf(rd fairRound) map[string]*phaseResult    { return rd.Noisy }
func priorityOf(rd fairRound) map[string]*phaseResult { return rd.Priority }
func lockstepOf(rd fairRound) map[string]*phaseResult { return rd.Lockstep }

// p99Ratio is d over the round's unloaded p99 (0 when there is none).
func p99Ratio(d, unloaded time.Duration) float64 {
	if unloaded <= 0 {
		return 0
	}
	return float64(d) / float64(unloaded)
}

func fpct(v float64) string   { return fmt.Sprintf("%.2f %%", 100*v) }
func fratio(v float64) string { return fmt.Sprintf("%.2f", v) }

// fp99ratio is fratio, with "–" for 0: no success (or no unloaded p99) to take a ratio of.
func fp99ratio(v float64) string {
	if v == 0 {
		return "–"
	}
	return fratio(v)
}
func fmibs(v float64) string { return fmt.Sprintf("%.2f", v/(1<<20)) }

// fairTarget is one line of the targets table: the same measure with the classes in the
// callers' contexts and without, each judged against the limit.
type fairTarget struct {
	name, limit   string
	with, without string
	withV, noV    verdict
}

// fairTargets judges the medians over rounds against the targets, for the scenarios that ran.
func fairTargets(r *fairReport) []fairTarget {
	var out []fairTarget
	add := func(name, limit string, with, without stat, format func(float64) string, ok func(float64) bool) {
		out = append(out, fairTarget{name: name, limit: limit,
			with: fmtStatR(with, format), without: fmtStatR(without, format),
			withV: verdictOf(ok(with.Median)), noV: verdictOf(ok(without.Median))})
	}
	small := smallNames(r.cfg.small)
	if r.has(func(rd fairRound) bool { return rd.Noisy != nil }) {
		worstRate := func(c string) stat {
			return phaseStat(r.rounds, noisyOf, c, func(_ fairRound, p *phaseResult) float64 { return worstSmall(p, small).Rate })
		}
		worstRatio := func(c string) stat {
			return phaseStat(r.rounds, noisyOf, c, func(rd fairRound, p *phaseResult) float64 {
				return p99Ratio(worstSmall(p, small).P99, rd.Unloaded)
			})
		}
		share := func(c string) stat {
			return phaseStat(r.rounds, noisyOf, c, func(rd fairRound, p *phaseResult) float64 {
				if a := rd.NoisyAlone.goodput(); a > 0 {
					return p.goodput() / a
				}
				return 0
			})
		}
		add("noisy: the worst small tenant's success rate", fmt.Sprintf("≥ %s", fpct(smallSuccessTarget)),
			worstRate(withTenants), worstRate(noTenants), fpct, func(v float64) bool { return v >= smallSuccessTarget })
		add("noisy: the worst small tenant's success p99 / unloaded p99", fmt.Sprintf("≤ %.1f", fairP99Factor),
			worstRatio(withTenants), worstRatio(noTenants), fp99ratio, func(v float64) bool { return v > 0 && v <= fairP99Factor })
		add("noisy: goodput of all tenants / the noisy tenant's alone", fmt.Sprintf("≥ %.2f", fairGoodputShare),
			share(withTenants), share(noTenants), fratio, func(v float64) bool { return v >= fairGoodputShare })
	}
	if r.has(func(rd fairRound) bool { return rd.Priority != nil }) {
		rate := func(c string) stat {
			return phaseStat(r.rounds, priorityOf, c, func(_ fairRound, p *phaseResult) float64 { return p.group(highGroup).successRate() })
		}
		ratio := func(c string) stat {
			return phaseStat(r.rounds, priorityOf, c, func(rd fairRound, p *phaseResult) float64 {
				return p99Ratio(p.group(highGroup).p99(), rd.Unloaded)
			})
		}
		add("priority: the high worker's success rate", fmt.Sprintf("≥ %s", fpct(highSuccessTarget)),
			rate(withHigh), rate(noPriority), fpct, func(v float64) bool { return v >= highSuccessTarget })
		add("priority: the high worker's success p99 / unloaded p99", fmt.Sprintf("≤ %.1f", fairP99Factor),
			ratio(withHigh), ratio(noPriority), fp99ratio, func(v float64) bool { return v > 0 && v <= fairP99Factor })
	}
	if r.has(func(rd fairRound) bool { return rd.Card != nil }) {
		growth := func(c string) stat {
			return overRounds(r.rounds, func(rd fairRound) (float64, bool) {
				if cr := rd.Card[c]; cr != nil {
					return float64(cr.Growth), true
				}
				return 0, false
			})
		}
		add(fmt.Sprintf("cardinality: heap growth after %d calls (MiB)", r.cfg.keys), fmt.Sprintf("≤ %s", fmibs(cardHeapLimit)),
			growth(withTenants), growth(noTenants), fmibs, func(v float64) bool { return v <= cardHeapLimit })
	}
	return out
}

// has reports whether some round satisfies f.
func (r *fairReport) has(f func(fairRound) bool) bool {
	for _, rd := range r.rounds {
		if f(rd) {
			return true
		}
	}
	return false
}

// write writes fair.md into the output directory and the same text to stdout.
func (r *fairReport) write(stdout io.Writer) error {
	var b strings.Builder
	r.markdown(&b)
	if err := os.WriteFile(filepath.Join(r.cfg.out, "fair.md"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	_, err := io.WriteString(stdout, b.String())
	return err
}

func (r *fairReport) markdown(b *strings.Builder) {
	c := r.cfg
	fmt.Fprintf(b, "# gatedbench fair\n\n* Run: %s UTC", r.start.UTC().Format("2006-01-02 15:04"))
	if r.elapsed > 0 {
		fmt.Fprintf(b, ", %v", r.elapsed.Round(time.Second))
	}
	fmt.Fprintf(b, "; %d CPUs, load average at the start %s; PostgreSQL %s.\n", r.cpus, r.load, r.server)
	if c.note != "" {
		fmt.Fprintf(b, "* Note: %s\n", c.note)
	}
	fmt.Fprintf(b, "* One gated *sql.DB: gate_max_conns = gate_concurrent = %d, gate_queue = %d, gate_queue_wait = %v; every call under a deadline of %v.\n",
		c.P, c.Q, c.queueWait, c.deadline)
	fmt.Fprintf(b, "* Rounds: %d (%d done); each phase measured for %v after %v of warm-up at its load; medians (min–max) over rounds.\n",
		c.rounds, len(r.rounds), c.phase, c.warmup)
	if c.command != "" {
		fmt.Fprintf(b, "* Command: `%s`\n", c.command)
	}
	b.WriteString("\n## Targets\n\nJudged on the medians over rounds. \"with\" carries the tenants (or the priority) in the callers' contexts; \"without\" is the same load with none.\n\n")
	b.WriteString("| target | limit | with | result | without | result |\n|---|---|---|---|---|---|\n")
	for _, t := range fairTargets(r) {
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s |\n", t.name, t.limit, t.with, t.withV, t.without, t.noV)
	}
	b.WriteString("\n")
	u := fmtStatR(overRounds(r.rounds, func(rd fairRound) (float64, bool) { return float64(rd.Unloaded), rd.Unloaded > 0 }), fms)
	if st := overRounds(r.rounds, func(rd fairRound) (float64, bool) { return float64(rd.UnloadedSt), rd.UnloadedSt > 0 }); st.Median > 0 {
		u += ", its statement time's p99 in the driver " + fmtStatR(st, fms)
	}
	if r.has(func(rd fairRound) bool { return rd.Noisy != nil }) {
		r.noisySection(b, u)
	}
	if r.has(func(rd fairRound) bool { return rd.Priority != nil }) {
		r.prioritySection(b, u)
	}
	if r.has(func(rd fairRound) bool { return rd.Lockstep != nil }) {
		r.lockstepSection(b)
	}
	if r.has(func(rd fairRound) bool { return rd.Card != nil }) {
		r.cardSection(b)
	}
}

// A rowFunc writes one row of a table of phases: name, then f over the rounds of each
// contender's phase, in format.
type rowFunc func(name string, f func(rd fairRound, p *phaseResult) float64, format func(float64) string)

// phaseRows writes the head of a table of contenders' phases in m and returns the rowFunc that
// writes its rows.
func phaseRows(b *strings.Builder, rounds []fairRound, m func(fairRound) map[string]*phaseResult, contenders []string) rowFunc {
	fmt.Fprintf(b, "| | %s |\n|---|%s\n", strings.Join(contenders, " | "), strings.Repeat("---|", len(contenders)))
	return func(name string, f func(rd fairRound, p *phaseResult) float64, format func(float64) string) {
		fmt.Fprintf(b, "| %s |", name)
		for _, ct := range contenders {
			fmt.Fprintf(b, " %s |", fmtStatR(phaseStat(rounds, m, ct, f), format))
		}
		b.WriteString("\n")
	}
}

// spacingRows writes, with row (of phaseRows), how the successes of the phases were spaced.
func spacingRows(row rowFunc) {
	sp := func(f func(s spacing) float64) func(fairRound, *phaseResult) float64 {
		return func(_ fairRound, p *phaseResult) float64 { return f(p.Spacing) }
	}
	row("successes ending within 1 ms of the one before", sp(func(s spacing) float64 { return s.Close }), fpct)
	row("gap between successive successes: p50", sp(func(s spacing) float64 { return float64(s.P50) }), fms)
	row("the same: p90", sp(func(s spacing) float64 { return float64(s.P90) }), fms)
	row("the same: p99", sp(func(s spacing) float64 { return float64(s.P99) }), fms)
	row("the same, were they evenly spaced", sp(func(s spacing) float64 { return float64(s.Even) }), fms)
}

func (r *fairReport) lockstepSection(b *strings.Builder) {
	c := r.cfg
	fmt.Fprintf(b, "## Lockstep\n\n`%s`. %d workers that nobody refuses, each arriving at a random moment within the warm-up, on %d connections: plain database/sql (SetMaxOpenConns(%d)) and gated (gate_concurrent = %d, gate_queue = %d, gate_queue_wait = %v). A waiting caller can start only when a query ends. When the connections end their queries together, one that just missed a group of releases waits for the next group, up to a whole query, however the waiters are ordered.\n\n",
		c.sleepQuery(), c.noisy, c.P, c.P, c.P, c.noisy, c.deadline)
	row := phaseRows(b, r.rounds, lockstepOf, []string{onPlain, onGated})
	row("goodput (/s)", func(_ fairRound, p *phaseResult) float64 { return p.goodput() }, fops)
	spacingRows(row)
	for _, line := range firstOthers(r.rounds, lockstepOf) {
		fmt.Fprintf(b, "\n* other error: %s", line)
	}
	b.WriteString("\n\n")
}

// kindCells are the median counts per round of every failure kind of group g in contender c.
func kindCells(rounds []fairRound, m func(fairRound) map[string]*phaseResult, c, g string) []string {
	var cells []string
	for k := range numKinds {
		s := phaseStat(rounds, m, c, func(_ fairRound, p *phaseResult) float64 { return float64(p.group(g).Fail[k]) })
		cells = append(cells, fmtStatR(s, fops))
	}
	return cells
}

// firstOthers lists the first error of kind other of every phase that had one.
func firstOthers(rounds []fairRound, m func(fairRound) map[string]*phaseResult) []string {
	var out []string
	for i, rd := range rounds {
		for c, p := range m(rd) {
			for g, t := range p.Groups {
				if t.FirstOther != "" {
					out = append(out, fmt.Sprintf("round %d, %s, %s: %s", i+1, c, g, t.FirstOther))
				}
			}
		}
	}
	return out
}

// noisySection writes the noisy neighbour's tables; unloaded says what one worker alone measured.
func (r *fairReport) noisySection(b *strings.Builder, unloaded string) {
	c := r.cfg
	small := smallNames(c.small)
	fmt.Fprintf(b, "## Noisy neighbour\n\n`%s`. The tenant %q: %d workers that retry at once after any error; %s .. %s: one worker each, which waits %v after a failure. Unloaded p99 (one worker alone, first in each round): %s.\n\n",
		c.sleepQuery(), noisyGroup, c.noisy, small[0], small[len(small)-1], c.pause, unloaded)
	contenders := []string{withTenants, noTenants}
	row := phaseRows(b, r.rounds, noisyOf, contenders)
	row("the worst small tenant's success rate", func(_ fairRound, p *phaseResult) float64 { return worstSmall(p, small).Rate }, fpct)
	row("the worst small tenant's success p99", func(_ fairRound, p *phaseResult) float64 { return float64(worstSmall(p, small).P99) }, fms)
	row("the same / that round's unloaded p99", func(rd fairRound, p *phaseResult) float64 {
		return p99Ratio(worstSmall(p, small).P99, rd.Unloaded)
	}, fp99ratio)
	row("the worst small tenant's p99 wait in the gate", func(_ fairRound, p *phaseResult) float64 { return float64(worstSmall(p, small).Wait) }, fms)
	row("the same, the least any order of service could have made it (the next release of any permit)", func(_ fairRound, p *phaseResult) float64 { return float64(worstSmall(p, small).Next) }, fms)
	row("the worst small tenant's p99 statement time, in the driver", func(_ fairRound, p *phaseResult) float64 { return float64(worstSmall(p, small).Stmt) }, fms)
	row("goodput of all tenants (/s)", func(_ fairRound, p *phaseResult) float64 { return p.goodput() }, fops)
	row("goodput of the noisy tenant (/s)", func(_ fairRound, p *phaseResult) float64 { return p.goodput(noisyGroup) }, fops)
	row("goodput of the small tenants (/s)", func(_ fairRound, p *phaseResult) float64 { return p.goodput(small...) }, fops)
	alone := overRounds(r.rounds, func(rd fairRound) (float64, bool) { return rd.NoisyAlone.goodput(), rd.NoisyAlone != nil })
	fmt.Fprintf(b, "| goodput of the noisy tenant alone (/s), the reference | %s | (same) |\n", fmtStatR(alone, fops))
	row("all tenants / the noisy tenant alone, round by round", func(rd fairRound, p *phaseResult) float64 {
		if a := rd.NoisyAlone.goodput(); a > 0 {
			return p.goodput() / a
		}
		return 0
	}, fratio)
	spacingRows(row)
	b.WriteString("\nEvery tenant: calls per round ending inside the measured window, and how they ended (median counts per round).\n\n")
	b.WriteString("| tenant | contender | calls | success rate | success p99 | displaced | full | timeout | deadline | other |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, g := range append([]string{noisyGroup}, small...) {
		for _, ct := range contenders {
			calls := phaseStat(r.rounds, noisyOf, ct, func(_ fairRound, p *phaseResult) float64 { return float64(p.group(g).Calls) })
			rate := phaseStat(r.rounds, noisyOf, ct, func(_ fairRound, p *phaseResult) float64 { return p.group(g).successRate() })
			p99 := phaseStat(r.rounds, noisyOf, ct, func(_ fairRound, p *phaseResult) float64 { return float64(p.group(g).p99()) })
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s |\n", g, ct, fmtStatR(calls, fops), fmtStatR(rate, fpct), fmtStatR(p99, fms),
				strings.Join(kindCells(r.rounds, noisyOf, ct, g), " | "))
		}
	}
	for _, line := range firstOthers(r.rounds, noisyOf) {
		fmt.Fprintf(b, "\n* other error: %s", line)
	}
	b.WriteString("\n\n")
}

// prioritySection writes the priority scenario's table; unloaded says what one worker alone
// measured.
func (r *fairReport) prioritySection(b *strings.Builder, unloaded string) {
	c := r.cfg
	fmt.Fprintf(b, "## Priority\n\n`%s`. One worker whose context carries gated.PriorityHigh (\"%s\"; none in \"%s\"), which waits %v after a failure, beside %d workers of normal priority (no priority set) that retry at once after any error. Unloaded p99: %s.\n\n",
		c.sleepQuery(), withHigh, noPriority, c.pause, c.noisy, unloaded)
	row := phaseRows(b, r.rounds, priorityOf, []string{withHigh, noPriority})
	row("the high worker's success rate", func(_ fairRound, p *phaseResult) float64 { return p.group(highGroup).successRate() }, fpct)
	row("the high worker's success p99", func(_ fairRound, p *phaseResult) float64 { return float64(p.group(highGroup).p99()) }, fms)
	row("the same / that round's unloaded p99", func(rd fairRound, p *phaseResult) float64 {
		return p99Ratio(p.group(highGroup).p99(), rd.Unloaded)
	}, fp99ratio)
	row("the high worker's p99 wait in the gate", func(_ fairRound, p *phaseResult) float64 { return float64(p.group(highGroup).Wait.quantile(0.99)) }, fms)
	row("the same, the least any order of service could have made it (the next release of any permit)", func(_ fairRound, p *phaseResult) float64 { return float64(p.group(highGroup).Next.quantile(0.99)) }, fms)
	row("the high worker's p99 statement time, in the driver", func(_ fairRound, p *phaseResult) float64 { return float64(p.group(highGroup).Stmt.quantile(0.99)) }, fms)
	row("the high worker's calls per round", func(_ fairRound, p *phaseResult) float64 { return float64(p.group(highGroup).Calls) }, fops)
	for k := range numKinds {
		row("the high worker's failures: "+kindNames[k], func(_ fairRound, p *phaseResult) float64 { return float64(p.group(highGroup).Fail[k]) }, fops)
	}
	row("goodput of the normal workers (/s)", func(_ fairRound, p *phaseResult) float64 { return p.goodput(normalGroup) }, fops)
	row("the normal workers' success rate", func(_ fairRound, p *phaseResult) float64 { return p.group(normalGroup).successRate() }, fpct)
	spacingRows(row)
	for _, line := range firstOthers(r.rounds, priorityOf) {
		fmt.Fprintf(b, "\n* other error: %s", line)
	}
	b.WriteString("\n\n")
}

// cardAdmission says what the cardinality run's workers find at the gate, whose admission
// permits are admit.
func cardAdmission(workers, admit int) string {
	if workers > admit {
		return fmt.Sprintf("With more workers than B+Q (%d), most calls find admission full and are refused at once; only the admitted ones queue with their keys.", admit)
	}
	return fmt.Sprintf("With no more workers than B+Q (%d), every call is admitted, and those beyond B queue with their keys.", admit)
}

func (r *fairReport) cardSection(b *strings.Builder) {
	c := r.cfg
	fmt.Fprintf(b, "## Cardinality\n\n`SELECT 1`, %d calls from %d workers, each call with a tenant key of its own in \"%s\" (new keys every round) and none in \"%s\". Heap: HeapAlloc after runtime.GC, before the calls and after them, the *sql.DB open throughout. %s\n\n",
		c.keys, c.cardW, withTenants, noTenants, cardAdmission(c.cardW, c.P+c.Q))
	contenders := []string{withTenants, noTenants}
	fmt.Fprintf(b, "| | %s | %s |\n|---|---|---|\n", contenders[0], contenders[1])
	row := func(name string, f func(cr *cardResult) float64, format func(float64) string) {
		fmt.Fprintf(b, "| %s |", name)
		for _, ct := range contenders {
			s := overRounds(r.rounds, func(rd fairRound) (float64, bool) {
				if cr := rd.Card[ct]; cr != nil {
					return f(cr), true
				}
				return 0, false
			})
			fmt.Fprintf(b, " %s |", fmtStatR(s, format))
		}
		b.WriteString("\n")
	}
	row("heap growth (MiB)", func(cr *cardResult) float64 { return float64(cr.Growth) }, fmibs)
	row("calls", func(cr *cardResult) float64 { return float64(cr.Total.Calls) }, fops)
	row("succeeded", func(cr *cardResult) float64 { return float64(cr.Total.OK) }, fops)
	for k := range numKinds {
		row("failed: "+kindNames[k], func(cr *cardResult) float64 { return float64(cr.Total.Fail[k]) }, fops)
	}
	row("calls per second", func(cr *cardResult) float64 { return float64(cr.Total.Calls) / cr.Elapsed.Seconds() }, fops)
	row("the gate's waiting operations after the calls", func(cr *cardResult) float64 { return float64(cr.Waiting) }, fops)
	for i, rd := range r.rounds {
		for ct, cr := range rd.Card {
			if cr.Total.FirstOther != "" {
				fmt.Fprintf(b, "\n* other error: round %d, %s: %s", i+1, ct, cr.Total.FirstOther)
			}
		}
	}
	b.WriteString("\n\n")
}
