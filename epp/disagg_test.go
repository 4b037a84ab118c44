package epp

import (
	"slices"
	"strings"
	"testing"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/internal/extproctest"
)

// pdPool is a pool with two prefill endpoints, two decode endpoints, and
// LoRA adapter "sql" on the decode endpoints' model.
var pdPool = []Endpoint{
	{Address: "10.0.1.1:8000", ReplicaID: "p0", Model: "m", Role: RolePrefill},
	{Address: "10.0.1.2:8000", ReplicaID: "p1", Model: "m", Role: RolePrefill},
	{Address: "10.0.2.1:8000", ReplicaID: "d0", Model: "m", Role: RoleDecode, Adapters: []string{"sql"}},
	{Address: "10.0.2.2:8000", ReplicaID: "d1", Model: "m", Role: RoleDecode, Adapters: []string{"sql"}},
}

// With prefill endpoints the destination is a decode endpoint, never a
// prefill one, and x-prefiller-host-port names the prefill endpoint the
// hint names (llm-d's header for the decode pod's sidecar); the pick is
// counted by the prefill's reason.
func TestDisagg_PrefillHeaderNamesThePrefixPick(t *testing.T) {
	r := newRig(t, &fakeLookup{resp: prefixMatch("p1", 64)}, Options{})
	if err := r.t.Set(pdPool); err != nil {
		t.Fatal(err)
	}
	x := start(t, r, extproctest.Request{Mode: fullDuplex, ResponseMode: fullDuplex, Path: "/v1/chat/completions", Body: chatBody("m", 300)})
	p := x.Pick
	if p.Immediate != nil {
		t.Fatalf("immediate %v", p.Immediate)
	}
	if got := p.Headers[PrefillHeader]; got != "10.0.1.2:8000" {
		t.Fatalf("%s = %q, want p1's address", PrefillHeader, got)
	}
	for _, d := range []string{"10.0.1.1:8000", "10.0.1.2:8000"} {
		if slices.Contains(strings.Split(p.Destination, ","), d) {
			t.Fatalf("destination %q names a prefill endpoint", p.Destination)
		}
	}
	if _, err := x.Respond(extproctest.Response{}); err != nil {
		t.Fatal(err)
	}
}

// An adapter's request goes to the endpoints listing it, keyed on their
// model with the adapter's id; a model no endpoint serves is a 503.
func TestAdapters_FromTheEndpointsConfig(t *testing.T) {
	lk := &fakeLookup{resp: &pb.LookupRouteResponse{ServedBy: "n1"}}
	r := newRig(t, lk, Options{})
	if err := r.t.Set(pdPool[2:]); err != nil {
		t.Fatal(err)
	}
	x := start(t, r, extproctest.Request{Mode: fullDuplex, ResponseMode: fullDuplex, Path: "/v1/chat/completions", Body: chatBody("sql", 300)})
	if x.Pick.Immediate != nil || x.Pick.Headers[PrefillHeader] != "" {
		t.Fatalf("adapter request: %+v", x.Pick)
	}
	lk.mu.Lock()
	got := lk.last
	lk.mu.Unlock()
	if got.GetModelId() != "m" || got.GetAdapterId() != "sql" {
		t.Fatalf("looked up model %q adapter %q, want m and sql", got.GetModelId(), got.GetAdapterId())
	}
	y := start(t, r, extproctest.Request{Mode: fullDuplex, ResponseMode: fullDuplex, Path: "/v1/chat/completions", Body: chatBody("chat", 300)})
	if y.Pick.Immediate == nil {
		t.Fatalf("unknown adapter picked %q", y.Pick.Destination)
	}
}
