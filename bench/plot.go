package bench

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/inference-cache/inference-cache/internal/figure"
)

// TTFTFloorMs is the lowest modelled TTFT the plots draw: a log axis
// cannot show 0 (a fully cached prompt on an idle engine), so smaller
// values are drawn at the floor, and the axis labels say so.
const TTFTFloorMs = 1.0

// PlotReport writes a PNG with three panels, one strategy per bar group
// or line, in report order:
//
//   - the token hit rate, its value on each bar, with the ideal bound as a
//     dashed line;
//   - the modelled TTFT p50, mean and p99 as bars on a log axis;
//   - the distribution of the modelled TTFT (x: ms, log scale; y: share of
//     requests at or below x), from Result.TTFTMs; omitted when no result
//     carries per-request values (a report read back from JSON).
//
// TTFTs below TTFTFloorMs are drawn at the floor.
func PlotReport(path string, r *Report) error {
	if !strings.EqualFold(filepath.Ext(path), ".png") {
		return fmt.Errorf("bench: plot %q: only .png is written", path)
	}
	if len(r.Strategies) == 0 {
		return fmt.Errorf("bench: plot %q: the report has no strategies", path)
	}
	names := make([]string, len(r.Strategies))
	for i, s := range r.Strategies {
		names[i] = s.Name
	}
	hp, err := hitRatePanel(r, names)
	if err != nil {
		return err
	}
	tp, err := ttftBarsPanel(r, names)
	if err != nil {
		return err
	}
	panels := []*plot.Plot{hp, tp}
	cp, err := ttftCDFPanel(r)
	if err != nil {
		return err
	}
	if cp != nil {
		panels = append(panels, cp)
	}
	return savePanels(path, panels)
}

// nominalX names the x axis's categories, slanted so a dozen strategy
// names fit side by side.
func nominalX(p *plot.Plot, names []string) {
	p.NominalX(names...)
	p.X.Tick.Label.Rotation = math.Pi / 9
	p.X.Tick.Label.XAlign = draw.XRight
	p.X.Tick.Label.YAlign = draw.YCenter
}

func hitRatePanel(r *Report, names []string) (*plot.Plot, error) {
	hit := make(plotter.Values, len(r.Strategies))
	labels := plotter.XYLabels{XYs: make(plotter.XYs, len(r.Strategies)), Labels: make([]string, len(r.Strategies))}
	top := max(r.IdealTokenHitRate, 0.01)
	for i, s := range r.Strategies {
		hit[i] = 100 * s.TokenHitRate
		labels.XYs[i] = plotter.XY{X: float64(i), Y: hit[i]}
		labels.Labels[i] = fmt.Sprintf("%.1f", hit[i])
		top = max(top, s.TokenHitRate)
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Token prefix-cache hit rate — %s, %d engines × %d blocks", r.Trace, r.Fleet.Engines, r.Fleet.CacheBlocks)
	p.Y.Label.Text = "hit rate (%)"
	bars, err := plotter.NewBarChart(hit, vg.Points(20))
	if err != nil {
		return nil, err
	}
	bars.Color = plotutil.Color(0)
	bars.LineStyle.Width = 0
	p.Add(bars)
	values, err := plotter.NewLabels(labels)
	if err != nil {
		return nil, err
	}
	for i := range values.TextStyle {
		values.TextStyle[i].XAlign = draw.XCenter
		values.Offset.Y = vg.Points(2)
	}
	p.Add(values)
	ideal := plotter.NewFunction(func(float64) float64 { return 100 * r.IdealTokenHitRate })
	ideal.Color = color.RGBA{R: 200, A: 255}
	ideal.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(ideal)
	p.Legend.Add(fmt.Sprintf("ideal bound %.1f%%", 100*r.IdealTokenHitRate), ideal)
	p.Legend.Top = true
	p.Y.Min, p.Y.Max = 0, 100*top*1.15
	nominalX(p, names)
	return p, nil
}

// ttftBarsPanel draws p50, mean and p99 side by side per strategy on a
// log axis, each bar rising from the floor.
func ttftBarsPanel(r *Report, names []string) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Modelled TTFT per strategy (queue wait + uncached tokens / prefill speed), log scale"
	p.Y.Label.Text = fmt.Sprintf("ms (< %g drawn at %g)", TTFTFloorMs, TTFTFloorMs)
	bars := []figure.Bar{{Label: "p50"}, {Label: "mean"}, {Label: "p99"}}
	for i := range r.Strategies {
		s := &r.Strategies[i]
		bars[0].Values = append(bars[0].Values, s.TTFTModelP50Ms)
		bars[1].Values = append(bars[1].Values, s.TTFTModelMeanMs)
		bars[2].Values = append(bars[2].Values, s.TTFTModelP99Ms)
	}
	top, err := figure.LogBars(p, len(r.Strategies), bars, TTFTFloorMs, vg.Points(9), 1)
	if err != nil {
		return nil, err
	}
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = true, true
	// Fixed range: a log axis must not start at or below 0, which gonum
	// would pick for bars all at the floor.
	p.Y.Min, p.Y.Max = TTFTFloorMs, max(top*2, 10*TTFTFloorMs)
	nominalX(p, names)
	return p, nil
}

