package simengine

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Histogram buckets of vLLM's PrometheusStatLogger
// (vllm/v1/metrics/loggers.py).
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
		0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	tpotBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
		1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	latencyBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
		40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

// Cancellation stages (the stage label of CancelledMetric).
const (
	StageWaiting = "waiting"
	StagePrefill = "prefill"
	StageDecode  = "decode"
)

// Metric names an operator or a test reads off /metrics besides vLLM's.
const (
	// CancelledMetric counts requests stopped because their client went
	// away, by stage (waiting, prefill, decode). Not a vLLM metric.
	CancelledMetric = "simengine_requests_cancelled_total"
	// EventErrorsMetric counts KV-event batches the publisher failed to
	// send. Not a vLLM metric.
	EventErrorsMetric = "simengine_kv_event_publish_errors_total"
)

// metrics are the engine's Prometheus series, named and labelled as
// vLLM's V1 engine exports them (model_name, engine = the data-parallel
// rank, 0), with client_golang's counter names carrying the _total suffix
// Python's client adds.
type metrics struct {
	running, waiting, kvUsage     prometheus.Gauge
	queries, hits                 prometheus.Counter
	promptTokens, generatedTokens prometheus.Counter
	success                       *prometheus.CounterVec
	ttft, tpot, e2e               prometheus.Observer
	queueTime, prefillTime        prometheus.Observer
	decodeTime                    prometheus.Observer
	cancelled                     *prometheus.CounterVec
	eventErrors                   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, model string, blockSize, kvBlocks int) *metrics {
	lbl := prometheus.Labels{"model_name": model, "engine": "0"}
	gauge := func(name, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: lbl})
		reg.MustRegister(g)
		return g
	}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: lbl})
		reg.MustRegister(c)
		return c
	}
	hist := func(name, help string, buckets []float64) prometheus.Observer {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets, ConstLabels: lbl})
		reg.MustRegister(h)
		return h
	}
	m := &metrics{
		running:         gauge("vllm:num_requests_running", "Number of requests in model execution batches."),
		waiting:         gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed."),
		kvUsage:         gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."),
		queries:         counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens."),
		hits:            counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens."),
		promptTokens:    counter("vllm:prompt_tokens_total", "Number of prefill tokens processed."),
		generatedTokens: counter("vllm:generation_tokens_total", "Number of generation tokens processed."),
		ttft:            hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttftBuckets),
		tpot:            hist("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.", tpotBuckets),
		e2e:             hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", latencyBuckets),
		queueTime:       hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", latencyBuckets),
		prefillTime:     hist("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", latencyBuckets),
		decodeTime:      hist("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", latencyBuckets),
		eventErrors:     counter(EventErrorsMetric, "KV-event batches the sim engine failed to publish."),
	}
	m.success = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vllm:request_success_total", Help: "Count of successfully processed requests.", ConstLabels: lbl}, []string{"finished_reason"})
	m.cancelled = prometheus.NewCounterVec(prometheus.CounterOpts{Name: CancelledMetric, Help: "Requests stopped because their client went away, by the stage they were in.", ConstLabels: lbl}, []string{"stage"})
	reg.MustRegister(m.success, m.cancelled)
	for _, s := range []string{StageWaiting, StagePrefill, StageDecode} {
		m.cancelled.WithLabelValues(s) // present at 0, so a scrape sees the series before the first cancellation
	}
	info := prometheus.NewGauge(prometheus.GaugeOpts{Name: "vllm:cache_config_info", Help: "Information of the LLMEngine CacheConfig",
		ConstLabels: prometheus.Labels{"engine": "0", "block_size": strconv.Itoa(blockSize), "num_gpu_blocks": strconv.Itoa(kvBlocks), "enable_prefix_caching": "True"}})
	info.Set(1)
	reg.MustRegister(info)
	return m
}
