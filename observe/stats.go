package observe

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// Engine metric names read by the stats scraper, the first present of
// each list winning. vLLM renamed the KV usage gauge
// (gpu_cache_usage_perc → kv_cache_usage_perc); its counters appear with
// or without the _total suffix depending on the exposition format. SGLang
// (python/sglang/srt/metrics/collector.py, SchedulerMetricsCollector)
// exports token_usage, the fraction of its KV pool in use, and its queue
// as num_queue_reqs and num_running_reqs, and its prefix-cache hit rate as
// the gauge cache_hit_rate (the scheduler's own recent rate, per rank;
// read when the engine has no hit/query counters).
var (
	usageGauges   = []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"}
	hitCounters   = []string{"vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits"}
	queryCounters = []string{"vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries"}
	waitingGauges = []string{"vllm:num_requests_waiting", "sglang:num_queue_reqs"}
	runningGauges = []string{"vllm:num_requests_running", "sglang:num_running_reqs"}
	hitRateGauges = []string{"sglang:cache_hit_rate"}
)

// maxQueue is the largest queue length reported: the server's
// MaxEngineRequests (api/limits.go), which would reject the whole entry,
// pressure included, over it.
const maxQueue = 1_000_000

// maxMetricsBytes bounds one scrape body (vLLM's /metrics is ~100 KiB).
const maxMetricsBytes = 16 << 20

// rankCounters is the last scrape's cumulative counters of one rank.
type rankCounters struct {
	hits, queries float64
	hitRate       float64
	hasRate       bool
}

// statsState carries counter values between scrapes of one engine, so the
// hit rate is that of the last interval rather than of the whole uptime.
type statsState struct {
	prev map[int64]*rankCounters
}

// parseMetrics parses the Prometheus text format.
func parseMetrics(r io.Reader) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(r)
}

func value(m *dto.Metric) float64 {
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}

// rankOf reads the data-parallel rank: vLLM's "engine" label, SGLang's
// "dp_rank"; absent or not a number: rank 0.
func rankOf(m *dto.Metric) int64 {
	for _, l := range m.GetLabel() {
		if n := l.GetName(); n == "engine" || n == "dp_rank" {
			if r, err := strconv.ParseInt(l.GetValue(), 10, 64); err == nil && r >= 0 {
				return r
			}
		}
	}
	return 0
}

// perRank sums (counters) or maxes (gauge) the first family present among
// names by rank; nil when none is present.
func perRank(fams map[string]*dto.MetricFamily, names []string, gauge bool) map[int64]float64 {
	for _, n := range names {
		f, ok := fams[n]
		if !ok || len(f.GetMetric()) == 0 {
			continue
		}
		out := map[int64]float64{}
		for _, m := range f.GetMetric() {
			r, v := rankOf(m), value(m)
			if old, seen := out[r]; gauge && seen {
				out[r] = max(old, v)
			} else {
				out[r] += v
			}
		}
		return out
	}
	return nil
}

// queue converts a request-count gauge: rounded, clamped to 0..maxQueue
// (NaN is 0).
func queue(v float64) uint32 {
	if !(v > 0) {
		return 0
	}
	return uint32(min(math.Round(v), maxQueue))
}