// cdfPoints caps the points of one distribution line.
const cdfPoints = 400

// ttftCDFPanel draws the share of requests with a modelled TTFT at or
// below x, one line per strategy with per-request values; nil when none
// has any.
func ttftCDFPanel(r *Report) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Distribution of the modelled TTFT (further left and higher is better)"
	p.X.Label.Text = fmt.Sprintf("modelled TTFT, ms (log scale; below %g ms drawn at %g ms)", TTFTFloorMs, TTFTFloorMs)
	p.Y.Label.Text = "share of requests ≤ x"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	top, lines := TTFTFloorMs, 0
	for k := range r.Strategies {
		s := &r.Strategies[k]
		v := s.TTFTMs
		if !slices.IsSorted(v) {
			v = slices.Sorted(slices.Values(v))
		}
		pts := figure.CDF(v, TTFTFloorMs, cdfPoints)
		if len(pts) == 0 {
			continue
		}
		top = max(top, pts[len(pts)-1].X)
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, err
		}
		l.Color = plotutil.Color(k)
		l.Dashes = plotutil.Dashes(k / len(plotutil.DefaultColors))
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(s.Name, l)
		lines++
	}
	if lines == 0 {
		return nil, nil
	}
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = false, false
	p.X.Min, p.X.Max = TTFTFloorMs, max(top*1.5, 10*TTFTFloorMs)
	p.Y.Min, p.Y.Max = 0, 1
	return p, nil
}

// PlotSweep writes a PNG of the token hit rate against the cache size
// (blocks per engine), one line per strategy, from one report per size.
func PlotSweep(path string, reps []*Report) error {
	if !strings.EqualFold(filepath.Ext(path), ".png") {
		return fmt.Errorf("bench: plot %q: only .png is written", path)
	}
	if len(reps) == 0 {
		return fmt.Errorf("bench: nothing to plot")
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Token hit rate vs cache size — %s, %d engines", reps[0].Trace, reps[0].Fleet.Engines)
	p.X.Label.Text = "cache per engine (512-token blocks)"
	p.Y.Label.Text = "hit rate (%)"
	p.Y.Min = 0
	for k, s := range reps[0].Strategies {
		pts := make(plotter.XYs, 0, len(reps))
		for _, r := range reps {
			for _, t := range r.Strategies {
				if t.Name == s.Name {
					pts = append(pts, plotter.XY{X: float64(r.Fleet.CacheBlocks), Y: 100 * t.TokenHitRate})
				}
			}
		}
		l, pt, err := plotter.NewLinePoints(pts)
		if err != nil {
			return err
		}
		l.Color, pt.Color = plotutil.Color(k), plotutil.Color(k)
		pt.Shape = plotutil.Shape(k)
		p.Add(l, pt)
		p.Legend.Add(s.Name, l, pt)
	}
	ideal := plotter.NewFunction(func(float64) float64 { return 100 * reps[0].IdealTokenHitRate })
	ideal.Color = color.RGBA{R: 200, A: 255}
	ideal.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(ideal)
	p.Legend.Add("ideal bound (infinite cache)", ideal)
	p.Legend.Top, p.Legend.Left = false, false
	p.Y.Max = 100 * max(reps[0].IdealTokenHitRate, 0.01) * 1.1
	return savePanels(path, []*plot.Plot{p})
}

// savePanels draws the plots stacked vertically into one PNG.
func savePanels(path string, ps []*plot.Plot) error {
	if err := figure.SavePNG(path, 4*vg.Inch, ps); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return nil
}
