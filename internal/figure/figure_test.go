package figure

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

func TestCDF_SharesFloorAndThinning(t *testing.T) {
	got := CDF([]float64{0.2, math.NaN(), 3, 7}, 1, 10)
	// NaN sorts nowhere in particular; the points keep the given order.
	want := plotter.XYs{{X: 1, Y: 0.25}, {X: 1, Y: 0.5}, {X: 3, Y: 0.75}, {X: 7, Y: 1}}
	if len(got) != len(want) {
		t.Fatalf("CDF = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("point %d = %v, want %v", i, got[i], want[i])
		}
	}
	// 10 values, at most 3 points: every 3rd (indices 0, 3, 6, 9): the last is on the step.
	v := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	thin := CDF(v, 0, 3)
	wantThin := plotter.XYs{{X: 1, Y: 0.1}, {X: 4, Y: 0.4}, {X: 7, Y: 0.7}, {X: 10, Y: 1}}
	if len(thin) != len(wantThin) {
		t.Fatalf("thinned CDF = %v, want %v", thin, wantThin)
	}
	for i := range wantThin {
		if thin[i] != wantThin[i] {
			t.Errorf("thinned point %d = %v, want %v", i, thin[i], wantThin[i])
		}
	}
	// 11 values, every 3rd: index 10 is off the step, so it is added.
	if pts := CDF(append(v, 11), 0, 3); pts[len(pts)-1] != (plotter.XY{X: 11, Y: 1}) {
		t.Errorf("last point = %v, want (11, 1)", pts[len(pts)-1])
	}
	if CDF(nil, 1, 10) != nil {
		t.Error("an empty distribution has points")
	}
}

func TestLogBars_TopIsTheHighestValueAboveTheFloor(t *testing.T) {
	p := plot.New()
	top, err := LogBars(p, 2, []Bar{{"p50", []float64{0.5, 40}}, {"p99", []float64{math.Inf(1), 90}}}, 1, vg.Points(5), 0)
	if err != nil || top != 90 {
		t.Fatalf("top = %v, %v; want 90", top, err)
	}
	if _, ok := p.Y.Scale.(plot.LogScale); !ok {
		t.Error("the Y axis is not logarithmic")
	}
}

func TestSavePNG_WritesAPNGAndRefusesOtherNames(t *testing.T) {
	dir := t.TempDir()
	p := plot.New()
	p.Add(plotter.NewGrid())
	path := filepath.Join(dir, "f.png")
	if err := SavePNG(path, 2*vg.Inch, []*plot.Plot{p, p}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || len(b) < 8 || string(b[1:4]) != "PNG" {
		t.Fatalf("%s is not a PNG (%d bytes, %v)", path, len(b), err)
	}
	if err := SavePNG(filepath.Join(dir, "f.svg"), vg.Inch, []*plot.Plot{p}); err == nil || !strings.Contains(err.Error(), "only .png") {
		t.Errorf("an .svg name: err = %v", err)
	}
	if err := SavePNG(path, vg.Inch, nil); err == nil || !strings.Contains(err.Error(), "nothing to plot") {
		t.Errorf("no panels: err = %v", err)
	}
}
