// Package evaltargets owns the evaluation's tables and the targets a
// strategy under test must meet against its peers in the same bench run
// (EVALUATION.md): it renders the --json reports of `inference-cache
// bench` as one table per run (trace, prefill speed, gateways) with every
// strategy's hit rate, fraction of ideal, max/mean requests and modelled
// TTFT p50/p90/p99/mean, then a summary of the strategy's targets per run,
// each marked met or missed (with several gateways also its p50 against
// its own one-gateway p50 on the same trace and prefill speed).
//
// internal/evaltable is its command; internal/docfacts calls it in process
// to generate the documents' figures, so both read the same rules.
package evaltargets

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/inference-cache/inference-cache/bench"
)

// Peers are the routers the strategy under test must match or beat, in
// the order their names are tried (the first best wins a tie).
var Peers = []string{bench.StrategyRoundRobin, bench.StrategyLeastLoaded, bench.StrategyDynamo, bench.StrategyDynamoSync,
	bench.StrategyDynamoSyncNATS, bench.StrategyLLMD, bench.StrategySGLang}

// Targets of the strategy under test against the peers in the same run.
const (
	HitRatioTarget    = 0.97 // token hit rate ≥ this × the best peer's
	OracleP50Target   = 1.2  // TTFT p50 ≤ this × the oracle's
	MaxOverMeanTarget = 1.3  // requests per engine, max / mean (or the oracle's when larger)
	GatewaysP50Target = 1.1  // with several gateways, p50 ≤ this × the one-gateway p50
)

// ReadReports decodes the --json reports at paths, in that order. An
// error names the file that could not be read or decoded.
func ReadReports(paths []string) ([]bench.JSONReport, error) {
	reps := make([]bench.JSONReport, 0, len(paths))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var r bench.JSONReport
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Base(p), err)
		}
		reps = append(reps, r)
	}
	return reps, nil
}

// Title is a run's heading and the first cell of its targets row:
// "TRACE, prefill TPS tok/s, N gateway(s)".
func Title(r *bench.JSONReport) string {
	return fmt.Sprintf("%s, prefill %.0f tok/s, %d gateway(s)", r.Trace, r.PrefillTPS, r.Gateways)
}

