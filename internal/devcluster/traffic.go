package devcluster

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/inference-cache/inference-cache/bench"
	"github.com/inference-cache/inference-cache/internal/localfleet"
	"github.com/inference-cache/inference-cache/internal/promscrape"
	"github.com/inference-cache/inference-cache/loadgen"
)

// trafficRate is the demo traffic's arrival rate of new chat sessions
// and single requests (the built-in generator's RatePerSec): about 2
// requests per second with the sessions' later turns, light enough for
// a laptop or 2 shared cores.
const trafficRate = 1

// trafficChunk is how many requests one generated trace holds; the
// next chunk follows with hash ids of its own.
const trafficChunk = 2000

// runTraffic replays the built-in generator's multi-turn chat sessions
// (bench.Generate) through the proxy at proxyURL until ctx ends, as
// streaming chat requests of at most 16 tokens, and calls line with a
// status line every every.
func runTraffic(ctx context.Context, proxyURL string, every time.Duration, line func(string)) {
	var mu sync.Mutex
	var total, failed int
	var recent []loadgen.Result
	client := loadgen.NewHTTPClient(256)
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			mu.Lock()
			s := loadgen.Summarize(recent)
			n, f := total, failed
			recent = recent[:0]
			mu.Unlock()
			l := fmt.Sprintf("demo traffic (generated chat sessions through the proxy, ~2/s): %d requests, %d failed", n, f)
			if s.OK > 0 {
				l += fmt.Sprintf("; last %v: TTFT p50 %s, engines' cached tokens %.0f %%", every, loadgen.MsText(s.TTFT.P50), 100*s.CacheHitRate)
			}
			line(l)
		}
	}()
	for chunk := uint64(0); ctx.Err() == nil; chunk++ {
		tr := bench.Generate(bench.GeneratorConfig{Seed: 1 + chunk, Requests: trafficChunk, RatePerSec: trafficRate})
		for i := range tr.Requests {
			ids := tr.Requests[i].HashIDs
			for j := range ids {
				ids[j] += chunk << 40 // a chunk's sessions share nothing with the last one's
			}
		}
		_, err := loadgen.Replay(ctx, tr.Requests, loadgen.Config{Target: proxyURL, Model: localfleet.Model, MaxTokens: 16, Client: client,
			OnResult: func(r loadgen.Result) {
				if ctx.Err() != nil {
					return
				}
				mu.Lock()
				total++
				if r.Failed() {
					failed++
				}
				recent = append(recent, r)
				mu.Unlock()
			}})
		if err != nil {
			line("demo traffic stopped: " + err.Error())
			return
		}
	}
}

// proxySample is one scrape of the proxy's and the engines' counters.
type proxySample struct {
	at                    time.Time
	requests              float64
	picks                 map[string]float64
	prompt, matched       float64
	engineHits, engineQry float64
}

// proxyLine scrapes the proxy's /metrics (and the engines') each
// interval and keeps the live view's proxy line: requests per second,
// picks by reason, the routed hit rate (matched over prompt tokens) and
// the engines' prefix-cache hit rate, over the last window.
type proxyLine struct {
	proxyURL string
	engines  []string // base URLs
	window   time.Duration
	samples  []proxySample
}

func (p *proxyLine) scrape(ctx context.Context) (proxySample, error) {
	s := proxySample{at: time.Now()}
	fams, err := promscrape.Get(ctx, p.proxyURL+"/metrics")
	if err != nil {
		return s, err
	}
	s.requests = promscrape.Sum(fams, "inference_cache_proxy_requests_total")
	s.picks = promscrape.ByLabel(fams, "inference_cache_proxy_picks_total", "reason")
	s.prompt = promscrape.Sum(fams, "inference_cache_proxy_prompt_tokens_total")
	s.matched = promscrape.Sum(fams, "inference_cache_proxy_matched_tokens_total")
	for _, e := range p.engines {
		if ef, err := promscrape.Get(ctx, e+"/metrics"); err == nil {
			s.engineHits += promscrape.Sum(ef, "vllm:prefix_cache_hits_total")
			s.engineQry += promscrape.Sum(ef, "vllm:prefix_cache_queries_total")
		}
	}
	return s, nil
}

// update takes a new sample and returns the line.
func (p *proxyLine) update(s proxySample) string {
	if n := len(p.samples); n > 0 && s.requests < p.samples[n-1].requests {
		p.samples = p.samples[:0] // the proxy restarted: its counters began again
	}
	p.samples = append(p.samples, s)
	for len(p.samples) > 2 && s.at.Sub(p.samples[1].at) >= p.window {
		p.samples = p.samples[1:]
	}
	a := p.samples[0]
	dt := s.at.Sub(a.at).Seconds()
	var b strings.Builder
	fmt.Fprintf(&b, "proxy %s:", p.proxyURL)
	if dt <= 0 {
		b.WriteString(" measuring")
		return b.String()
	}
	fmt.Fprintf(&b, " %.1f requests/s", (s.requests-a.requests)/dt)
	picks := map[string]float64{}
	var n float64
	for r, v := range s.picks {
		if d := v - a.picks[r]; d > 0 {
			picks[r], n = d, n+d
		}
	}
	if n > 0 {
		rs := slices.Collect(maps.Keys(picks))
		slices.SortFunc(rs, func(x, y string) int {
			if picks[x] != picks[y] {
				if picks[x] > picks[y] {
					return -1
				}
				return 1
			}
			return strings.Compare(x, y)
		})
		parts := make([]string, len(rs))
		for i, r := range rs {
			parts[i] = fmt.Sprintf("%s %.0f%%", r, 100*picks[r]/n)
		}
		fmt.Fprintf(&b, ", picks %s", strings.Join(parts, " "))
	}
	if dp := s.prompt - a.prompt; dp > 0 {
		fmt.Fprintf(&b, ", routed hit rate %.0f%%", 100*(s.matched-a.matched)/dp)
	}
	if dq := s.engineQry - a.engineQry; dq > 0 {
		fmt.Fprintf(&b, ", engines' cache hits %.0f%%", 100*(s.engineHits-a.engineHits)/dq)
	}
	fmt.Fprintf(&b, " (last %.0f s)", dt)
	return b.String()
}

// run scrapes every interval until ctx ends, passing each line to set.
func (p *proxyLine) run(ctx context.Context, every time.Duration, set func(string)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		s, err := p.scrape(ctx)
		if err != nil {
			set(fmt.Sprintf("proxy %s: not answering (%v)", p.proxyURL, err))
		} else {
			set(p.update(s))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
