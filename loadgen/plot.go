package loadgen

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/inference-cache/inference-cache/internal/figure"
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
	if err := figure.SavePNG(path, 3.5*vg.Inch, []*plot.Plot{hit, lat, cdf}); err != nil {
		return fmt.Errorf("loadgen: %w", err)
	}
	return nil
}

type stat struct {
	label string
	v     func(*Summary) float64
}

// grouped draws one bar per stat for each series; on a log axis the bars
// rise from plotFloorMs.
func grouped(ss []PlotSeries, names []string, title, ylabel string, logY bool, stats []stat) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	bars := make([]figure.Bar, len(stats))
	for k, st := range stats {
		bars[k] = figure.Bar{Label: st.label, Values: make([]float64, len(ss))}
		for i := range ss {
			bars[k].Values[i] = st.v(&ss[i].Summary)
		}
	}
	w := vg.Points(14)
	if logY {
		top, err := figure.LogBars(p, len(ss), bars, plotFloorMs, w, 0)
		if err != nil {
			return nil, err
		}
		p.Y.Min, p.Y.Max = plotFloorMs, top*12 // room above the bars for the legend
	} else {
		top := 1.0
		for k, b := range bars {
			c, err := plotter.NewBarChart(plotter.Values(b.Values), w)
			if err != nil {
				return nil, err
			}
			c.Offset = vg.Length(float64(k)-float64(len(bars)-1)/2) * w
			c.Color = plotutil.Color(k)
			c.LineStyle.Width = 0
			p.Add(c)
			p.Legend.Add(b.Label, c)
			for _, v := range b.Values {
				top = max(top, v)
			}
		}
		p.Y.Min, p.Y.Max = 0, top*1.3
	}
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = true, false
	p.NominalX(names...)
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
		pts := figure.CDF(slices.Sorted(slices.Values(s.TTFTMs)), plotFloorMs, len(s.TTFTMs))
		if len(pts) == 0 {
			continue
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