// statsFromFamilies computes one ReplicaStats per rank from a scrape
// (contract §6.10): pressure = the KV usage gauge (0..1, clamped);
// the configured tenant's hit rate = Δhits / Δqueries since the previous
// scrape (the cumulative ratio on the first scrape or after a counter
// reset; the last rate again when no query arrived meanwhile), or, for an
// engine without those counters, its hit-rate gauge (SGLang's
// cache_hit_rate, clamped to 0..1);
// waiting_requests and running_requests = the queue gauges. Each
// data-parallel rank is its own replica, so every series is read per
// rank; several series of one rank (SGLang exports one per tensor- and
// pipeline-parallel rank, each the same scheduler's view) give their
// maximum, as the usage gauge does. A rank without the usage gauge is not
// reported: absent metrics leave stats unreported rather than claiming
// zero pressure; a rank without a queue gauge reports a queue of 0.
func statsFromFamilies(fams map[string]*dto.MetricFamily, cfg *EngineConfig, st *statsState, nowMs int64) []*pb.ReplicaStats {
	usage := perRank(fams, usageGauges, true)
	if usage == nil {
		return nil
	}
	hits := perRank(fams, hitCounters, false)
	queries := perRank(fams, queryCounters, false)
	waiting := perRank(fams, waitingGauges, true)
	running := perRank(fams, runningGauges, true)
	rates := perRank(fams, hitRateGauges, true)
	if st.prev == nil {
		st.prev = map[int64]*rankCounters{}
	}
	ranks := make([]int64, 0, len(usage))
	for r := range usage {
		ranks = append(ranks, r)
	}
	sort.Slice(ranks, func(i, j int) bool { return ranks[i] < ranks[j] })
	out := make([]*pb.ReplicaStats, 0, len(ranks))
	for _, r := range ranks {
		s := &pb.ReplicaStats{ReplicaId: cfg.ReplicaForRank(r), ModelId: cfg.ModelID, HashSchemes: []string{cfg.HashScheme},
			Pressure: min(max(usage[r], 0), 1), ObservedAtMs: nowMs,
			WaitingRequests: queue(waiting[r]), RunningRequests: queue(running[r])}
		h, hok := hits[r]
		q, qok := queries[r]
		if hok && qok {
			p := st.prev[r]
			if p == nil {
				p = &rankCounters{}
				st.prev[r] = p
			}
			dh, dq := h-p.hits, q-p.queries
			if dh < 0 || dq < 0 || p.queries == 0 && p.hits == 0 {
				dh, dq = h, q // first scrape or the engine restarted
			}
			if dq > 0 {
				p.hitRate, p.hasRate = min(max(dh/dq, 0), 1), true
			}
			p.hits, p.queries = h, q
			if p.hasRate {
				s.TenantHitRate = map[string]float64{cfg.TenantID: p.hitRate}
			}
		} else if v, ok := rates[r]; ok && !math.IsNaN(v) {
			s.TenantHitRate = map[string]float64{cfg.TenantID: min(max(v, 0), 1)}
		}
		out = append(out, s)
	}
	return out
}

// scraper reports one engine's replica stats every interval.
type scraper struct {
	cfg      *EngineConfig
	client   *http.Client
	sink     Sink
	interval time.Duration
	m        *engineMetrics
	log      *slog.Logger
	now      func() time.Time
	st       statsState
	// kick asks for one scrape now (Subscriber.ScrapeNow); the channel
	// sent is closed once its report is answered.
	kick     chan chan struct{}
	doneOnce sync.Once
	done     chan struct{} // closed when run returns
}

// stopped is closed once run has returned.
func (s *scraper) stopped() chan struct{} {
	s.doneOnce.Do(func() { s.done = make(chan struct{}) })
	return s.done
}

func (s *scraper) run(ctx context.Context) {
	defer close(s.stopped())
	t := time.NewTicker(s.interval)
	defer t.Stop()
	s.scrape(ctx)
	for {
		select {
		case <-t.C:
			s.scrape(ctx)
		case done := <-s.kick:
			s.scrape(ctx)
			close(done)
		case <-ctx.Done():
			return
		}
	}
}

func (s *scraper) scrape(ctx context.Context) {
	fams, err := s.fetch(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.m.scrapes.WithLabelValues("error").Inc()
			s.log.Debug("stats scrape failed", "url", s.cfg.MetricsURL, "err", err)
		}
		return
	}
	stats := statsFromFamilies(fams, s.cfg, &s.st, s.now().UnixMilli())
	if len(stats) == 0 {
		s.m.scrapes.WithLabelValues("absent").Inc()
		return
	}
	s.m.scrapes.WithLabelValues("ok").Inc()
	resp, err := s.sink.ReportStats(ctx, &pb.ReportReplicaStatsRequest{Stats: stats})
	if err != nil {
		if ctx.Err() == nil {
			s.m.reports.WithLabelValues("error").Inc()
			s.log.Warn("ReportReplicaStats failed", "err", err)
		}
		return
	}
	if len(resp.GetRejected()) > 0 {
		s.m.reports.WithLabelValues("rejected").Inc()
		s.log.Warn("cluster rejected replica stats", "reason", resp.GetRejected()[0].GetReason())
		return
	}
	s.m.reports.WithLabelValues("ok").Inc()
}

func (s *scraper) fetch(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	rctx, cancel := context.WithTimeout(ctx, max(s.interval, time.Second))
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, s.cfg.MetricsURL, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", s.cfg.MetricsURL, resp.Status)
	}
	return parseMetrics(io.LimitReader(resp.Body, maxMetricsBytes))
}
