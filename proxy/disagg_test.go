package proxy

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// setRoles gives the test proxy's backends a, b, … the roles.
func (tp *testProxy) setRoles(t *testing.T, engines []*fakeEngine, roles ...string) {
	t.Helper()
	var bs []Backend
	for i, e := range engines {
		bs = append(bs, Backend{ReplicaID: string(rune('a' + i)), URL: e.URL, Model: e.model, Role: roles[i]})
	}
	if err := tp.pool.Set(bs); err != nil {
		t.Fatal(err)
	}
}

// prefillAnswer is what a vLLM prefill with NixlConnector answers (the
// fields of NixlConnectorScheduler.request_finished).
const prefillAnswer = `{"id":"cmpl-1","object":"text_completion","choices":[{"text":" tok","finish_reason":"length"}],` +
	`"kv_transfer_params":{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[0,1,2],` +
	`"remote_engine_id":"engine-p","remote_host":"10.0.0.1","remote_port":5600,"tp_size":1}}`

// The two halves as vLLM's NixlConnector proxy sends them: the prefill
// (picked by its hint) gets a copy with do_remote_decode, no stream, one
// token, no stream_options or min_tokens; the decode gets the original
// request with the prefill's kv_transfer_params; both carry the same
// X-Request-Id; the decode's answer reaches the client, and the headers
// name both picks.
func TestDisagg_PrefillThenDecode(t *testing.T) {
	pe, de := newEngine(t, "qwen3"), newEngine(t, "qwen3")
	var ids [2]string
	pe.setHandler(func(w http.ResponseWriter, r *http.Request) {
		ids[0] = r.Header.Get("X-Request-Id")
		_, _ = w.Write([]byte(prefillAnswer))
	})
	de.setHandler(func(w http.ResponseWriter, r *http.Request) {
		ids[1] = r.Header.Get("X-Request-Id")
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"cmpl-2","choices":[{"text":"decoded"}]}`))
	})
	engines := []*fakeEngine{pe, de}
	tp := newTestProxy(t, prefixMatch("a", 160), Options{}, engines...)
	tp.setRoles(t, engines, RolePrefill, RoleDecode)

	var body map[string]any
	_ = json.Unmarshal([]byte(tp.chat("hello", true)), &body)
	body["stream_options"] = map[string]any{"include_usage": true}
	body["min_tokens"] = 2
	raw, _ := json.Marshal(body)
	resp, out := tp.post(t, "/v1/chat/completions", string(raw))
	if resp.StatusCode != 200 || string(out) != `{"id":"cmpl-2","choices":[{"text":"decoded"}]}` {
		t.Fatalf("answer %d %s, want the decode's", resp.StatusCode, out)
	}
	h := resp.Header
	if h.Get(HeaderPath) != PathDisaggregated || h.Get(HeaderPrefillReplica) != "a" || h.Get(HeaderPrefillReason) != "PREFIX_MATCH" ||
		h.Get(HeaderPrefillMatchedTokens) == "0" || h.Get(HeaderReplica) != "b" {
		t.Fatalf("headers %v", h)
	}
	if ids[0] == "" || ids[0] != ids[1] {
		t.Fatalf("X-Request-Id prefill %q decode %q: want the same", ids[0], ids[1])
	}
	var pb, db map[string]json.RawMessage
	_ = json.Unmarshal(pe.bodies[0], &pb)
	_ = json.Unmarshal(de.bodies[0], &db)
	if string(pb["stream"]) != "false" || string(pb["max_tokens"]) != "1" || pb["stream_options"] != nil || pb["min_tokens"] != nil ||
		string(pb["kv_transfer_params"]) != `{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}` {
		t.Fatalf("prefill body %s", pe.bodies[0])
	}
	var kv map[string]any
	_ = json.Unmarshal(db["kv_transfer_params"], &kv)
	if string(db["stream"]) != "true" || string(db["max_tokens"]) != "4" || db["stream_options"] == nil || string(db["min_tokens"]) != "2" ||
		kv["remote_engine_id"] != "engine-p" || kv["do_remote_prefill"] != true {
		t.Fatalf("decode body %s", de.bodies[0])
	}
	if n := testutil.ToFloat64(tp.m.Disagg.WithLabelValues(PathDisaggregated, causeOK)); n != 1 {
		t.Fatalf("disagg_requests_total{disaggregated,ok} %v", n)
	}
}

// A prefill that fails (an error status, then a backend gone) or answers
// without kv_transfer_params leaves the request to the decode backend,
// whole; a fleet without a healthy prefill backend serves aggregated.
func TestDisagg_FallbackToAggregated(t *testing.T) {
	pe, de := newEngine(t, "qwen3"), newEngine(t, "qwen3")
	engines := []*fakeEngine{pe, de}
	tp := newTestProxy(t, nil, Options{}, engines...)
	tp.setRoles(t, engines, RolePrefill, RoleDecode)
	for i, h := range []http.HandlerFunc{
		func(w http.ResponseWriter, _ *http.Request) { http.Error(w, `{"error":{"message":"boom"}}`, 500) },
		func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte(`{"id":"x","kv_transfer_params":null}`))
		},
	} {
		pe.setHandler(h)
		resp, out := tp.post(t, "/v1/chat/completions", tp.chat("hello", false))
		var db map[string]json.RawMessage
		_ = json.Unmarshal(out, &db)
		if resp.StatusCode != 200 || resp.Header.Get(HeaderPath) != PathAggregated || resp.Header.Get(HeaderReplica) != "b" || db["kv_transfer_params"] != nil {
			t.Fatalf("case %d: %d %v %s, want served whole by b (echo without kv_transfer_params)", i, resp.StatusCode, resp.Header, out)
		}
	}
	if n := testutil.ToFloat64(tp.m.Disagg.WithLabelValues(PathAggregated, causePrefillFail)); n != 2 {
		t.Fatalf("disagg_requests_total{aggregated,prefill_failed} %v, want 2", n)
	}
	pe.Close() // refused: marked down, then no prefill candidate
	for range 2 {
		resp, _ := tp.post(t, "/v1/chat/completions", tp.chat("again", false))
		if resp.StatusCode != 200 || resp.Header.Get(HeaderPath) != PathAggregated {
			t.Fatalf("prefill backend gone: %d %v", resp.StatusCode, resp.Header)
		}
	}
	if n := testutil.ToFloat64(tp.m.Disagg.WithLabelValues(PathAggregated, causeNoPrefill)); n != 1 {
		t.Fatalf("disagg_requests_total{aggregated,no_prefill_backend} %v, want 1 (the request after the refusal)", n)
	}
}

// A client's kv_transfer_params is refused naming the field, and reaches
// no backend; a decode refusing the transfer has its error relayed.
func TestDisagg_BadInput(t *testing.T) {
	pe, de := newEngine(t, "qwen3"), newEngine(t, "qwen3")
	pe.setHandler(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(prefillAnswer)) })
	engines := []*fakeEngine{pe, de}
	tp := newTestProxy(t, nil, Options{}, engines...)
	tp.setRoles(t, engines, RolePrefill, RoleDecode)
	resp, out := tp.post(t, "/v1/completions", `{"model": "qwen3", "prompt": "hi", "kv_transfer_params": {"do_remote_prefill": true}}`)
	var eb struct {
		Error struct {
			Param *string `json:"param"`
			Code  int     `json:"code"`
		} `json:"error"`
	}
	if resp.StatusCode != 400 || json.Unmarshal(out, &eb) != nil || eb.Error.Param == nil || *eb.Error.Param != "kv_transfer_params" {
		t.Fatalf("client kv_transfer_params: %d %s, want 400 naming it", resp.StatusCode, out)
	}
	if pe.posts.Load()+de.posts.Load() != 0 {
		t.Fatal("a refused request reached a backend")
	}
	refusal := `{"error":{"message":"kv_transfer_params.remote_engine_id: unknown engine","type":"BadRequestError","param":"kv_transfer_params","code":400}}`
	de.setHandler(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(400)
		_, _ = w.Write([]byte(refusal))
	})
	resp, out = tp.post(t, "/v1/completions", `{"model": "qwen3", "prompt": "hi"}`)
	if resp.StatusCode != 400 || string(out) != refusal || resp.Header.Get(HeaderPath) != PathDisaggregated {
		t.Fatalf("decode refusing the transfer: %d %s %v, want its 400 relayed", resp.StatusCode, out, resp.Header)
	}
}
