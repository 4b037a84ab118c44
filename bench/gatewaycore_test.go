package bench

import (
	"context"
	"fmt"
	"testing"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
)

// hrwWinner is the highest-random-weight replica for key among ids by
// the rule contract §5.10 states (weight = SplitMix64's output function
// of key XOR the FNV-1a 64 hash of the id), written out here apart from
// the client package so that a bench deciding by anything but the gateway
// core's rendezvous fails.
func hrwWinner(key uint64, ids []string) string {
	best, bestW := "", uint64(0)
	for _, id := range ids {
		h := uint64(14695981039346656037)
		for i := 0; i < len(id); i++ {
			h = (h ^ uint64(id[i])) * 1099511628211
		}
		x := key ^ h
		x += 0x9e3779b97f4a7c15
		x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
		x = (x ^ (x >> 27)) * 0x94d049bb133111eb
		x ^= x >> 31
		if best == "" || x > bestW {
			best, bestW = id, x
		}
	}
	return best
}

// The bench's lookuproute-sdk decisions are the gateway core's: on an
// idle fleet with no prefix held anywhere, each request goes to its
// prompt's rendezvous winner, keyed by the hash of its leading 2,048
// tokens as the gateway fingerprints them (4 blocks of 512). A bench
// with its own picker (random ties, no key) would match about one
// request in eight.
func TestCoreRouter_DecisionsAreTheGatewayCoresRendezvous(t *testing.T) {
	const engines = 8
	var reqs []Request
	for k := range 12 {
		reqs = append(reqs, Request{Timestamp: int64(k) * 10000, InputLength: 2560, OutputLength: 1, HashIDs: ids(uint64(1000*(k+1)), 5)})
	}
	tr := &Trace{Name: "rendezvous", Requests: reqs}
	f := NewFleet(FleetConfig{Engines: engines}, BenchModel, "bench-")
	var cands []string
	for i := range engines {
		cands = append(cands, f.ReplicaID(i))
	}
	rep, err := Run(context.Background(), Config{Trace: tr, Gateways: 3, Seed: 7, Strategies: []string{StrategyPickerIndexer},
		Fleet: FleetConfig{Engines: engines, CacheBlocks: 64, PrefillTPS: 10000, DecodeTPS: 40}})
	if err != nil {
		t.Fatal(err)
	}
	want := make([]int64, engines)
	for i := range reqs {
		lr := &pb.LookupRouteRequest{}
		if err := client.Fingerprint(lr, AppendPromptTokens(nil, &reqs[i]), TraceBlockTokens); err != nil {
			t.Fatal(err)
		}
		w := hrwWinner(lr.BlockHashes[3], cands)
		for e, id := range cands {
			if id == w {
				want[e]++
			}
		}
	}
	if got := rep.Strategies[0].PerEngine; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("requests per engine %v, want the rendezvous winners' %v", got, want)
	}
}

// A sibling burst in the model: 8 requests share a new prefix of 8
// blocks (4,096 tokens) and are sent within 5 ms across 4 gateways to an
// idle fleet of 8 engines. The first of each gateway meet on the
// prefix's rendezvous replica (no gateway knows of another's pick yet,
// and all see the same idle fleet); each gateway's second sees its own
// first in its local provisional table (4,096 cached tokens there) and
// follows it. At least 7 of 8 land on one engine. The same burst of 8
// unrelated prompts spreads (each its own rendezvous): the rule does not
// herd.
func TestSiblingBurst_MeetsOnOneReplicaInTheModel(t *testing.T) {
	at := []int64{0, 0, 1, 1, 2, 3, 4, 5} // ms
	burst := func(shared bool) *Trace {
		tr := &Trace{Name: "burst"}
		for k, ms := range at {
			hs := append(ids(500, 8), uint64(900+k)) // 8 shared blocks, one of its own
			if !shared {
				hs = ids(uint64(10000*(k+1)), 9)
			}
			tr.Requests = append(tr.Requests, Request{Timestamp: 1000 + ms, InputLength: 9 * TraceBlockTokens, OutputLength: 64, HashIDs: hs})
		}
		return tr
	}
	for _, shared := range []bool{true, false} {
		for _, strategy := range []string{StrategyPickerIndexer} {
			rep, err := Run(context.Background(), Config{Trace: burst(shared), Gateways: 4, Seed: 3, Strategies: []string{strategy},
				Fleet: FleetConfig{Engines: 8, CacheBlocks: 256, PrefillTPS: 10000, DecodeTPS: 40}})
			if err != nil {
				t.Fatal(err)
			}
			most, used := int64(0), 0
			for _, n := range rep.Strategies[0].PerEngine {
				most = max(most, n)
				if n > 0 {
					used++
				}
			}
			switch {
			case shared && most < 7:
				t.Errorf("%s: siblings per engine %v: want at least 7 of 8 on one", strategy, rep.Strategies[0].PerEngine)
			case !shared && used < 4:
				t.Errorf("%s: unrelated prompts per engine %v: want them spread over at least 4 engines", strategy, rep.Strategies[0].PerEngine)
			}
		}
	}
}
