// Package metrics holds the Prometheus metrics of the server (contract §10.1): the
// LookupRoute counters and latency histogram, ingest counts by kind and
// outcome, commit latency, index sizes and Raft state read at scrape time,
// hashicorp/raft's own go-metrics bridged into the same registry, and the
// HTTP side port (/metrics, /healthz, /readyz, opt-in /debug/pprof).
//
// Every recording method is safe on a nil *Metrics (it does nothing), so
// code under test can run without a registry.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// Namespace prefixes every metric name of the project.
const Namespace = "inferencecache"

// Metrics is the server's metric set, registered in its own Registry.
type Metrics struct {
	// Registry holds every metric of the process, including Go runtime and
	// process collectors; serve it with Handler.
	Registry *prometheus.Registry

	lookupCalls   []prometheus.Counter // by ReasonCode value; last = unknown
	lookupLatency prometheus.Histogram
	ingestEvents  *prometheus.CounterVec
	ingestRefused *prometheus.CounterVec
	commitLatency *prometheus.HistogramVec
	rpcPanics     *prometheus.CounterVec
	admitRefused  prometheus.Counter
	raft          *raftMetrics
}

// LookupLatencyBuckets are the upper bounds, in seconds, of the lookup
// latency histogram: 5 µs to ~84 ms in factors of 2.
var LookupLatencyBuckets = prometheus.ExponentialBuckets(5e-6, 2, 15)

// New returns a Metrics with a fresh registry holding the lookup, ingest
// and commit metrics plus the Go runtime and process collectors.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	calls := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "lookup_route_calls_total",
		Help: "LookupRoute calls answered, by reason_code (contract §5.9).",
	}, []string{"reason_code"})
	m := &Metrics{
		Registry: reg,
		lookupLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "lookup_route_duration_seconds",
			Help:    "LookupRoute handler latency in seconds, from request decoded to response built.",
			Buckets: LookupLatencyBuckets,
		}),
		ingestEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "ingest_events_total",
			Help: "Ingest block events and replica stats entries by kind (stored, removed, cleared, stats, unknown) and outcome (accepted, rejected, failed).",
		}, []string{"kind", "outcome"}),
		ingestRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "ingest_requests_refused_total",
			Help: "Write requests refused whole for exceeding a size limit, by request type (events, stats).",
		}, []string{"request"}),
		commitLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "commit_duration_seconds",
			Help:    "Write latency seen by the API, from request to committed and applied (or failed), by operation and outcome.",
			Buckets: prometheus.ExponentialBuckets(100e-6, 2, 16),
		}, []string{"op", "outcome"}),
		rpcPanics: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "rpc_panics_total",
			Help: "Panics recovered in gRPC handlers and answered INTERNAL (contract §9.6), by full method name.",
		}, []string{"method"}),
	}
	m.admitRefused = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Name: "write_admission_refused_total",
		Help: "Writes refused RESOURCE_EXHAUSTED because the node's or the connection's in-flight write bound stayed full (api admission).",
	})
	for v := int32(0); v < int32(len(pb.ReasonCode_name)); v++ {
		m.lookupCalls = append(m.lookupCalls, calls.WithLabelValues(pb.ReasonCode(v).String()))
	}
	m.lookupCalls = append(m.lookupCalls, calls.WithLabelValues("UNKNOWN"))
	reg.MustRegister(calls, m.lookupLatency, m.ingestEvents, m.ingestRefused, m.commitLatency, m.rpcPanics, m.admitRefused)
	m.raft = newRaftMetrics(reg)
	return m
}

// LookupDone counts one LookupRoute answer with reason code value reason
// and observes its latency. It does not allocate.
func (m *Metrics) LookupDone(reason int32, d time.Duration) {
	if m == nil {
		return
	}
	i := int(reason)
	if i < 0 || i >= len(m.lookupCalls)-1 {
		i = len(m.lookupCalls) - 1
	}
	m.lookupCalls[i].Inc()
	m.lookupLatency.Observe(d.Seconds())
}

// LookupCounts returns the LookupRoute answers counted so far by reason
// code name (the lookup_route_calls_total series; "UNKNOWN" for an
// out-of-range code), leaving out zeros. nil on a nil Metrics.
func (m *Metrics) LookupCounts() map[string]uint64 {
	if m == nil {
		return nil
	}
	out := make(map[string]uint64, len(m.lookupCalls))
	for i, c := range m.lookupCalls {
		var d dto.Metric
		if c.Write(&d) != nil || d.GetCounter().GetValue() == 0 {
			continue
		}
		name := "UNKNOWN"
		if i < len(m.lookupCalls)-1 {
			name = pb.ReasonCode(int32(i)).String()
		}
		out[name] = uint64(d.GetCounter().GetValue())
	}
	return out
}

// IngestEvents adds n to the events of kind with outcome ("accepted",
// "rejected" or "failed").
func (m *Metrics) IngestEvents(kind, outcome string, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.ingestEvents.WithLabelValues(kind, outcome).Add(float64(n))
}

// RPCPanic counts a panic recovered in the handler of method (the gRPC
// full method name, e.g. "/inferencecache.v1.InferenceCache/Ingest").
func (m *Metrics) RPCPanic(method string) {
	if m == nil {
		return
	}
	m.rpcPanics.WithLabelValues(method).Inc()
}

// IngestRefused counts a write request refused whole; request is "events"
// or "stats".
func (m *Metrics) IngestRefused(request string) {
	if m == nil {
		return
	}
	m.ingestRefused.WithLabelValues(request).Inc()
}

// AdmissionRefused counts one write refused by admission control.
func (m *Metrics) AdmissionRefused() {
	if m == nil {
		return
	}
	m.admitRefused.Inc()
}

// CommitDone observes one write's latency through the log; op is "ingest",
// "stats" or "policy".
func (m *Metrics) CommitDone(op string, d time.Duration, ok bool) {
	if m == nil {
		return
	}
	outcome := "ok"
	if !ok {
		outcome = "error"
	}
	m.commitLatency.WithLabelValues(op, outcome).Observe(d.Seconds())
}
