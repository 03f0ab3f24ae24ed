package main

import (
	"fmt"
	"image/color"
	"os"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// This file draws the two PNG charts with gonum.org/v1/plot: one column per workload or query,
// medians with min–max error bars where there are rounds.

// contenderStyle gives each contender the same color and glyph in every chart.
var contenderStyle = map[string]int{plainName: 0, gatedName: 1, nativeName: 2, autoName: 3}

// overheadChart draws, per workload, throughput against goroutines and the time per operation
// relative to plain (with the targets as dashed lines).
func overheadChart(res *results, path string) error {
	if len(res.Overhead) == 0 {
		return saveGrid([][]*plot.Plot{{newPlot("overhead section not run", "", "")}}, path, "Overhead")
	}
	var grid [][]*plot.Plot
	top, bottom := []*plot.Plot{}, []*plot.Plot{}
	for _, wl := range overheadWorkloads {
		tp := newPlot(workloadTitle[wl], "goroutines", "ops/s (median, min–max)")
		rp := newPlot("time per op relative to plain", "goroutines", "ratio (median, min–max)")
		for _, p := range []*plot.Plot{tp, rp} {
			p.X.Scale = plot.LogScale{}
			p.X.Tick.Marker = valueTicks(res.Config.Goroutines, "")
		}
		rp.Y.Min = 0.8
		for _, name := range []string{plainName, gatedName, nativeName} {
			var ops, ratios []stat
			var xs []float64
			for _, s := range res.Overhead {
				if s.Workload == wl && s.Contender == name {
					xs = append(xs, float64(s.Goroutines))
					ops = append(ops, s.OpsPerSec)
					ratios = append(ratios, s.TimeRatio)
				}
			}
			if err := addSeries(tp, name, xs, ops); err != nil {
				return err
			}
			if name != plainName {
				if err := addSeries(rp, name, xs, ratios); err != nil {
					return err
				}
			}
		}
		if err := addLimit(rp, "target 1 goroutine", 1, 1.5, ratioLimit1, 1); err != nil {
			return err
		}
		if err := addLimit(rp, "target 8+ goroutines", 1.5, float64(max(2, maxInt(res.Config.Goroutines))), ratioLimitMany, 2); err != nil {
			return err
		}
		tp.Y.Min = 0
		top, bottom = append(top, headroom(tp)), append(bottom, headroom(rp))
	}
	grid = append(grid, top, bottom)
	return saveGrid(grid, path, fmt.Sprintf("Overhead, P = %d (gated B = P); %s", res.Config.P, res.Env.GoVersion))
}

// overloadChart draws, per query, goodput, success p99 and peak heap against offered load.
func overloadChart(res *results, path string) error {
	if len(res.Overload) == 0 {
		return saveGrid([][]*plot.Plot{{newPlot("overload section not run", "", "")}}, path, "Overload")
	}
	var good, lat, heap []*plot.Plot
	const xLabel = "offered load (× capacity)"
	for qi := range res.Overload {
		q := &res.Overload[qi]
		gp := newPlot(q.Query.Title, xLabel, "goodput (ops/s)")
		lp := newPlot("p99 latency of successes", xLabel, "ms")
		hp := newPlot("peak heap (solid) and peak live heap (dashed)", xLabel, "MiB")
		for _, p := range []*plot.Plot{gp, lp, hp} {
			p.X.Scale = plot.LogScale{}
			p.X.Tick.Marker = valueTicks(res.Config.Loads, "×")
		}
		for _, name := range []string{plainName, gatedName, autoName} {
			var xs []float64
			var gs, ls, hs, lives []stat
			rows := q.Rows
			if name == autoName && len(q.Auto) > 0 {
				rows = q.Auto[1:]
			}
			for _, r := range rows {
				if r.Contender != name {
					continue
				}
				xs = append(xs, r.Load)
				gs = append(gs, point(r.Goodput))
				ls = append(ls, point(float64(r.SuccessP99)/1e6))
				hs = append(hs, point(mib(r.Peaks.HeapBytes)))
				lives = append(lives, point(mib(r.Peaks.LiveBytes)))
			}
			for _, s := range []struct {
				p  *plot.Plot
				vs []stat
			}{{gp, gs}, {lp, ls}, {hp, hs}} {
				if err := addSeries(s.p, name, xs, s.vs); err != nil {
					return err
				}
			}
			if err := addDashedSeries(hp, name, xs, lives); err != nil {
				return err
			}
		}
		lo, hi := res.Config.Loads[0], res.Config.Loads[len(res.Config.Loads)-1]
		if err := addLimit(gp, "capacity", lo, hi, q.Capacity, 2); err != nil {
			return err
		}
		if err := addLimit(gp, "90 % of capacity", lo, hi, goodputShare*q.Capacity, 1); err != nil {
			return err
		}
		if ref := q.unloadedP99(plainName); ref > 0 {
			if err := addLimit(lp, "3× unloaded p99", lo, hi, p99Factor*float64(ref)/1e6, 1); err != nil {
				return err
			}
		}
		if err := addLimit(lp, "deadline", lo, hi, float64(res.Config.Deadline)/1e6, 2); err != nil {
			return err
		}
		lp.Y.Min, hp.Y.Min, gp.Y.Min = 0, 0, 0
		gp.Legend.Top = false // the goodput lines run near the top
		good, lat, heap = append(good, gp), append(lat, headroom(lp)), append(heap, headroom(hp))
	}
	c := res.Config
	return saveGrid([][]*plot.Plot{good, lat, heap}, path,
		fmt.Sprintf("Overload: P = %d, gated B = %d, Q = %d, deadline %v, Poisson arrivals", c.P, c.B, c.Q, c.Deadline))
}

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	return p
}

