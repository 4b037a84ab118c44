package loadgen

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// PlotSeries is one replay drawn by Plot: its name (a routing strategy),
// its summary and the TTFT of every request answered in full, ms.
type PlotSeries struct {
	Name    string
	Summary Summary
	TTFTMs  []float64
}

// plotFloorMs is the lowest time the log axes draw.
const plotFloorMs = 1.0

// Plot writes a PNG (path must end in .png) of the replays side by side,
// titled title: the engines' cache hit rate and the routed hit rate per
// series; measured TTFT p50 and p99 and E2E p50 on a log axis; and the
// distribution of the measured TTFT, one line per series.
func Plot(path, title string, ss []PlotSeries) error {
	if !strings.EqualFold(filepath.Ext(path), ".png") {
		return fmt.Errorf("loadgen: plot %q: only .png is written", path)
	}
	if len(ss) == 0 {
		return fmt.Errorf("loadgen: plot %q: nothing to plot", path)
	}
	names := make([]string, len(ss))
	for i, s := range ss {
		names[i] = s.Name
	}
	hit, err := grouped(ss, names, "Prefix-cache hit rate — "+title, "% of prompt tokens", false, []stat{
		{"engines' cached tokens", func(s *Summary) float64 { return 100 * s.CacheHitRate }},
		{"routed (proxy's matched tokens)", func(s *Summary) float64 { return 100 * s.HitRate }},
	})
	if err != nil {
		return err
	}
	lat, err := grouped(ss, names, "Measured latency at the client, log scale", "ms", true, []stat{
		{"TTFT p50", func(s *Summary) float64 { return s.TTFT.P50 }},
		{"TTFT p99", func(s *Summary) float64 { return s.TTFT.P99 }},
		{"E2E p50", func(s *Summary) float64 { return s.E2E.P50 }},
	})
	if err != nil {
		return err
	}
	cdf, err := cdfPanel(ss)
	if err != nil {
		return err
	}
	return savePNG(path, []*plot.Plot{hit, lat, cdf})
}

type stat struct {
	label string
	v     func(*Summary) float64
}

// grouped draws one bar per stat for each series; on a log axis the bars
// rise from plotFloorMs (stacked on an undrawn bar of that height).
func grouped(ss []PlotSeries, names []string, title, ylabel string, logY bool, stats []stat) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	n := len(ss)
	var base *plotter.BarChart
	floor := 0.0
	if logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		floor = plotFloorMs
		f := make(plotter.Values, n)
		for i := range f {
			f[i] = floor
		}
		b, err := plotter.NewBarChart(f, vg.Points(1))
		if err != nil {
			return nil, err
		}
		base = b
	}
	w := vg.Points(14)
	top := max(floor, 1)
	for k, st := range stats {
		h := make(plotter.Values, n)
		for i := range ss {
			v := max(st.v(&ss[i].Summary), floor)
			h[i] = v - floor
			top = max(top, v)
		}
		b, err := plotter.NewBarChart(h, w)
		if err != nil {
			return nil, err
		}
		if base != nil {
			b.StackOn(base)
		}
		b.Offset = vg.Length(float64(k)-float64(len(stats)-1)/2) * w
		b.Color = plotutil.Color(k)
		b.LineStyle.Width = 0
		p.Add(b)
		p.Legend.Add(st.label, b)
	}
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = true, false
	p.NominalX(names...)
	if logY {
		p.Y.Min, p.Y.Max = floor, top*12 // room above the bars for the legend
	} else {
		p.Y.Min, p.Y.Max = 0, top*1.3
	}
	return p, nil
}

// cdfPanel draws the share of requests with a TTFT at or below x.
func cdfPanel(ss []PlotSeries) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Distribution of the measured TTFT (further left and higher is better)"
	p.X.Label.Text = fmt.Sprintf("TTFT at the client, ms (log scale; below %g ms drawn at %g ms)", plotFloorMs, plotFloorMs)
	p.Y.Label.Text = "share of requests ≤ x"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	top := plotFloorMs
	for k, s := range ss {
		v := slices.Sorted(slices.Values(s.TTFTMs))
		if len(v) == 0 {
			continue
		}
		pts := make(plotter.XYs, len(v))
		for i, x := range v {
			pts[i] = plotter.XY{X: max(x, plotFloorMs), Y: float64(i+1) / float64(len(v))}
		}
		top = max(top, pts[len(pts)-1].X)
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, err
		}
		l.Color = plotutil.Color(k)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(s.Name, l)
	}
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = true, true // the curves start at 0 on the left
	p.X.Min, p.X.Max = plotFloorMs, top*1.5
	p.Y.Min, p.Y.Max = 0, 1
	return p, nil
}

// savePNG draws the plots stacked vertically into one PNG.
func savePNG(path string, ps []*plot.Plot) error {
	img := vgimg.New(10*vg.Inch, vg.Length(len(ps))*3.5*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(ps), Cols: 1, PadY: 3 * vg.Millimeter, PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter,
		PadLeft: 2 * vg.Millimeter, PadRight: 2 * vg.Millimeter}
	grid := make([][]*plot.Plot, len(ps))
	for i, p := range ps {
		grid[i] = []*plot.Plot{p}
	}
	cs := plot.Align(grid, tiles, dc)
	for i, p := range ps {
		p.Draw(cs[i][0])
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("loadgen: plot: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("loadgen: plot %s: %w", path, err)
	}
	return f.Close()
}
