package loadgen

import (
	"strings"
	"testing"
)

// Two summaries print as two columns under their names, then the first's
// cache hit rate and TTFT p50 over the second's (19 % / 6.9 % = 2.75×,
// 1423 / 6157 ms = 0.23×); a zero denominator prints "-".
func TestWriteComparison(t *testing.T) {
	a := Summary{OK: 600, TTFT: Quantiles{P50: 1423, P99: 8260}, E2E: Quantiles{P50: 2160, P99: 9000},
		CacheHitRate: 0.19, HitRate: 0.16, MaxOverMean: 1.07, Reasons: map[string]int{"PREFIX_MATCH": 143, "LOAD": 323}}
	b := Summary{OK: 599, Failed: 1, TTFT: Quantiles{P50: 6157, P99: 21600}, E2E: Quantiles{P50: 6838, P99: 22000},
		CacheHitRate: 0.069, MaxOverMean: 1.02, Reasons: map[string]int{"ROUND_ROBIN": 600}}
	var out strings.Builder
	if err := WriteComparison(&out, [2]string{"picker", "round-robin"}, [2]Summary{a, b}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"picker", "round-robin",
		"requests ok / failed    600 / 0",
		"TTFT p50 / p99          1423 ms / 8260 ms",
		"engines' cached tokens  19.0 %",
		"6.9 %",
		"picks                   LOAD 323, PREFIX_MATCH 143",
		"ROUND_ROBIN 600",
		"first against second: engines' cached tokens 2.75×, TTFT p50 0.23×",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in\n%s", want, out.String())
		}
	}
	out.Reset()
	_ = WriteComparison(&out, [2]string{"a", "b"}, [2]Summary{a, {}})
	if !strings.Contains(out.String(), "engines' cached tokens -, TTFT p50 -") {
		t.Errorf("zero denominators:\n%s", out.String())
	}
}
