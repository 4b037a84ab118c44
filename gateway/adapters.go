package gateway

import (
	"slices"

	"github.com/inference-cache/inference-cache/client"
)

// LoRA adapters. vLLM serves an adapter as a model name of its own, on
// top of a base model; the subscriber indexes the adapter's blocks in
// the base model's partition under the adapter id (its lora_name), and
// they never match the base model's (contract §2). So an adapter's
// request (Request.Base and Request.Adapter set) is keyed with the base
// model's tokenizer, chat template and block size, and looked up with
// model_id Base and adapter_id Adapter.
//
// Among the candidates (the replicas serving the adapter), the picker's
// cost of each is then charged for the adapter's residency
// (Request.Residency, from the engines' vllm:lora_requests_info, and
// this gateway's own requests in flight):
//
//   - loaded (the adapter runs or waits there, or this gateway has one
//     of its requests in flight there): no charge;
//   - not loaded: Config.AdapterLoadTokens, the load's cost in prefill
//     tokens;
//   - not loaded on a replica already running max_lora other adapters:
//     the request would wait for a slot, so the replica is passed over
//     while a candidate is not in that state.

// DefaultAdapterLoadTokens is the cost of loading an adapter, in prefill
// tokens: a load of about 50 ms at 10,000 prefill tokens/s.
const DefaultAdapterLoadTokens = 500

// Residency is what is known of one adapter on one candidate.
type Residency struct {
	// Loaded is set when the engine reports the adapter among its running
	// or waiting ones.
	Loaded bool
	// Active is the number of distinct adapters the engine reports
	// running; MaxLoRA its max_lora (0 = unknown: never full).
	Active, MaxLoRA int
}

// adapterKey is a replica and an adapter, for the requests in flight.
type adapterKey struct{ replica, adapter string }

// chargeAdapters adds the residency terms to costs (in candidate order)
// and returns which candidates are full (not loaded, at max_lora; none
// when all are), or nil when nothing was charged.
func (g *Gateway) chargeAdapters(req Request, costs []client.PickCost) []bool {
	if req.Adapter == "" {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	charged := false
	full := make([]bool, len(costs))
	for i := range costs {
		var r Residency
		if i < len(req.Residency) {
			r = req.Residency[i]
		}
		if r.Loaded || g.adapterInflight[adapterKey{costs[i].Replica, req.Adapter}] > 0 {
			continue
		}
		costs[i].Cost += float64(g.cfg.AdapterLoadTokens)
		full[i] = r.MaxLoRA > 0 && max(r.Active, g.adaptersOn(costs[i].Replica)) >= r.MaxLoRA
		charged = true
	}
	if !charged {
		return nil
	}
	if !slices.Contains(full, false) {
		clear(full) // all full: the cheapest waits least
	}
	return full
}

// adaptersOn is the number of distinct adapters this gateway has in
// flight on replica (g.mu held).
func (g *Gateway) adaptersOn(replica string) int {
	n := 0
	for k, c := range g.adapterInflight {
		if k.replica == replica && c > 0 {
			n++
		}
	}
	return n
}
