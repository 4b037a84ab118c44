package epp

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the picker's Prometheus metrics (contract §14.6). Where
// they measure what the reference EPP measures they carry its names and
// labels (kubernetes-sigs/gateway-api-inference-extension v1.5.0,
// pkg/epp/metrics/metrics.go):
//
//   - inference_extension_scheduler_attempts_total{status, target_model_name,
//     pod_name, namespace, port}: picks ("success", with the picked
//     endpoint's replica id as pod_name and its port) and requests answered
//     503 ("failure", the endpoint labels empty); target_model_name is the
//     request's model for the first 64 distinct models, "other" after
//     them (a client's string must not grow the series without bound);
//   - inference_extension_scheduler_e2e_duration_seconds: the time of one
//     pick (decode, render, tokenize, fingerprint, lookup, pick), a
//     histogram with the reference's buckets;
//   - inference_pool_ready_pods{name}: the endpoints of the pool.
//
// Ours (prefix inference_cache_picker_):
//
//   - picks_total{reason}: picks by reason (PREFIX_MATCH, AFFINITY_HINT,
//     TENANT_HOT, LOAD, ROUND_ROBIN, LEAST_LOADED);
//   - fail_open_picks_total: picks made without a hint because no cluster
//     node answered within the lookup budget;
//   - lookup_refused_total{code}: of those, lookups the cluster refused
//     for their token (Unauthenticated, PermissionDenied), logged at
//     ERROR once a minute (gateway.RefusedLog): no retry fixes them;
//   - no_key_picks_total: picks of requests without a key (no body, not an
//     OpenAI completion, multimodal, no tokenizer for the model);
//   - unavailable_total{cause}: requests the picker answered itself
//     (empty_subset, no_eligible_endpoint: 503; unknown_model: 404;
//     body_too_large: 413; over_capacity: 429; stream_idle: the stream
//     ended idle);
//   - served_elsewhere_total: responses the data plane reports served by an
//     endpoint other than the pick (a retry down the fallbacks);
//   - lookup_seconds: the lookups alone, a histogram;
//   - streams_in_flight: ext_proc streams open.
type Metrics struct {
	// Attempts' target_model_name is models.label's: at most 64 distinct
	// names, then "other".
	Attempts        *prometheus.CounterVec
	models          modelLabels
	PickLatency     prometheus.Histogram
	Picks           *prometheus.CounterVec
	LookupRefused   *prometheus.CounterVec
	FailOpen        prometheus.Counter
	NoKey           prometheus.Counter
	Unavailable     *prometheus.CounterVec
	ServedElsewhere prometheus.Counter
	Lookup          prometheus.Histogram
	Streams         prometheus.Gauge
}

// Scheduler attempt statuses, as the reference EPP's.
const (
	statusSuccess = "success"
	statusFailure = "failure"
)

// NewMetrics registers the metrics with reg, and inference_pool_ready_pods
// of pool (its name) read from t when t is not nil.
func NewMetrics(reg prometheus.Registerer, pool string, t *Table) *Metrics {
	const ns, sub = "inference_cache", "picker"
	m := &Metrics{
		Attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: "inference_extension", Name: "scheduler_attempts_total",
			Help: "Total number of scheduling attempts."}, []string{"status", "target_model_name", "pod_name", "namespace", "port"}),
		PickLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Subsystem: "inference_extension", Name: "scheduler_e2e_duration_seconds",
			Help:    "End-to-end scheduling latency distribution in seconds.",
			Buckets: []float64{0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1}}),
		Picks: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "picks_total",
			Help: "Picks by reason."}, []string{"reason"}),
		FailOpen: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "fail_open_picks_total",
			Help: "Picks made without a hint because no cluster node answered within the lookup budget."}),
		LookupRefused: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "lookup_refused_total",
			Help: "Lookups the cluster refused for their token, by gRPC code (Unauthenticated: none or an unknown one; PermissionDenied: a lesser class); each is a fail-open decision too, but no retry fixes it."}, []string{"code"}),
		NoKey: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "no_key_picks_total",
			Help: "Picks of requests without a key (no body, not an OpenAI completion, multimodal, no tokenizer)."}),
		Unavailable: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "unavailable_total",
			Help: "Requests answered by the picker itself, by cause (empty_subset, no_eligible_endpoint: 503; unknown_model: 404; body_too_large: 413; over_capacity: 429; stream_idle: the stream ended idle)."}, []string{"cause"}),
		ServedElsewhere: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "served_elsewhere_total",
			Help: "Responses the data plane reports served by an endpoint other than the pick."}),
		Lookup: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "lookup_seconds",
			Help:    "LookupRoute calls made for picks.",
			Buckets: []float64{.0001, .00025, .0005, .001, .002, .005, .01, .02, .05}}),
		Streams: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "streams_in_flight",
			Help: "ext_proc streams open."}),
	}
	reg.MustRegister(m.Attempts, m.PickLatency, m.Picks, m.FailOpen, m.LookupRefused, m.NoKey, m.Unavailable, m.ServedElsewhere, m.Lookup, m.Streams)
	if t != nil {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Subsystem: "inference_pool", Name: "ready_pods",
			Help: "The number of ready pods in the inference server pool.", ConstLabels: prometheus.Labels{"name": pool}},
			func() float64 { return float64(t.Len()) }))
	}
	return m
}
