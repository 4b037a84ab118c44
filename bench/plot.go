package bench

import (
	"fmt"
	"image/color"
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

// PlotReport writes a PNG with two panels: the token hit rate per strategy
// (with the ideal bound as a line) and the modelled TTFT p50/p99 per
// strategy.
func PlotReport(path string, r *Report) error {
	if !strings.EqualFold(filepath.Ext(path), ".png") {
		return fmt.Errorf("bench: plot %q: only .png is written", path)
	}
	names := make([]string, len(r.Strategies))
	hit := make(plotter.Values, len(r.Strategies))
	p50 := make(plotter.Values, len(r.Strategies))
	p99 := make(plotter.Values, len(r.Strategies))
	for i, s := range r.Strategies {
		names[i] = s.Name
		hit[i] = 100 * s.TokenHitRate
		p50[i] = s.TTFTModelP50Ms
		p99[i] = s.TTFTModelP99Ms
	}
	w := vg.Points(20)

	hp := plot.New()
	hp.Title.Text = fmt.Sprintf("Token prefix-cache hit rate — %s, %d engines × %d blocks", r.Trace, r.Fleet.Engines, r.Fleet.CacheBlocks)
	hp.Y.Label.Text = "hit rate (%)"
	hp.Y.Min, hp.Y.Max = 0, 100*max(r.IdealTokenHitRate, 0.01)*1.15
	bars, err := plotter.NewBarChart(hit, w)
	if err != nil {
		return err
	}
	bars.Color = plotutil.Color(0)
	bars.LineStyle.Width = 0
	hp.Add(bars)
	ideal := plotter.NewFunction(func(float64) float64 { return 100 * r.IdealTokenHitRate })
	ideal.Color = color.RGBA{R: 200, A: 255}
	ideal.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	hp.Add(ideal)
	hp.Legend.Add(fmt.Sprintf("ideal bound %.1f%%", 100*r.IdealTokenHitRate), ideal)
	hp.Legend.Top = true
	hp.NominalX(names...)

	tp := plot.New()
	tp.Title.Text = "Modelled TTFT (queue wait + uncached tokens / prefill speed), log scale"
	tp.Y.Label.Text = "ms (modelled)"
	tp.Y.Scale = plot.LogScale{}
	tp.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	for k, pc := range []struct {
		label string
		v     plotter.Values
	}{{"p50", p50}, {"p99", p99}} {
		pts := make(plotter.XYs, len(pc.v))
		for i, y := range pc.v {
			pts[i] = plotter.XY{X: float64(i), Y: max(y, 1)} // log scale: at least 1 ms
		}
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return err
		}
		sc.GlyphStyle.Color = plotutil.Color(k + 1)
		sc.GlyphStyle.Shape = plotutil.Shape(k)
		sc.GlyphStyle.Radius = vg.Points(5)
		tp.Add(sc)
		tp.Legend.Add(pc.label, sc)
	}
	tp.Add(plotter.NewGrid())
	tp.Legend.Top, tp.Legend.Left = true, true
	tp.NominalX(names...)

	return savePanels(path, []*plot.Plot{hp, tp})
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
	width, height := 10*vg.Inch, vg.Length(len(ps))*4*vg.Inch
	img := vgimg.New(width, height)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(ps), Cols: 1, PadX: vg.Millimeter, PadY: 3 * vg.Millimeter,
		PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 2 * vg.Millimeter}
	grid := make([][]*plot.Plot, len(ps))
	for i, p := range ps {
		grid[i] = []*plot.Plot{p}
	}
	canvases := plot.Align(grid, tiles, dc)
	for i, p := range ps {
		p.Draw(canvases[i][0])
	}
	return writePNG(path, img)
}

func writePNG(path string, img *vgimg.Canvas) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench: plot: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("bench: plot %s: %w", path, err)
	}
	return f.Close()
}
