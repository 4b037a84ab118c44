package client

import (
	"strconv"
	"testing"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// BenchmarkPicker_Pick: one decision over 8 candidates with 3 prefix hints
// and every replica's load, and its Start/FirstToken/Done (the gateway's
// per-request cost of the picker).
func BenchmarkPicker_Pick(b *testing.B) {
	cands := make([]string, 8)
	resp := &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_PREFIX_MATCH}
	for i := range cands {
		cands[i] = "vllm-" + strconv.Itoa(i)
		resp.Loads = append(resp.Loads, &pb.ReplicaLoad{ReplicaId: cands[i], WaitingRequests: uint32(i % 3), RunningRequests: uint32(i)})
	}
	for i := 0; i < 3; i++ {
		resp.Replicas = append(resp.Replicas, &pb.ReplicaHint{ReplicaId: cands[i*2], MatchedTokens: uint32(4096 - 1024*i), WaitingRequests: 1, RunningRequests: 3})
	}
	p := NewPicker(DefaultPickerConfig())
	b.ReportAllocs()
	for b.Loop() {
		d := p.Pick(resp, cands, 6000)
		r := p.Start(&d)
		r.FirstToken()
		r.Done()
	}
}
