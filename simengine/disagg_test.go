package simengine

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/openai"
)

var nixl = DisaggConfig{Connector: ConnectorNixl, EngineID: "prefill-0", Host: "127.0.0.1", Port: 5600, TransferPerBlock: time.Millisecond}

// A prefill (do_remote_decode) answers with the kv_transfer_params vLLM's
// NixlConnector returns; the decode given them pulls the prompt's 5
// blocks (4 full and the partial last) at 1 ms each instead of
// prefilling 72 tokens at 1000/s (72 ms), and caches them as its own: a
// second decode of the same prompt pulls only what is not cached.
func TestDisagg_PrefillAnswersAndDecodePulls(t *testing.T) {
	p := newTestEngine(t, Config{KVBlocks: 100, PrefillTPS: 1000, DecodeTPS: 1000, Disagg: nixl})
	d := newTestEngine(t, Config{KVBlocks: 100, PrefillTPS: 1000, DecodeTPS: 1000, Disagg: nixl})
	prompt := seq(1, 72)
	code, body := p.postDriven(t, "/v1/completions", map[string]any{"model": "sim-model", "prompt": prompt, "max_tokens": 1, "stream": false,
		"kv_transfer_params": map[string]any{"do_remote_decode": true, "do_remote_prefill": false, "remote_engine_id": nil,
			"remote_block_ids": nil, "remote_host": nil, "remote_port": nil}})
	var pr struct {
		KVTransferParams map[string]any `json:"kv_transfer_params"`
	}
	if code != 200 || json.Unmarshal(body, &pr) != nil {
		t.Fatalf("prefill: %d %s", code, body)
	}
	kv := pr.KVTransferParams
	ids, _ := kv["remote_block_ids"].([]any)
	if kv["do_remote_prefill"] != true || kv["do_remote_decode"] != false || kv["remote_engine_id"] != "prefill-0" || kv["remote_host"] != "127.0.0.1" ||
		kv["remote_port"] != 5600.0 || kv["tp_size"] != 1.0 || len(ids) != 5 {
		t.Fatalf("prefill's kv_transfer_params %v", kv)
	}
	for i := range 2 {
		code, body = d.postDriven(t, "/v1/completions", map[string]any{"model": "sim-model", "prompt": prompt, "max_tokens": 2, "kv_transfer_params": kv})
		var r openai.CompletionResponse
		if code != 200 || json.Unmarshal(body, &r) != nil || r.KVTransferParams != nil {
			t.Fatalf("decode %d: %d %s", i, code, body)
		}
	}
	// 5 ms then 1 ms (the partial block, the 4 full ones cached: 64
	// tokens, vLLM's cap of one block below the prompt's 72).
	if got := metric(d.scrape(t), "vllm:request_prefill_time_seconds"); !near(got, 0.006) {
		t.Fatalf("decode prefill time sum %v, want 0.006 (5 pulled blocks, then 1)", got)
	}
}

// A do_remote_prefill without the prefill's answer fields is refused,
// naming the field; without a connector kv_transfer_params is ignored.
func TestDisagg_BadTransferParams(t *testing.T) {
	d := newTestEngine(t, Config{KVBlocks: 100, Disagg: nixl})
	for _, c := range []struct {
		kv    map[string]any
		param string
	}{
		{map[string]any{"do_remote_prefill": true, "remote_block_ids": []int{0}}, "kv_transfer_params.remote_engine_id"},
		{map[string]any{"do_remote_prefill": true, "remote_engine_id": "p"}, "kv_transfer_params.remote_block_ids"},
		{map[string]any{"do_remote_prefill": true, "do_remote_decode": true}, "kv_transfer_params"},
	} {
		code, body := d.postDriven(t, "/v1/completions", map[string]any{"model": "sim-model", "prompt": "hello", "kv_transfer_params": c.kv})
		var e openai.ErrorResponse
		if code != 400 || json.Unmarshal(body, &e) != nil || e.Error.Param == nil || *e.Error.Param != c.param {
			t.Errorf("%v: %d %s, want 400 naming %s", c.kv, code, body, c.param)
		}
	}
	plain := newTestEngine(t, Config{KVBlocks: 100})
	code, body := plain.postDriven(t, "/v1/completions", map[string]any{"model": "sim-model", "prompt": "hello", "max_tokens": 1,
		"kv_transfer_params": map[string]any{"do_remote_decode": true}})
	var r openai.CompletionResponse
	if code != 200 || json.Unmarshal(body, &r) != nil || r.KVTransferParams != nil {
		t.Fatalf("no connector: %d %s, want served with kv_transfer_params null", code, body)
	}
}
