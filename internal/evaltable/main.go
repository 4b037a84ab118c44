// Command evaltable turns the --json reports of `inference-cache bench`
// runs into the tables of EVALUATION.md: one table per run (trace, prefill
// speed, gateways) with every strategy's hit rate, fraction of ideal,
// max/mean requests and modelled TTFT p50/p90/p99/mean, then a summary
// of the lookuproute-sdk targets per run, each marked met or missed (with
// several gateways also its p50 against its own one-gateway p50 on the
// same trace and prefill speed).
//
//	go run ./internal/evaltable [-strategy lookuproute-sdk] .eval/*.json
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/inference-cache/inference-cache/bench"
)

// peers are the routers lookuproute-sdk must match or beat.
var peers = []string{bench.StrategyRoundRobin, bench.StrategyLeastLoaded, bench.StrategyDynamo, bench.StrategyDynamoSync,
	bench.StrategyDynamoSyncNATS, bench.StrategyLLMD, bench.StrategySGLang}

// Targets of the load-aware picker against the peers in the same run.
const (
	hitRatioTarget    = 0.97 // token hit rate ≥ this × the best peer's
	oracleP50Target   = 1.2  // TTFT p50 ≤ this × the oracle's
	maxOverMeanTarget = 1.3  // requests per engine, max / mean (or the oracle's when larger)
	gatewaysP50Target = 1.1  // with several gateways, p50 ≤ this × the one-gateway p50
)

// underTest is the strategy whose targets are checked (-strategy).
var underTest = bench.StrategyLookupRouteSDK

func main() {
	flag.StringVar(&underTest, "strategy", bench.StrategyLookupRouteSDK, "the strategy under test: its targets are checked and its rows bold")
	flag.Parse()
	if flag.NArg() < 1 {
		fmt.Fprintln(os.Stderr, "usage: evaltable [-strategy NAME] REPORT.json ...")
		os.Exit(2)
	}
	var reps []bench.JSONReport
	for _, p := range flag.Args() {
		b, err := os.ReadFile(p)
		if err != nil {
			fmt.Fprintln(os.Stderr, "evaltable:", err)
			os.Exit(1)
		}
		var r bench.JSONReport
		if err := json.Unmarshal(b, &r); err != nil {
			fmt.Fprintf(os.Stderr, "evaltable: %s: %v\n", filepath.Base(p), err)
			os.Exit(1)
		}
		reps = append(reps, r)
	}
	if err := write(os.Stdout, reps); err != nil {
		fmt.Fprintln(os.Stderr, "evaltable:", err)
		os.Exit(1)
	}
}

func byName(r *bench.JSONReport) map[string]*bench.JSONStrategy {
	m := map[string]*bench.JSONStrategy{}
	for i := range r.Strategies {
		m[r.Strategies[i].Name] = &r.Strategies[i]
	}
	return m
}

func title(r *bench.JSONReport) string {
	return fmt.Sprintf("%s, prefill %.0f tok/s, %d gateway(s)", r.Trace, r.PrefillTPS, r.Gateways)
}

func write(w io.Writer, reps []bench.JSONReport) error {
	var b strings.Builder
	for i := range reps {
		writeRun(&b, &reps[i])
	}
	fmt.Fprintf(&b, "### Targets of %s\n\n", underTest)
	b.WriteString("| run | p50 ≤ best peer | p99 ≤ best peer | hit ≥ 0.97 × best peer | p50 ≤ 1.2 × oracle | max/mean ≤ max(1.3, oracle's) | p50 ≤ 1.1 × 1 gateway |\n|---|---|---|---|---|---|---|\n")
	met, total := 0, 0
	oneGateway := map[string]float64{} // trace and prefill speed → lookuproute-sdk's one-gateway p50
	for i := range reps {
		r := &reps[i]
		if u := byName(r)[underTest]; u != nil && r.Gateways == 1 {
			oneGateway[fmt.Sprintf("%s/%.0f", r.Trace, r.PrefillTPS)] = u.TTFTModelP50Ms
		}
	}
	for i := range reps {
		r := &reps[i]
		cells := targetCells(r, oneGateway)
		if cells == nil {
			continue
		}
		fmt.Fprintf(&b, "| %s |", title(r))
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

// writeRun writes one run's section: its setup and a row per strategy.
func writeRun(b *strings.Builder, r *bench.JSONReport) {
	fmt.Fprintf(b, "### %s\n\n", title(r))
	fmt.Fprintf(b, "%d requests, %d engines × %d blocks, event delay %.0f ms, ideal token hit rate %.1f %%.\n\n",
		r.Requests, r.Engines, r.CacheBlocks, r.EventDelayMs, 100*r.IdealTokenHitRate)
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

// targetCell is one target of one run: met or not, and the numbers.
type targetCell struct {
	ok   bool
	text string
}

// targetCells returns run r's targets for the strategy under test against
// its best peers and the oracle, and, with several gateways, against its
// one-gateway p50 in oneGateway; nil when r lacks the strategy under test
// or the oracle.
func targetCells(r *bench.JSONReport, oneGateway map[string]float64) []targetCell {
	m := byName(r)
	u, o := m[underTest], m[bench.StrategyOracle]
	if u == nil || o == nil {
		return nil
	}
	var bp50, bp99, bhit float64 = -1, -1, 0
	var n50, n99, nhit string
	for _, p := range peers {
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
	cells := []targetCell{
		{u.TTFTModelP50Ms <= bp50, fmt.Sprintf("%s vs %s (%s)", ms(u.TTFTModelP50Ms), ms(bp50), n50)},
		{u.TTFTModelP99Ms <= bp99, fmt.Sprintf("%s vs %s (%s)", ms(u.TTFTModelP99Ms), ms(bp99), n99)},
		{u.TokenHitRate >= hitRatioTarget*bhit, fmt.Sprintf("%.1f %% vs %.1f %% (%s)", 100*u.TokenHitRate, 100*hitRatioTarget*bhit, nhit)},
		{u.TTFTModelP50Ms <= oracleP50Target*o.TTFTModelP50Ms, fmt.Sprintf("%s vs %s", ms(u.TTFTModelP50Ms), ms(oracleP50Target*o.TTFTModelP50Ms))},
		{u.MaxOverMeanRequests <= max(maxOverMeanTarget, o.MaxOverMeanRequests),
			fmt.Sprintf("%.2f vs %.2f", u.MaxOverMeanRequests, max(maxOverMeanTarget, o.MaxOverMeanRequests))},
	}
	one, ok := oneGateway[fmt.Sprintf("%s/%.0f", r.Trace, r.PrefillTPS)]
	if r.Gateways > 1 && ok {
		cells = append(cells, targetCell{u.TTFTModelP50Ms <= gatewaysP50Target*one, fmt.Sprintf("%s vs %s", ms(u.TTFTModelP50Ms), ms(gatewaysP50Target*one))})
	}
	return cells
}

// ms formats a modelled duration in milliseconds, as seconds from 10 s.
func ms(v float64) string {
	if v >= 10000 {
		return fmt.Sprintf("%.1f s", v/1000)
	}
	return fmt.Sprintf("%.0f ms", v)
}