// Write renders reps as Markdown to w: a "### TITLE" section per report
// with its strategies table (underTest's row bold), then a "### Targets
// of UNDERTEST" section with one row per report where underTest and the
// oracle both ran, each cell "met: …" or "missed: …" with the figure and
// its bound ("–" for the gateways cell of a one-gateway run), and last
// the line "N of M targets met.". The only error is w's.
func Write(w io.Writer, reps []bench.JSONReport, underTest string) error {
	var b strings.Builder
	for i := range reps {
		writeRun(&b, &reps[i], underTest)
	}
	fmt.Fprintf(&b, "### Targets of %s\n\n", underTest)
	b.WriteString("| run | p50 ≤ best peer | p99 ≤ best peer | hit ≥ 0.97 × best peer | p50 ≤ 1.2 × oracle | max/mean ≤ max(1.3, oracle's) | p50 ≤ 1.1 × 1 gateway |\n|---|---|---|---|---|---|---|\n")
	met, total := 0, 0
	oneGateway := map[string]float64{} // trace and prefill speed → underTest's one-gateway p50
	for i := range reps {
		r := &reps[i]
		if u := byName(r)[underTest]; u != nil && r.Gateways == 1 {
			oneGateway[runKey(r)] = u.TTFTModelP50Ms
		}
	}
	for i := range reps {
		r := &reps[i]
		m := byName(r)
		u, o := m[underTest], m[bench.StrategyOracle]
		if u == nil || o == nil {
			continue
		}
		cells := targetCells(m, u, o)
		if one, ok := oneGateway[runKey(r)]; r.Gateways > 1 && ok {
			cells = append(cells, cell{u.TTFTModelP50Ms <= GatewaysP50Target*one, fmt.Sprintf("%s vs %s", ms(u.TTFTModelP50Ms), ms(GatewaysP50Target*one))})
		}
		fmt.Fprintf(&b, "| %s |", Title(r))
		for _, c := range cells {
			total++
			mark := "missed"
			if c.ok {
				met++
				mark = "met"
			}
			fmt.Fprintf(&b, " %s: %s |", mark, c.text)
		}
		if len(cells) == 5 {
			b.WriteString(" – |")
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "\n%d of %d targets met.\n", met, total)
	_, err := io.WriteString(w, b.String())
	return err
}

// writeRun writes one report's section: its figures and strategies table.
func writeRun(b *strings.Builder, r *bench.JSONReport, underTest string) {
	fmt.Fprintf(b, "### %s\n\n", Title(r))
	fmt.Fprintf(b, "%d requests, %d engines × %d blocks, event delay %.0f ms, ideal token hit rate %.1f %%.",
		r.Requests, r.Engines, r.CacheBlocks, r.EventDelayMs, 100*r.IdealTokenHitRate)
	if r.Runs > 1 {
		fmt.Fprintf(b, " Each figure is the median of %d runs (seeds in the report's per_run)", r.Runs)
		for _, s := range r.Strategies {
			if s.Name != underTest || len(s.PerRun) == 0 {
				continue
			}
			p50s := make([]string, len(s.PerRun))
			for i, x := range s.PerRun {
				p50s[i] = ms(x.TTFTModelP50Ms)
			}
			fmt.Fprintf(b, "; %s's TTFT p50 run by run: %s", underTest, strings.Join(p50s, ", "))
		}
		b.WriteString(".")
	}
	b.WriteString("\n\n")
	b.WriteString("| strategy | hit rate | of ideal | req max/mean | TTFT p50 | TTFT p90 | TTFT p99 | TTFT mean |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range r.Strategies {
		name := s.Name
		if name == underTest {
			name = "**" + name + "**"
		}
		fmt.Fprintf(b, "| %s | %.1f %% | %.1f %% | %.2f | %s | %s | %s | %s |\n", name, 100*s.TokenHitRate, 100*s.FractionOfIdeal,
			s.MaxOverMeanRequests, ms(s.TTFTModelP50Ms), ms(s.TTFTModelP90Ms), ms(s.TTFTModelP99Ms), ms(s.TTFTModelMeanMs))
	}
	b.WriteString("\n")
}

// cell is one target's verdict and the text that shows its figures.
type cell struct {
	ok   bool
	text string
}

// targetCells checks u against the best peer of m and the oracle o: p50,
// p99, hit rate, p50 against the oracle's, and max/mean requests.
func targetCells(m map[string]*bench.JSONStrategy, u, o *bench.JSONStrategy) []cell {
	var bp50, bp99, bhit float64 = -1, -1, 0
	var n50, n99, nhit string
	for _, p := range Peers {
		s := m[p]
		if s == nil {
			continue
		}
		if bp50 < 0 || s.TTFTModelP50Ms < bp50 {
			bp50, n50 = s.TTFTModelP50Ms, p
		}
		if bp99 < 0 || s.TTFTModelP99Ms < bp99 {
			bp99, n99 = s.TTFTModelP99Ms, p
		}
		if s.TokenHitRate > bhit {
			bhit, nhit = s.TokenHitRate, p
		}
	}
	maxMean := max(MaxOverMeanTarget, o.MaxOverMeanRequests)
	hit := pcts(u.TokenHitRate, HitRatioTarget*bhit)
	return []cell{
		{u.TTFTModelP50Ms <= bp50, fmt.Sprintf("%s vs %s (%s)", ms(u.TTFTModelP50Ms), ms(bp50), n50)},
		{u.TTFTModelP99Ms <= bp99, fmt.Sprintf("%s vs %s (%s)", ms(u.TTFTModelP99Ms), ms(bp99), n99)},
		{u.TokenHitRate >= HitRatioTarget*bhit, fmt.Sprintf("%s vs %s (%s)", hit[0], hit[1], nhit)},
		{u.TTFTModelP50Ms <= OracleP50Target*o.TTFTModelP50Ms, fmt.Sprintf("%s vs %s", ms(u.TTFTModelP50Ms), ms(OracleP50Target*o.TTFTModelP50Ms))},
		{u.MaxOverMeanRequests <= maxMean, fmt.Sprintf("%.2f vs %.2f", u.MaxOverMeanRequests, maxMean)},
	}
}

// pcts renders fractions a and b as percentages with one decimal, or
// two when one decimal would print them alike (a figure and a bound it
// misses by less than 0.05 points would read as equal).
func pcts(a, b float64) [2]string {
	x, y := fmt.Sprintf("%.1f %%", 100*a), fmt.Sprintf("%.1f %%", 100*b)
	if x == y && a != b {
		x, y = fmt.Sprintf("%.2f %%", 100*a), fmt.Sprintf("%.2f %%", 100*b)
	}
	return [2]string{x, y}
}

func byName(r *bench.JSONReport) map[string]*bench.JSONStrategy {
	m := map[string]*bench.JSONStrategy{}
	for i := range r.Strategies {
		m[r.Strategies[i].Name] = &r.Strategies[i]
	}
	return m
}

// runKey is a run's trace and prefill speed: the runs that differ only in
// their number of gateways share it.
func runKey(r *bench.JSONReport) string {
	return fmt.Sprintf("%s/%.0f", r.Trace, r.PrefillTPS)
}

// ms formats a modelled duration in milliseconds, as seconds from 10 s.
func ms(v float64) string {
	if v >= 10000 {
		return fmt.Sprintf("%.1f s", v/1000)
	}
	return fmt.Sprintf("%.0f ms", v)
}