// valueTicks labels exactly the measured values on a log axis.
func valueTicks[T int | float64](vs []T, suffix string) plot.Ticker {
	var ts plot.ConstantTicks
	for _, v := range vs {
		ts = append(ts, plot.Tick{Value: float64(v), Label: strconv.FormatFloat(float64(v), 'g', -1, 64) + suffix})
	}
	return ts
}

// point is a single measurement as a stat (no rounds, no error bar).
func point(v float64) stat { return stat{Median: v, Min: v, Max: v} }

// headroom raises the top of p's y axis so that the legend, drawn at the top, does not cover
// the data.
func headroom(p *plot.Plot) *plot.Plot {
	p.Y.Max += 0.4 * (p.Y.Max - p.Y.Min)
	return p
}

// errPoints are medians with min–max error bars.
type errPoints struct {
	plotter.XYs
	plotter.YErrors
}

// addSeries adds a contender's line with points and, where min and max differ, error bars.
func addSeries(p *plot.Plot, name string, xs []float64, vs []stat) error {
	if len(xs) == 0 {
		return nil
	}
	pts := errPoints{XYs: make(plotter.XYs, len(xs)), YErrors: make(plotter.YErrors, len(xs))}
	for i := range xs {
		pts.XYs[i] = plotter.XY{X: xs[i], Y: vs[i].Median}
		pts.YErrors[i].Low = vs[i].Median - vs[i].Min
		pts.YErrors[i].High = vs[i].Max - vs[i].Median
	}
	line, points, err := plotter.NewLinePoints(pts.XYs)
	if err != nil {
		return err
	}
	i := contenderStyle[name]
	line.Color = plotutil.Color(i)
	line.Width = vg.Points(1.5)
	points.Color = plotutil.Color(i)
	points.Shape = plotutil.Shape(i)
	p.Add(line, points)
	p.Legend.Add(name, line, points)
	for _, v := range vs {
		if v.Min != v.Max {
			bars, err := plotter.NewYErrorBars(pts)
			if err != nil {
				return err
			}
			bars.Color = plotutil.Color(i)
			p.Add(bars)
			break
		}
	}
	return nil
}

// addDashedSeries adds a secondary, dashed line for a contender, without a legend entry.
func addDashedSeries(p *plot.Plot, name string, xs []float64, vs []stat) error {
	if len(xs) == 0 {
		return nil
	}
	xys := make(plotter.XYs, len(xs))
	for i := range xs {
		xys[i] = plotter.XY{X: xs[i], Y: vs[i].Median}
	}
	l, err := plotter.NewLine(xys)
	if err != nil {
		return err
	}
	l.Color = plotutil.Color(contenderStyle[name])
	l.Dashes = plotutil.Dashes(1)
	p.Add(l)
	return nil
}

// addLimit draws a horizontal dashed reference line at y from x0 to x1.
func addLimit(p *plot.Plot, label string, x0, x1, y float64, dash int) error {
	if x1 <= x0 {
		x1 = x0 * 1.01
	}
	l, err := plotter.NewLine(plotter.XYs{{X: x0, Y: y}, {X: x1, Y: y}})
	if err != nil {
		return err
	}
	l.Color = color.Gray{Y: 96}
	l.Dashes = plotutil.Dashes(dash)
	p.Add(l)
	p.Legend.Add(label, l)
	return nil
}

// saveGrid draws rows of plots on one PNG with a title.
func saveGrid(grid [][]*plot.Plot, path, title string) error {
	cols := len(grid[0])
	w, h := vg.Length(cols)*5.5*vg.Inch, vg.Length(len(grid))*3.6*vg.Inch+0.4*vg.Inch
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(100), vgimg.UseBackgroundColor(color.White))
	dc := draw.New(img)
	head := plot.New()
	head.Title.Text = title
	head.Title.TextStyle.Font.Size = vg.Points(14)
	head.HideAxes()
	head.Draw(draw.Crop(dc, 0, 0, h-0.4*vg.Inch, 0))
	body := draw.Crop(dc, 0, 0, 0, -0.4*vg.Inch)
	tiles := draw.Tiles{Rows: len(grid), Cols: cols, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	canvases := plot.Align(grid, tiles, body)
	for j := range grid {
		for i := range grid[j] {
			if grid[j][i] != nil {
				grid[j][i].Draw(canvases[j][i])
			}
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}
