package epp

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// The health services answer by name, as the protocol's Health Checking
// section names them: liveness always, readiness and the ext_proc
// service once the endpoints are known.
func TestHealth_ServicesByName(t *testing.T) {
	if HealthExtProc != extprocv3.ExternalProcessor_ServiceDesc.ServiceName {
		t.Fatalf("HealthExtProc %q is not the ext_proc service name %q", HealthExtProc, extprocv3.ExternalProcessor_ServiceDesc.ServiceName)
	}
	r := newRig(t, &fakeLookup{}, Options{})
	hc := healthpb.NewHealthClient(r.conn)
	check := func(svc string) healthpb.HealthCheckResponse_ServingStatus {
		resp, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStatus()
	}
	for svc, want := range map[string]healthpb.HealthCheckResponse_ServingStatus{
		"liveness": healthpb.HealthCheckResponse_SERVING, "readiness": healthpb.HealthCheckResponse_SERVING,
		"envoy.service.ext_proc.v3.ExternalProcessor": healthpb.HealthCheckResponse_SERVING, "": healthpb.HealthCheckResponse_SERVING,
		"nope": healthpb.HealthCheckResponse_SERVICE_UNKNOWN,
	} {
		if got := check(svc); got != want {
			t.Errorf("%q: %v, want %v", svc, got, want)
		}
	}
	// Not synced yet: alive, not ready.
	h := NewHealth(&Table{})
	for svc, want := range map[string]healthpb.HealthCheckResponse_ServingStatus{
		"liveness": healthpb.HealthCheckResponse_SERVING, "readiness": healthpb.HealthCheckResponse_NOT_SERVING,
		"envoy.service.ext_proc.v3.ExternalProcessor": healthpb.HealthCheckResponse_NOT_SERVING,
	} {
		if resp, _ := h.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc}); resp.GetStatus() != want {
			t.Errorf("unsynced %q: %v, want %v", svc, resp.GetStatus(), want)
		}
	}
}

func TestEndpoints_ParseAndCheckNameTheField(t *testing.T) {
	e, err := ParseEndpointFlag("10.0.0.7:8000=vllm-0,qwen3")
	if err != nil || !reflect.DeepEqual(e, Endpoint{Address: "10.0.0.7:8000", ReplicaID: "vllm-0", Model: "qwen3"}) {
		t.Fatalf("%+v %v", e, err)
	}
	for s, want := range map[string]string{
		"10.0.0.7:8000":       "want ADDRESS=REPLICA_ID",
		"10.0.0.7=vllm-0":     "want IP:PORT",
		"10.0.0.7:0=vllm-0":   "port must be 1 to 65535",
		"10.0.0.7:8000=":      "replica_id: required",
		"10.0.0.7:80000=v":    "port must be 1 to 65535",
		":8000=vllm-0,qwen3":  "want IP:PORT",
		"10.0.0.7:8000=,qwen": "replica_id: required",
	} {
		if _, err := ParseEndpointFlag(s); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", s, err, want)
		}
	}
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "e.yaml")
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	eps, err := LoadEndpoints(write("endpoints:\n  - address: 10.0.0.1:8000\n    replica_id: a\n  - address: 10.0.0.2:8000\n    replica_id: b\n    model: m\n"))
	if err != nil || len(eps) != 2 || eps[1].Model != "m" {
		t.Fatalf("%+v %v", eps, err)
	}
	for s, want := range map[string]string{
		"endpoints:\n  - address: 10.0.0.1:8000\n    replica_id: a\n  - address: 10.0.0.1:8000\n    replica_id: b\n": `endpoints[1]: address "10.0.0.1:8000" is also endpoints[0]'s`,
		"endpoints:\n  - address: 10.0.0.1:8000\n    replica_id: a\n  - address: 10.0.0.2:8000\n    replica_id: a\n": `endpoints[1]: replica_id "a" is also endpoints[0]'s`,
		"endpoints:\n  - address: 10.0.0.1:8000\n    replica: a\n":                                                   "field replica not found",
		"endpoints: []\n": "no endpoints",
	} {
		if _, err := LoadEndpoints(write(s)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", s, err, want)
		}
	}
	var tbl Table
	if err := tbl.Set([]Endpoint{{Address: "x", ReplicaID: "a"}}); err == nil || tbl.Synced() {
		t.Fatalf("bad endpoint accepted (%v) or marked synced", err)
	}
}
