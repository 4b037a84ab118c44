package proxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inference-cache/inference-cache/gateway"
	"github.com/inference-cache/inference-cache/openai"
)

// Disaggregated prefill/decode, as vLLM's NixlConnector proxy does it
// (tests/v1/kv_connector/nixl_integration/toy_proxy_server.py at
// 030ea52e): with a backend of role prefill among the model's, a request
// is
//
//  1. sent to a prefill backend, picked by the gateway (prefix hints and
//     load: the index holds the prefill replicas' blocks), as a copy with
//     kv_transfer_params {"do_remote_decode": true, "do_remote_prefill":
//     false, "remote_engine_id": null, "remote_block_ids": null,
//     "remote_host": null, "remote_port": null}, "stream": false,
//     "max_tokens": 1 (and "max_completion_tokens": 1 when the client set
//     it), without stream_options, min_tokens and min_completion_tokens,
//     and the same X-Request-Id as the decode;
//  2. then, with the kv_transfer_params of the prefill's answer in place
//     of nothing, the original request goes to a decode backend (role
//     decode or both), picked by load (the fewest requests this proxy has
//     in flight there) among those with KV room (vllm:kv_cache_usage_perc
//     under DecodeKVLimit at the last check; all when none has), and its
//     answer, streamed or not, is relayed to the client.
//
// When the model has no healthy prefill backend, or the prefill fails
// (refused, an error status, an answer without kv_transfer_params), the
// decode backend serves the whole request, as an aggregated vLLM does.
// X-Inference-Cache-Path says which path a request took
// ("disaggregated" or "aggregated"), X-Inference-Cache-Prefill-Replica,
// -Prefill-Reason and -Prefill-Matched-Tokens name the prefill's pick,
// and disagg_requests_total{path, cause} counts them.
//
// A client's own kv_transfer_params is refused (400 naming the field):
// the field drives the engines' KV transfers, which only the proxy
// sets. A decode backend refusing the transfer answers its own error,
// relayed as is (vLLM's OpenAI error JSON).

// Backend roles (Backend.Role).
const (
	// RoleBoth serves whole requests (aggregated) and decodes (the
	// default, "").
	RoleBoth = "both"
	// RolePrefill only prefills for decode backends.
	RolePrefill = "prefill"
	// RoleDecode decodes after a prefill backend, and serves whole
	// requests when no prefill backend can.
	RoleDecode = "decode"
)

// The headers of a request of a fleet with prefill backends.
const (
	// HeaderPath is "disaggregated" or "aggregated".
	HeaderPath = "X-Inference-Cache-Path"
	// HeaderPrefillReplica, HeaderPrefillReason and
	// HeaderPrefillMatchedTokens are the prefill's pick, as
	// HeaderReplica, HeaderReason and HeaderMatchedTokens are the
	// decode's.
	HeaderPrefillReplica       = "X-Inference-Cache-Prefill-Replica"
	HeaderPrefillReason        = "X-Inference-Cache-Prefill-Reason"
	HeaderPrefillMatchedTokens = "X-Inference-Cache-Prefill-Matched-Tokens"
)

// Paths and causes (HeaderPath, disagg_requests_total).
const (
	PathDisaggregated = "disaggregated"
	PathAggregated    = "aggregated"
	causeOK           = "ok"
	causeNoPrefill    = "no_prefill_backend"
	causePrefillFail  = "prefill_failed"
)

// DecodeKVLimit is the KV usage (0..1) past which a decode backend is
// passed over while another has room.
const DecodeKVLimit = 0.9

// maxPrefillAnswerBytes bounds a prefill's answer (one token and the
// kv_transfer_params).
const maxPrefillAnswerBytes = 1 << 20

// errClientTransferParams refuses a client's kv_transfer_params.
var errClientTransferParams = openai.Errorf("kv_transfer_params", "is set by the proxy for disaggregated prefill/decode; a client must not send it")

// checkRole validates a backend's role.
func checkRole(role string) error {
	switch role {
	case "", RoleBoth, RolePrefill, RoleDecode:
		return nil
	}
	return fmt.Errorf("role %q: want prefill, decode or both", role)
}

