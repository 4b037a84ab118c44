package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/inference-cache/inference-cache/gateway"
	"github.com/inference-cache/inference-cache/openai"
)

// LoRA adapters. vLLM lists each adapter it serves in /v1/models as a
// card of its own whose parent is the base model
// (vllm/entrypoints/openai/serving_models.py at 075e9ba8,
// show_available_models), and reports which adapters run and wait, and
// its max_lora, in vllm:lora_requests_info (vllm/v1/metrics/loggers.py at
// 005a810b: a gauge set to the current time on each step, one series per
// label combination, the adapter lists comma-joined). The pool reads the
// cards with the health checks and, for a backend listing adapters,
// scrapes the metric at every check; an adapter's request is decided on
// the base model's key and partition, among the backends listing the
// adapter, with their residency (gateway's adapters.go).

// loraMetric is vLLM's adapter metric.
const loraMetric = "vllm:lora_requests_info"

// maxMetricsBytes bounds a backend's /metrics page read for the adapters.
const maxMetricsBytes = 8 << 20

// loraInfo is a backend's newest vllm:lora_requests_info series.
type loraInfo struct {
	loaded  []string // running and waiting adapters
	running int      // distinct running adapters
	max     int      // max_lora, 0 = unknown
}

// adapterParent is the base model a card names as its parent ("" for a
// base model's card).
func adapterParent(c *openai.ModelCard) string {
	s, _ := c.Parent.(string)
	return s
}

// hasAdapters reports whether b's /v1/models lists an adapter.
func (b *backend) hasAdapters() bool {
	if ms := b.models.Load(); ms != nil {
		for i := range *ms {
			if adapterParent(&(*ms)[i]) != "" {
				return true
			}
		}
	}
	return false
}

// adapterBase is the base model of adapter on b ("" when b does not
// list it as an adapter).
func (b *backend) adapterBase(adapter string) string {
	if ms := b.models.Load(); ms != nil {
		for i := range *ms {
			if c := &(*ms)[i]; c.ID == adapter {
				return adapterParent(c)
			}
		}
	}
	return ""
}

// AdapterBase returns the base model of adapter, from the first backend
// listing it with a parent; ok is false for a model no backend lists as
// an adapter.
func (p *Pool) AdapterBase(adapter string) (base string, ok bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	for _, b := range p.backends {
		if base := b.adapterBase(adapter); base != "" {
			return base, true
		}
	}
	return "", false
}

// Residency returns adapter's residency on each candidate (replica ids,
// in order), from their last vllm:lora_requests_info.
func (p *Pool) Residency(cands []string, adapter string) []gateway.Residency {
	out := make([]gateway.Residency, len(cands))
	for i, id := range cands {
		b := p.backend(id)
		if b == nil {
			continue
		}
		if li := b.lora.Load(); li != nil {
			out[i] = gateway.Residency{Active: li.running, MaxLoRA: li.max}
			for _, a := range li.loaded {
				if a == adapter {
					out[i].Loaded = true
				}
			}
		}
	}
	return out
}

// gatewayRequest is the gateway's view of a request: an adapter's gets
// its base model, adapter id and residency.
func (p *Proxy) gatewayRequest(req *openai.Request, cands []string) gateway.Request {
	gr := gateway.Request{OpenAI: req, Candidates: cands}
	if base, ok := p.pool.AdapterBase(req.Model); ok {
		gr.Base, gr.Adapter, gr.Residency = base, req.Model, p.pool.Residency(cands, req.Model)
	}
	return gr
}

// scrapeEngine reads b's vllm:lora_requests_info and
// vllm:kv_cache_usage_perc; a failure keeps the last readings (an
// unknown residency only costs a load charge, an unknown KV usage is
// room).
func (p *Pool) scrapeEngine(ctx context.Context, b *backend) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.base.String()+"/metrics", nil)
	if err != nil {
		return
	}
	resp, err := p.opts.Client.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return
	}
	li, kv, err := parseEngineMetrics(io.LimitReader(resp.Body, maxMetricsBytes))
	if err != nil {
		p.opts.Logger.Debug("backend's /metrics unreadable", "replica", b.cfg.ReplicaID, "err", err)
		return
	}
	if li != nil {
		b.lora.Store(li)
	}
	if kv >= 0 {
		b.kv.Store(&kv)
	}
}

// parseEngineMetrics reads a Prometheus text page: the newest
// vllm:lora_requests_info series (nil when none) and the largest
// vllm:kv_cache_usage_perc (-1 when none).
func parseEngineMetrics(r io.Reader) (*loraInfo, float64, error) {
	tp := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := tp.TextToMetricFamilies(r)
	if err != nil {
		return nil, -1, fmt.Errorf("parsing /metrics: %w", err)
	}
	kv := -1.0
	if f := fams[kvUsageMetric]; f != nil {
		for _, m := range f.GetMetric() {
			kv = max(kv, m.GetGauge().GetValue())
		}
	}
	return newestLoRAInfo(fams[loraMetric]), kv, nil
}

// kvUsageMetric is vLLM's KV usage gauge (0..1).
const kvUsageMetric = "vllm:kv_cache_usage_perc"

// newestLoRAInfo is the newest series of vllm:lora_requests_info (the
// largest value: vLLM sets the current combination to the time); nil
// when f is.
func newestLoRAInfo(f *dto.MetricFamily) *loraInfo {
	if f == nil {
		return nil
	}
	var best *loraInfo
	bestAt := 0.0
	for _, m := range f.GetMetric() {
		v := m.GetGauge().GetValue()
		if best != nil && v <= bestAt {
			continue
		}
		li := &loraInfo{}
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "max_lora":
				li.max, _ = strconv.Atoi(l.GetValue())
			case "running_lora_adapters":
				names := splitNames(l.GetValue())
				li.running = len(names)
				li.loaded = append(li.loaded, names...)
			case "waiting_lora_adapters":
				li.loaded = append(li.loaded, splitNames(l.GetValue())...)
			}
		}
		best, bestAt = li, v
	}
	return best
}

// splitNames splits a comma-joined adapter list ("" = none).
func splitNames(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}
