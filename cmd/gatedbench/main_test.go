package main

import (
	"context"
	"encoding/csv"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatedsql/gated/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestRunWritesParsableOutputs runs both sections for a few seconds against the test server and
// checks that the four outputs exist and parse, and that every contender did work.
func TestRunWritesParsableOutputs(t *testing.T) {
	url := pgtest.URL(t)
	cfg, _, err := parseFlags([]string{
		"-P", "2", "-goroutines", "1,4", "-rounds", "1", "-cell", "100ms", "-warmup", "50ms",
		"-loads", "1,3", "-duration", "300ms", "-capacity", "1s", "-unloaded", "0.25",
		"-sleep", "2ms", "-queries", "sleep", "-out", t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg.URL = url
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var log strings.Builder
	res, err := run(ctx, cfg, &log)
	if err != nil {
		t.Fatalf("run: %v\nprogress:\n%s", err, log.String())
	}
	if err := writeOutputs(res, cfg.Out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "overhead select1 g=4 round 1/1") {
		t.Errorf("no progress line for a cell; progress:\n%s", log.String())
	}

	for _, s := range res.Overhead {
		if s.OpsPerSec.Median <= 0 || s.Errors != 0 {
			t.Errorf("overhead %s g=%d %s: %.0f ops/s, %d errors", s.Workload, s.Goroutines, s.Contender, s.OpsPerSec.Median, s.Errors)
		}
	}
	if got, want := len(res.Overhead), 2*2*3; got != want {
		t.Errorf("%d overhead summaries, want %d", got, want)
	}
	if len(res.Overload) != 1 || len(res.Overload[0].Rows) != 4 {
		t.Fatalf("overload: want 1 query with 4 rows, got %+v", res.Overload)
	}
	q := res.Overload[0]
	if q.Capacity <= 0 {
		t.Errorf("capacity %.0f", q.Capacity)
	}
	for _, r := range append(q.Unloaded, q.Rows...) {
		if r.Success == 0 {
			t.Errorf("overload %g× %s: no success (%s, late %d)", r.Load, r.Contender, r.brief(), r.Late)
		}
		if r.Contender == gatedName && r.Other != 0 {
			t.Errorf("overload %g× gated: %d unexpected errors, the first: %s", r.Load, r.Other, r.FirstOther)
		}
		if r.Contender == gatedName && r.Peaks.Waiting > cfg.Q {
			t.Errorf("overload %g× gated: %d waiting > Q = %d", r.Load, r.Peaks.Waiting, cfg.Q)
		}
	}

	if t.Failed() {
		t.Logf("progress:\n%s", log.String())
	}

	md, err := os.ReadFile(filepath.Join(cfg.Out, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Targets", "## Overhead", "## Overload", "](overhead.png)", "](overload.png)", cfg.Command} {
		if !strings.Contains(string(md), want) {
			t.Errorf("results.md lacks %q", want)
		}
	}
	checkCSV(t, filepath.Join(cfg.Out, "results.csv"))
	for _, name := range []string{"overhead.png", "overload.png"} {
		checkPNG(t, filepath.Join(cfg.Out, name))
	}
}

// checkCSV checks that path is a CSV file with the expected header whose numeric columns parse,
// and that it has lines of every section.
func checkCSV(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(recs) < 2 || strings.Join(recs[0], ",") != strings.Join(csvHeader, ",") {
		t.Fatalf("%s: header %q, %d lines", path, recs[0], len(recs))
	}
	sections := map[string]int{}
	for _, r := range recs[1:] {
		sections[r[0]]++
		for _, v := range r[6:] {
			if v == "" {
				continue
			}
			if _, err := strconv.ParseFloat(v, 64); err != nil {
				t.Errorf("%s: line %q: %v", path, r, err)
			}
		}
	}
	for _, s := range []string{"overhead", "overload", "target"} {
		if sections[s] == 0 {
			t.Errorf("%s: no %s lines", path, s)
		}
	}
}

func checkPNG(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if b := img.Bounds(); b.Dx() < 400 || b.Dy() < 300 {
		t.Errorf("%s: %v is too small", path, b)
	}
}

// TestHistogramQuantiles checks that quantiles land within the histogram's precision.
func TestHistogramQuantiles(t *testing.T) {
	var h histogram
	for i := 1; i <= 10000; i++ {
		h.record(time.Duration(i) * time.Microsecond)
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 5 * time.Millisecond}, {0.99, 9900 * time.Microsecond}, {1, 10 * time.Millisecond}} {
		got := h.quantile(tc.q)
		if d := float64(got-tc.want) / float64(tc.want); d < -1.0/histSub || d > 1.0/histSub {
			t.Errorf("quantile(%g) = %v, want %v ± %.1f %%", tc.q, got, tc.want, 100.0/histSub)
		}
	}
	var empty histogram
	if got := empty.quantile(0.99); got != 0 {
		t.Errorf("empty quantile = %v, want 0", got)
	}
	for _, v := range []uint64{0, 1, 63, 64, 65, 127, 128, 1000, 1 << 30, 1<<40 - 1} {
		if i := histIndex(v); i < 0 || i >= histBuckets {
			t.Errorf("histIndex(%d) = %d out of range", v, i)
		}
	}
}

// TestWithParams checks that parameters are added in the DSN's own form.
func TestWithParams(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"postgres://u@h:5432/db?sslmode=disable", "postgres://u@h:5432/db?application_name=x&gate_queue=3&sslmode=disable"},
		{"host=h user=u", "host=h user=u application_name=x gate_queue=3"},
	} {
		got, err := withParams(tc.in, "application_name", "x", "gate_queue", "3")
		if err != nil || got != tc.want {
			t.Errorf("withParams(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestPairedByRoundComparesRunsOfTheSameRound(t *testing.T) {
	run := func(name string, round int, g float64) runResult {
		return runResult{Contender: name, Load: 5, Round: round, Goodput: g}
	}
	s := &scenarioResult{Runs: map[string][]runResult{
		// Round 0 is slow for everyone, round 1 fast: auto serves 90 % of the best in each.
		"auto": {run("auto", 0, 450), run("auto", 1, 900)},
		"B=1":  {run("B=1", 0, 500), run("B=1", 1, 800)},
		"B=2":  {run("B=2", 0, 400), run("B=2", 1, 1000)},
	}}
	vsBest, vsRef := pairedByRound(s, "auto", []string{"B=1", "B=2"}, "B=2", 5)
	if vsBest != (stat{Median: 0.9, Min: 0.9, Max: 0.9}) {
		t.Errorf("auto / the round's best: %+v, want 0.9 in both rounds", vsBest)
	}
	if vsRef.Min != 0.9 || vsRef.Max != 1.125 {
		t.Errorf("auto / B=2 of the same round: %+v, want 0.9 and 1.125", vsRef)
	}
	// Against the medians over rounds auto is 675 of C* = 700 (B=2), 0.96: only pairing shows
	// that it served 0.9 of the round's best in every round.
	if vsBest, _ := pairedByRound(s, "auto", []string{"B=1", "B=2"}, "B=2", 2); vsBest != (stat{}) {
		t.Errorf("at a load without runs: %+v, want nothing", vsBest)
	}
}

func TestSteadyBandTellsACreepFromALimitThatMoves(t *testing.T) {
	series := func(limit func(s int) float64) []point1 {
		var ps []point1
		for s := range 630 {
			ps = append(ps, point1{T: float64(s), Limit: limit(s)})
		}
		return ps
	}
	// The first 30 s are the limit's to find its level, and are left out.
	st, ok := steadyBand(series(func(s int) float64 {
		if s < 30 {
			return 1
		}
		return 3
	}), steadySettle)
	if !ok || st.n != 600 || st.in != 600 || st.mean != 3 || st.trend != 0 || len(st.minutes) != 10 {
		t.Errorf("a steady limit of 3: %+v", st)
	}
	// A limit at 2 for the first five minutes and at 3 after: minutes apart, every second out
	// of the band around 2.5, and a trend (the least-squares line through a step rises).
	st, _ = steadyBand(series(func(s int) float64 {
		if s < 330 {
			return 2
		}
		return 3
	}), steadySettle)
	if st.in != 0 || st.minutes[0] != 2 || st.minutes[9] != 3 || math.Abs(st.worst-0.2) > 1e-9 {
		t.Errorf("a limit at 2, then at 3: %+v", st)
	}
	// A creep of 0.5 permits a minute from 2: the trend says so, whatever the band says.
	st, _ = steadyBand(series(func(s int) float64 { return 2 + float64(s-30)/120 }), steadySettle)
	if math.Abs(st.trend-0.5) > 1e-9 {
		t.Errorf("a creep of 0.5 a minute: trend %v", st.trend)
	}
	if _, ok := steadyBand(series(func(int) float64 { return 2 })[:30], steadySettle); ok {
		t.Error("a run shorter than the settling time measured something")
	}
}

func TestClosedLoopMeasuresOnlyOnceEveryWorkerIsWarm(t *testing.T) {
	// Each worker's first operation is slow, as one that opens a connection is on a busy
	// machine: longer than the warm-up and the measured window together. Were the window to
	// begin at the end of the warm-up regardless, it would see no operation at all.
	var first [2]atomic.Bool
	op := func(ctx context.Context, worker int) error {
		if first[worker].CompareAndSwap(false, true) {
			time.Sleep(300 * time.Millisecond)
		}
		return nil
	}
	lr, err := closedLoop(context.Background(), op, make([]workerState, 2), 10*time.Millisecond, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if lr.Ops == 0 {
		t.Errorf("no operation measured: the window began before the workers' first operations ended")
	}
	if lr.Elapsed < 50*time.Millisecond {
		t.Errorf("measured for %v, want the whole window of 50ms", lr.Elapsed)
	}
}

// The CPU-bound scenario's goodput target holds in every round, not only for the medians: a
// contender whose median is within 95 % of C* but that served 0.9 of the best fixed B in one
// round fails the row of every round.
func TestCPUTargetsCheckEveryRound(t *testing.T) {
	run := func(name string, round int, g float64) runResult {
		return runResult{Contender: name, Load: 5, Round: round, Goodput: g, P99: time.Millisecond}
	}
	s := &scenarioResult{Unloaded: time.Millisecond, Runs: map[string][]runResult{
		"B=1":    {run("B=1", 0, 1000), run("B=1", 1, 1000), run("B=1", 2, 1000)},
		"B=2":    {run("B=2", 0, 500), run("B=2", 1, 500), run("B=2", 2, 500)},
		"auto":   {run("auto", 0, 1000), run("auto", 1, 990), run("auto", 2, 900)},
		peerName: {run(peerName, 0, 100), run(peerName, 1, 100), run(peerName, 2, 100)},
	}}
	result := func(r *adaptiveReport, name string) string {
		for _, row := range r.targets {
			if row.name == name {
				return row.result
			}
		}
		t.Fatalf("no target row %q in %+v", name, r.targets)
		return ""
	}
	r := &adaptiveReport{cfg: adaptiveConfig{P: 2}}
	r.cpuTargets(new(strings.Builder), s)
	if got, want := result(r, "cpu 5×: auto goodput / C*"), passFail(true); got != want {
		t.Errorf("the medians' row: %s, want %s (990 of 1000)", got, want)
	}
	if got, want := result(r, "cpu 5×: auto goodput / that round's best fixed B, in every round"), passFail(false); got != want {
		t.Errorf("the rounds' row: %s, want %s (0.90 in the third round)", got, want)
	}
}
