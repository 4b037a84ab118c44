package metrics

import (
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	gometrics "github.com/hashicorp/go-metrics/compat"
	gmprom "github.com/hashicorp/go-metrics/compat/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

var bridgeOnce sync.Once

// BridgeRaft routes hashicorp/raft's go-metrics (commit time, FSM apply,
// snapshot create/persist/restore timings, replication, …) into m's
// registry, named inferencecache_raft_*. go-metrics has one global sink per
// process, so only the first call has an effect.
func (m *Metrics) BridgeRaft() error {
	if m == nil {
		return nil
	}
	var err error
	bridgeOnce.Do(func() {
		var sink *gmprom.PrometheusSink
		sink, err = gmprom.NewPrometheusSinkFrom(gmprom.PrometheusOpts{
			Registerer: m.Registry,
			Expiration: 10 * time.Minute,
			Name:       "inferencecache_gometrics_sink",
		})
		if err != nil {
			return
		}
		cfg := gometrics.DefaultConfig(Namespace)
		cfg.EnableHostname = false
		cfg.EnableHostnameLabel = false
		cfg.EnableRuntimeMetrics = false
		cfg.EnableServiceLabel = false
		_, err = gometrics.NewGlobal(cfg, sink)
	})
	return err
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{})
}

// NewMux returns the side-port HTTP handler: /metrics; /healthz (200 while
// the process serves HTTP); /readyz (200 once ready() reports true, 503
// before); and, only when withPprof, /debug/pprof/.
func NewMux(m *Metrics, ready func() bool, withPprof bool) *http.ServeMux {
	mux := http.NewServeMux()
	if m != nil {
		mux.Handle("/metrics", m.Handler())
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ready != nil && !ready() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("not ready\n"))
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	if withPprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}
