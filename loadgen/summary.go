package loadgen

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/inference-cache/inference-cache/bench"
)

// Quantiles are nearest-rank quantiles and the mean of a set of times, in
// ms (all 0 for an empty set).
type Quantiles struct {
	P50  float64 `json:"p50_ms"`
	P90  float64 `json:"p90_ms"`
	P99  float64 `json:"p99_ms"`
	Mean float64 `json:"mean_ms"`
}

func quantiles(v []float64) Quantiles {
	if len(v) == 0 {
		return Quantiles{}
	}
	var sum float64
	for _, x := range v {
		sum += x
	}
	return Quantiles{P50: bench.Percentile(v, 0.5), P90: bench.Percentile(v, 0.9), P99: bench.Percentile(v, 0.99), Mean: sum / float64(len(v))}
}

// Summary condenses the Results of a replay. Rates are 0…1.
type Summary struct {
	// Requests counts the results summarised; OK those answered in full,
	// Failed the others, by ErrKind in Errors.
	Requests int            `json:"requests"`
	OK       int            `json:"ok"`
	Failed   int            `json:"failed"`
	Errors   map[string]int `json:"errors,omitempty"`
	// TTFT and E2E are over the requests answered in full.
	TTFT Quantiles `json:"ttft"`
	E2E  Quantiles `json:"e2e"`
	// PromptTokens, MatchedTokens and CachedTokens are summed over the
	// requests answered in full: the engines' prompt_tokens, the proxy's
	// x-inference-cache-matched-tokens, the engines' cached_tokens.
	PromptTokens  int64 `json:"prompt_tokens"`
	MatchedTokens int64 `json:"matched_tokens"`
	CachedTokens  int64 `json:"cached_tokens"`
	// HitRate is MatchedTokens / PromptTokens: the share of prompt tokens
	// the proxy's hint said the chosen replica held (0 for strategies
	// that take no hint). CacheHitRate is CachedTokens / PromptTokens:
	// the share the engines really found in their prefix caches.
	HitRate      float64 `json:"hit_rate"`
	CacheHitRate float64 `json:"cache_hit_rate"`
	// Replicas counts requests by the replica header (all results that
	// carry one); MaxOverMean is the busiest replica's count over the
	// mean (1 = even; 0 without headers).
	Replicas    map[string]int `json:"replicas,omitempty"`
	MaxOverMean float64        `json:"max_over_mean_requests"`
	// Reasons counts requests by the reason header.
	Reasons map[string]int `json:"reasons,omitempty"`
	// SpanS is from the first request's start to the last one's end, in
	// seconds; RatePerSec the requests started per second of it.
	SpanS      float64 `json:"span_s"`
	RatePerSec float64 `json:"requests_per_s"`
	// MaxLateMs is the longest any request was sent after its due time
	// (the generator or MaxInFlight falling behind the trace).
	MaxLateMs float64 `json:"max_late_ms"`
}

// Summarize condenses rs.
func Summarize(rs []Result) Summary {
	s := Summary{Requests: len(rs), Errors: map[string]int{}, Replicas: map[string]int{}, Reasons: map[string]int{}}
	var ttft, e2e []float64
	first, last := math.Inf(1), math.Inf(-1)
	for i := range rs {
		r := &rs[i]
		first, last = math.Min(first, r.StartMs), math.Max(last, r.StartMs+r.E2EMs)
		s.MaxLateMs = math.Max(s.MaxLateMs, r.StartMs-r.DueMs)
		if r.Replica != "" {
			s.Replicas[r.Replica]++
		}
		if r.Reason != "" {
			s.Reasons[r.Reason]++
		}
		if r.Failed() {
			s.Failed++
			s.Errors[r.ErrKind]++
			continue
		}
		s.OK++
		ttft, e2e = append(ttft, r.TTFTMs), append(e2e, r.E2EMs)
		s.PromptTokens += int64(r.PromptTokens)
		s.MatchedTokens += int64(min(r.MatchedTokens, r.PromptTokens))
		s.CachedTokens += int64(r.CachedTokens)
	}
	s.TTFT, s.E2E = quantiles(ttft), quantiles(e2e)
	if s.PromptTokens > 0 {
		s.HitRate = float64(s.MatchedTokens) / float64(s.PromptTokens)
		s.CacheHitRate = float64(s.CachedTokens) / float64(s.PromptTokens)
	}
	if len(s.Replicas) > 0 {
		most, total := 0, 0
		for _, n := range s.Replicas {
			most, total = max(most, n), total+n
		}
		s.MaxOverMean = float64(most) * float64(len(s.Replicas)) / float64(total)
	}
	if len(rs) > 0 && last > first {
		s.SpanS = (last - first) / 1000
		s.RatePerSec = float64(len(rs)) / s.SpanS
	}
	return s
}

// WriteText prints s as a few readable lines.
func (s *Summary) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "requests %d in %.1f s (%.1f/s): %d ok, %d failed", s.Requests, s.SpanS, s.RatePerSec, s.OK, s.Failed)
	if s.Failed > 0 {
		fmt.Fprintf(&b, " (%s)", countText(s.Errors))
	}
	fmt.Fprintf(&b, "; latest start %.0f ms behind the trace\n", s.MaxLateMs)
	fmt.Fprintf(&b, "TTFT  p50 %s  p90 %s  p99 %s  mean %s\n", MsText(s.TTFT.P50), MsText(s.TTFT.P90), MsText(s.TTFT.P99), MsText(s.TTFT.Mean))
	fmt.Fprintf(&b, "E2E   p50 %s  p90 %s  p99 %s  mean %s\n", MsText(s.E2E.P50), MsText(s.E2E.P90), MsText(s.E2E.P99), MsText(s.E2E.Mean))
	fmt.Fprintf(&b, "hit rate %.1f %% (proxy's matched tokens / prompt tokens); engines' cached tokens %.1f %% of %d prompt tokens\n",
		100*s.HitRate, 100*s.CacheHitRate, s.PromptTokens)
	if len(s.Replicas) > 0 {
		fmt.Fprintf(&b, "replicas: %s; max/mean %.2f\n", countText(s.Replicas), s.MaxOverMean)
	} else {
		b.WriteString("replicas: no x-inference-cache-replica header (not behind the proxy?)\n")
	}
	if len(s.Reasons) > 0 {
		fmt.Fprintf(&b, "reasons: %s\n", countText(s.Reasons))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// countText is "a 3, b 2" by count, largest first, then by name.
func countText(m map[string]int) string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int {
		if m[a] != m[b] {
			return m[b] - m[a]
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// MsText formats a time of v milliseconds for tables and lines: "123 ms",
// or from 10 s on "12.3 s".
func MsText(v float64) string {
	if v >= 10000 {
		return fmt.Sprintf("%.1f s", v/1000)
	}
	return fmt.Sprintf("%.0f ms", v)
}
