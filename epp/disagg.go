package epp

import (
	"fmt"
	"slices"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/inference-cache/inference-cache/gateway"
	"github.com/inference-cache/inference-cache/openai"
)

// LoRA adapters and disaggregated prefill/decode in the picker (contract
// §14.3). An endpoint's config names the LoRA adapters it serves on its
// model (adapters) and its part (role). A request for an adapter has as
// candidates the endpoints listing it and is keyed on their model, the
// base model, with the adapter's id (gateway's adapters.go).
//
// When the pool has prefill endpoints, the picker follows llm-d's
// convention (llm-d-inference-scheduler pkg/common/routing/common.go at
// 520af478, PrefillEndpointHeader; docs/disaggregation.md): the
// destination is a decode endpoint (role decode or both), picked by load
// (the fewest requests this picker has in flight there, ties in turn),
// and the request gets the header x-prefiller-host-port with the
// ip:port of a prefill endpoint, picked by prefix and load (the index
// holds the prefill replicas' blocks). The decode pod's routing sidecar
// then runs the prefill there and the decode locally; without the header
// (no healthy prefill endpoint) it runs both locally.

// Endpoint roles (Endpoint.Role).
const (
	RoleBoth    = "both"
	RolePrefill = "prefill"
	RoleDecode  = "decode"
)

// PrefillHeader is llm-d's header naming the prefill endpoint for the
// decode pod's sidecar.
const PrefillHeader = "x-prefiller-host-port"

// checkServing validates an endpoint's role and adapters.
func (e *Endpoint) checkServing() error {
	switch e.Role {
	case "", RoleBoth, RolePrefill, RoleDecode:
	default:
		return fmt.Errorf("address %q: role %q: want prefill, decode or both", e.Address, e.Role)
	}
	if len(e.Adapters) > 0 && e.Model == "" {
		return fmt.Errorf("address %q: adapters: need model (the adapters' base model)", e.Address)
	}
	for _, a := range e.Adapters {
		if a == "" || a == e.Model {
			return fmt.Errorf("address %q: adapters: %q is not an adapter name", e.Address, a)
		}
	}
	return nil
}

// serves reports whether e serves model, and the base model when model
// is one of its adapters.
func (e *Endpoint) serves(model string) (ok bool, base string) {
	switch {
	case e.Model == "" || model == "" || e.Model == model:
		return true, ""
	case slices.Contains(e.Adapters, model):
		return true, e.Model
	}
	return false, ""
}

// gatewayRequest is the gateway's view of the request among cands.
func (x *exchange) gatewayRequest(or *openai.Request, cands []string) gateway.Request {
	gr := gateway.Request{OpenAI: or, Candidates: cands}
	if x.base != "" && or != nil {
		gr.Base, gr.Adapter = x.base, or.Model
	}
	return gr
}

// decide picks the destination among cands (by prefix and load; by load
// alone when the request has prefill candidates) and the prefill endpoint
// among those (pre; nil without prefill candidates). Errors are the
// gateway's: the stream ended while the prompt was prepared.
func (x *exchange) decide(or *openai.Request, cands []string) (d, pre *gateway.Decision, err error) {
	if len(x.prefill) == 0 {
		d, err = x.s.gw.Decide(x.srv.Context(), x.gatewayRequest(or, cands))
		return d, nil, err
	}
	preq := x.gatewayRequest(or, x.prefill)
	preq.Holders = len(x.prefill) + len(cands) // the decode endpoints cache the blocks they pull
	if pre, err = x.s.gw.Decide(x.srv.Context(), preq); err != nil {
		return nil, nil, err
	}
	if d, err = x.s.decode.Decide(x.srv.Context(), gateway.Request{Candidates: cands}); err != nil {
		return nil, nil, err
	}
	return d, pre, nil
}

// prefillHeader is the header option naming the prefill endpoint.
func (x *exchange) prefillHeader() *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: PrefillHeader, RawValue: []byte(x.addrs[x.pre.Replica])}}
}
