package proxy

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the proxy's Prometheus metrics (prefix
// inference_cache_proxy_):
//
//   - requests_total{endpoint, code}: requests answered, by endpoint path
//     and HTTP status (the backend's, or the proxy's own for input it
//     refused and backends it could not reach);
//   - picks_total{reason}: decisions by reason (PREFIX_MATCH,
//     AFFINITY_HINT, TENANT_HOT, LOAD, ROUND_ROBIN, LEAST_LOADED);
//   - fail_open_picks_total: decisions made without a hint because no
//     cluster node answered within the lookup budget;
//   - lookup_refused_total{code}: of those, lookups the cluster refused
//     for their token (Unauthenticated, PermissionDenied), logged at
//     ERROR once a minute (gateway.RefusedLog): no retry fixes them;
//   - no_key_picks_total: decisions without a key (multimodal content, a
//     prompt the template refused, a model without a tokenizer);
//   - added_latency_seconds: the proxy's own time before forwarding
//     (reading and decoding the body, render, tokenize, fingerprint,
//     lookup, pick), a histogram;
//   - lookup_seconds: the lookups alone, a histogram;
//   - time_to_first_token_seconds: from the request's arrival to its first
//     generated token (the first content chunk of a stream, the response
//     of a non-streamed request) forwarded to the client, a histogram;
//   - upstream_errors_total{replica, kind}: failed forwards by kind:
//     refused (connection refused or another dial failure),
//     unavailable (503), first_byte (no stream headers within the
//     first-byte timeout), timeout (the per-request timeout), idle (the
//     stream idle timeout), broken (the connection failed after the
//     response started), other;
//   - retries_total{cause}: requests sent again to the next-best backend
//     (cause refused, unavailable or first_byte);
//   - prompt_tokens_total and matched_tokens_total: the keyed prompts'
//     tokens, and those the picked replica's hint matched: their ratio is
//     the routed hit rate;
//   - requests_in_flight: requests being served;
//   - broken_responses_total{cause}: answers that broke after their
//     headers were sent (cause broken: the backend's connection failed;
//     timeout: the request timeout; idle: the stream idle timeout), each
//     ended with an error event (streams) and aborted;
//   - shed_requests_total: requests refused with 429 because their body
//     did not fit in the bytes in flight;
//   - body_timeouts_total: requests refused with 408 because their body
//     did not arrive within the body timeouts;
//   - backend_up{replica}: 1 while a backend is a candidate.
type Metrics struct {
	Requests       *prometheus.CounterVec
	Picks          *prometheus.CounterVec
	LookupRefused  *prometheus.CounterVec
	FailOpen       prometheus.Counter
	NoKey          prometheus.Counter
	AddedLatency   prometheus.Histogram
	Lookup         prometheus.Histogram
	TTFT           prometheus.Histogram
	UpstreamErrors *prometheus.CounterVec
	Retries        *prometheus.CounterVec
	PromptTokens   prometheus.Counter
	MatchedTokens  prometheus.Counter
	InFlight       prometheus.Gauge
	// Disagg is disagg_requests_total{path, cause} (disagg.go).
	Disagg       *prometheus.CounterVec
	Broken       *prometheus.CounterVec
	Shed         prometheus.Counter
	BodyTimeouts prometheus.Counter
}

// NewMetrics registers the metrics (and a collector of backend_up for
// pool) with reg.
func NewMetrics(reg prometheus.Registerer, pool *Pool) *Metrics {
	const ns, sub = "inference_cache", "proxy"
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "requests_total",
			Help: "Requests answered, by endpoint and HTTP status."}, []string{"endpoint", "code"}),
		Picks: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "picks_total",
			Help: "Routing decisions by reason."}, []string{"reason"}),
		FailOpen: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "fail_open_picks_total",
			Help: "Decisions made without a hint because no cluster node answered within the lookup budget."}),
		LookupRefused: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "lookup_refused_total",
			Help: "Lookups the cluster refused for their token, by gRPC code (Unauthenticated: none or an unknown one; PermissionDenied: a lesser class); each is a fail-open decision too, but no retry fixes it."}, []string{"code"}),
		NoKey: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "no_key_picks_total",
			Help: "Decisions for requests without a key (multimodal, refused by the template, no tokenizer)."}),
		AddedLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "added_latency_seconds",
			Help:    "The proxy's own time before forwarding a request: body, render, tokenize, fingerprint, lookup, pick.",
			Buckets: []float64{.0001, .00025, .0005, .001, .002, .005, .01, .02, .05, .1, .25, 1}}),
		Lookup: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "lookup_seconds",
			Help:    "LookupRoute calls made for routing decisions.",
			Buckets: []float64{.0001, .00025, .0005, .001, .002, .005, .01, .02, .05}}),
		TTFT: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "time_to_first_token_seconds",
			Help:    "From a request's arrival to its first generated token forwarded to the client.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}}),
		UpstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "upstream_errors_total",
			Help: "Failed forwards to backends by replica and kind (refused, unavailable, first_byte, timeout, idle, broken, other)."}, []string{"replica", "kind"}),
		Retries: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "retries_total",
			Help: "Requests sent again to the next-best backend, by cause (refused, unavailable, first_byte)."}, []string{"cause"}),
		PromptTokens: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "prompt_tokens_total",
			Help: "Prompt tokens of the keyed requests routed."}),
		MatchedTokens: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "matched_tokens_total",
			Help: "Prompt tokens the picked replica's hint said it holds (PREFIX_MATCH)."}),
		InFlight: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "requests_in_flight",
			Help: "Requests being served."}),
		Broken: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "broken_responses_total",
			Help: "Answers that broke after their headers were sent, by cause (broken, timeout, idle)."}, []string{"cause"}),
		Shed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "shed_requests_total",
			Help: "Requests refused with 429: their body did not fit in the bytes in flight."}),
		BodyTimeouts: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "body_timeouts_total",
			Help: "Requests refused with 408: their body did not arrive within the body timeouts."}),
	}
	m.Disagg = newDisaggMetrics(reg)
	reg.MustRegister(m.Requests, m.Picks, m.FailOpen, m.LookupRefused, m.NoKey, m.AddedLatency, m.Lookup, m.TTFT, m.UpstreamErrors,
		m.Retries, m.PromptTokens, m.MatchedTokens, m.InFlight, m.Broken, m.Shed, m.BodyTimeouts)
	if pool != nil {
		reg.MustRegister(upCollector{pool: pool, desc: prometheus.NewDesc(ns+"_"+sub+"_backend_up",
			"1 while the backend is a candidate (its health check passes), else 0.", []string{"replica"}, nil)})
	}
	return m
}

// upCollector exports backend_up from the pool's current list.
type upCollector struct {
	pool *Pool
	desc *prometheus.Desc
}

func (c upCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c upCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.pool.Status() {
		v := 0.0
		if s.Healthy {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v, s.ReplicaID)
	}
}
