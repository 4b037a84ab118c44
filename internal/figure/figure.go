// Package figure holds what the benchmarks' plots share on top of gonum
// plot: panels stacked into one PNG, a distribution line thinned to a
// bounded number of points, and bars on a log axis (a bar from 0 has no
// place there, so each rises from a floor).
package figure

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Width is the width of every figure.
const Width = 10 * vg.Inch

// SavePNG draws ps stacked vertically, each panelHeight high, into the
// PNG file path. Errors: path not ending in .png (case-insensitive), no
// panels, or the file system's.
func SavePNG(path string, panelHeight vg.Length, ps []*plot.Plot) error {
	if !strings.EqualFold(filepath.Ext(path), ".png") {
		return fmt.Errorf("plot %q: only .png is written", path)
	}
	if len(ps) == 0 {
		return fmt.Errorf("plot %q: nothing to plot", path)
	}
	img := vgimg.New(Width, vg.Length(len(ps))*panelHeight)
	tiles := draw.Tiles{Rows: len(ps), Cols: 1, PadX: vg.Millimeter, PadY: 3 * vg.Millimeter,
		PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 2 * vg.Millimeter}
	grid := make([][]*plot.Plot, len(ps))
	for i, p := range ps {
		grid[i] = []*plot.Plot{p}
	}
	cs := plot.Align(grid, tiles, draw.New(img))
	for i, p := range ps {
		p.Draw(cs[i][0])
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return f.Close()
}

// CDF is the empirical distribution of sorted (ascending) as points (x,
// share of values ≤ x), x raised to floor (NaN drawn at floor), at most
// about maxPoints of them (every k-th value, and always the last); nil
// when sorted is empty.
func CDF(sorted []float64, floor float64, maxPoints int) plotter.XYs {
	if len(sorted) == 0 {
		return nil
	}
	at := func(x float64) float64 {
		if math.IsNaN(x) {
			return floor
		}
		return max(x, floor)
	}
	step := max(1, len(sorted)/max(1, maxPoints))
	pts := make(plotter.XYs, 0, len(sorted)/step+2)
	for i := 0; i < len(sorted); i += step {
		pts = append(pts, plotter.XY{X: at(sorted[i]), Y: float64(i+1) / float64(len(sorted))})
	}
	if last := len(sorted) - 1; last%step != 0 {
		pts = append(pts, plotter.XY{X: at(sorted[last]), Y: 1})
	}
	return pts
}

// Bar is one group member of LogBars: its legend label and its value per
// category (NaN and ±Inf drawn as the floor).
type Bar struct {
	Label  string
	Values []float64
}

// LogBars adds to p, on a log Y axis, one bar of width w per member of
// bars for each of n categories, side by side, the k-th in
// plotutil.Color(colorFrom+k); each rises from floor (stacked on an
// undrawn bar of that height). It returns the highest value drawn (at
// least floor) so the caller can set the axis range.
func LogBars(p *plot.Plot, n int, bars []Bar, floor float64, w vg.Length, colorFrom int) (float64, error) {
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	base := make(plotter.Values, n)
	for i := range base {
		base[i] = floor
	}
	under, err := plotter.NewBarChart(base, vg.Points(1))
	if err != nil {
		return 0, err
	}
	top := floor
	for k, b := range bars {
		h := make(plotter.Values, n)
		for i := range h {
			v := b.Values[i]
			if math.IsNaN(v) || math.IsInf(v, 0) {
				v = floor
			}
			v = max(v, floor)
			h[i] = v - floor
			top = max(top, v)
		}
		c, err := plotter.NewBarChart(h, w)
		if err != nil {
			return 0, err
		}
		c.StackOn(under)
		c.Offset = vg.Length(float64(k)-float64(len(bars)-1)/2) * w
		c.Color = plotutil.Color(colorFrom + k)
		c.LineStyle.Width = 0
		p.Add(c)
		p.Legend.Add(b.Label, c)
	}
	return top, nil
}