// newDisaggMetrics registers disagg_requests_total.
func newDisaggMetrics(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "inference_cache", Subsystem: "proxy", Name: "disagg_requests_total",
		Help: "Requests of fleets with prefill backends, by path (disaggregated, aggregated) and cause (ok, no_prefill_backend, prefill_failed)."},
		[]string{"path", "cause"})
	reg.MustRegister(c)
	return c
}

// PrefillCandidates appends to dst the healthy prefill backends serving
// model.
func (p *Pool) PrefillCandidates(model string, dst []string) []string {
	p.mu.RLock()
	defer p.mu.RUnlock()
	for _, b := range p.backends {
		if b.cfg.Role == RolePrefill && b.up.Load() && b.serves(model) {
			dst = append(dst, b.cfg.ReplicaID)
		}
	}
	return dst
}

// Disaggregated reports whether model has a prefill backend, healthy or
// not (one whose models are not known yet counts): its requests go the
// disaggregated way, aggregated while no prefill backend can serve.
func (p *Pool) Disaggregated(model string) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	for _, b := range p.backends {
		if b.cfg.Role == RolePrefill && (b.serves(model) || b.cfg.Model == "" && b.models.Load() == nil) {
			return true
		}
	}
	return false
}

// withRoom keeps the candidates whose last KV usage is under
// DecodeKVLimit (all of them when none is).
func (p *Pool) withRoom(cands []string) []string {
	out := make([]string, 0, len(cands))
	for _, id := range cands {
		if b := p.backend(id); b == nil || b.kvUsage() < DecodeKVLimit {
			out = append(out, id)
		}
	}
	if len(out) == 0 {
		return cands
	}
	return out
}

// kvUsage is b's last vllm:kv_cache_usage_perc (0 when unknown).
func (b *backend) kvUsage() float64 {
	if v := b.kv.Load(); v != nil {
		return *v
	}
	return 0
}

// serveDisaggregated serves a request of a model with prefill backends;
// cands are its decode candidates (healthy, role decode or both).
// sent is called once the answer starts (forward's sent: the body's
// bytes in flight are released then); the bool is forward's abort.
func (p *Proxy) serveDisaggregated(w http.ResponseWriter, r *http.Request, req *openai.Request, body []byte, cands []string, start time.Time, sent func()) (int, bool) {
	h := w.Header()
	var arr [16]string
	pcands := p.pool.PrefillCandidates(req.Model, arr[:0])
	if len(pcands) == 0 {
		return p.aggregated(w, r, req, body, cands, start, causeNoPrefill, sent)
	}
	preq := p.gatewayRequest(req, pcands)
	preq.Holders = len(pcands) + len(cands) // the decode backends cache the blocks they pull
	pd, err := p.gw.Decide(r.Context(), preq)
	if err != nil {
		if r.Context().Err() != nil {
			return statusClientClosed, false
		}
		return p.refuse(w, err), false
	}
	p.record(pd)
	if r.Header.Get("X-Request-Id") == "" {
		r.Header.Set("X-Request-Id", randomRequestID()) // the same for both halves, as vLLM's proxy sends
	}
	kv, err := p.prefill(r, req, pd)
	if err != nil {
		if r.Context().Err() != nil {
			return statusClientClosed, false
		}
		p.log.Warn("prefill failed; serving aggregated", "replica", pd.Replica, "err", err)
		return p.aggregated(w, r, req, body, cands, start, causePrefillFail, sent)
	}
	dbody, err := withField(req, "kv_transfer_params", kv)
	if err != nil {
		return p.refuse(w, err), false
	}
	dd, err := p.decodeGW.Decide(r.Context(), gateway.Request{Candidates: p.pool.withRoom(cands)})
	if err != nil {
		return p.refuse(w, err), false
	}
	reason, matched := pd.ReasonFor(pd.Replica)
	h.Set(HeaderPath, PathDisaggregated)
	h.Set(HeaderPrefillReplica, pd.Replica)
	h.Set(HeaderPrefillReason, reason)
	h.Set(HeaderPrefillMatchedTokens, strconv.Itoa(matched))
	p.m.Disagg.WithLabelValues(PathDisaggregated, causeOK).Inc()
	return p.forward(w, r, dbody, req.Stream, dd, start, sent)
}

// aggregated serves the whole request on a decode candidate, picked as
// any request is.
func (p *Proxy) aggregated(w http.ResponseWriter, r *http.Request, req *openai.Request, body []byte, cands []string, start time.Time, cause string, sent func()) (int, bool) {
	d, err := p.gw.Decide(r.Context(), p.gatewayRequest(req, cands))
	if err != nil {
		if r.Context().Err() != nil {
			return statusClientClosed, false
		}
		return p.refuse(w, err), false
	}
	p.record(d)
	w.Header().Set(HeaderPath, PathAggregated)
	p.m.Disagg.WithLabelValues(PathAggregated, cause).Inc()
	return p.forward(w, r, body, req.Stream, d, start, sent)
}

// record counts a decision in the metrics.
func (p *Proxy) record(d *gateway.Decision) {
	p.m.Picks.WithLabelValues(d.Reason).Inc()
	if d.FailOpen {
		p.m.FailOpen.Inc()
	}
	if d.LookupRefused != "" {
		p.m.LookupRefused.WithLabelValues(d.LookupRefused).Inc()
		p.refused.Note(p.log, d, time.Now())
	}
	if d.NoKey != nil {
		p.m.NoKey.Inc()
	}
	if d.Lookup > 0 {
		p.m.Lookup.Observe(d.Lookup.Seconds())
	}
	if d.PromptTokens > 0 {
		p.m.PromptTokens.Add(float64(d.PromptTokens))
		p.m.MatchedTokens.Add(float64(d.MatchedTokens))
	}
	p.logDecision(d)
}

// errNoTransferParams is a prefill answer without kv_transfer_params:
// the backend has no KV connector.
var errNoTransferParams = errors.New("the prefill's answer has no kv_transfer_params (is the backend started with a KV connector?)")

// prefill sends the prefill half to pd's replica and returns its answer's
// kv_transfer_params.
func (p *Proxy) prefill(r *http.Request, req *openai.Request, pd *gateway.Decision) (json.RawMessage, error) {
	b := p.pool.backend(pd.Replica)
	if b == nil {
		return nil, errBackendRemoved
	}
	pbody, err := prefillBody(req)
	if err != nil {
		return nil, err
	}
	ctx := r.Context()
	if p.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.timeout)
		defer cancel()
	}
	f := pd.Start(pd.Replica)
	defer f.Done()
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	resp, err := p.send(sctx, cancel, r, b, pbody, false)
	if err != nil {
		f.Fail()
		kind := classify(ctx, context.Cause(sctx), err)
		p.m.UpstreamErrors.WithLabelValues(pd.Replica, kind).Inc()
		if kind == kindRefused {
			p.pool.MarkDown(pd.Replica, err)
		}
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxPrefillAnswerBytes))
	if err != nil {
		p.m.UpstreamErrors.WithLabelValues(pd.Replica, kindBroken).Inc()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		p.m.UpstreamErrors.WithLabelValues(pd.Replica, kindOther).Inc()
		return nil, fmt.Errorf("status %d: %.200s", resp.StatusCode, raw)
	}
	f.FirstToken()
	var ans struct {
		KV json.RawMessage `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(raw, &ans); err != nil {
		return nil, fmt.Errorf("prefill answer: %w", err)
	}
	if len(ans.KV) == 0 || bytes.Equal(ans.KV, []byte("null")) {
		return nil, errNoTransferParams
	}
	return ans.KV, nil
}

// prefillBody is the prefill half's body, as vLLM's proxy makes it.
func prefillBody(req *openai.Request) ([]byte, error) {
	m := make(map[string]json.RawMessage, len(req.Raw)+3)
	for k, v := range req.Raw {
		switch k {
		case "stream_options", "min_tokens", "min_completion_tokens":
			continue
		}
		m[k] = v
	}
	m["kv_transfer_params"] = json.RawMessage(`{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`)
	m["stream"] = json.RawMessage("false")
	m["max_tokens"] = json.RawMessage("1")
	if _, ok := req.Raw["max_completion_tokens"]; ok {
		m["max_completion_tokens"] = json.RawMessage("1")
	}
	return json.Marshal(m)
}

// withField is req's body with field set to v.
func withField(req *openai.Request, field string, v json.RawMessage) ([]byte, error) {
	m := make(map[string]json.RawMessage, len(req.Raw)+1)
	for k, x := range req.Raw {
		m[k] = x
	}
	m[field] = v
	return json.Marshal(m)
}

// randomRequestID is 32 hex digits.
func randomRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
