package provisional_test

import (
	"testing"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/provisional"
)

// blind is pick with the tokens its picker counted as cached.
func blind(id uint64, replica string, base uint64, n int, cached uint32) provisional.Pick {
	k := pick(id, replica, base, n)
	k.CachedTokens = cached
	return k
}

// repeated returns replica → the repeated prefill tokens of its match.
func repeated(s *provisional.Store, c []uint64) map[string]uint32 {
	return matchesBy(s, c, func(m provisional.Match) uint32 { return m.Repeated })
}

// Hand-worked on a 5-block lookup (16 tokens a block) whose first 4
// blocks picks on replica a hold. In the order received: p1 (4 blocks,
// picked blind) computes 64 tokens; p2 (4 blocks, blind) repeats all 64;
// p3 (4 blocks, picked seeing 64 cached) repeats none; p4 (2 blocks,
// blind) repeats its 32; p5 (4 blocks, blind, past its first token) no
// longer queues: 0. Replica b's one pick repeats nothing. Total on a:
// 64 + 32 = 96. Once p2 has its first token (a delta, or a full state's
// flag when the delta was lost), a has 32.
func TestMatches_RepeatedCountsAQueuedPrefixOnce(t *testing.T) {
	s, _ := newStore(0)
	p5 := blind(5, "a", 100, 4, 0)
	p5.Prefilled = true
	apply(t, s, provisional.Push{PickerID: "g1", Sequence: 1, Picks: []provisional.Pick{blind(1, "a", 100, 4, 0)}})
	apply(t, s, provisional.Push{PickerID: "g2", Sequence: 1, Picks: []provisional.Pick{blind(2, "a", 100, 4, 0), blind(3, "a", 100, 4, 64)}})
	apply(t, s, provisional.Push{PickerID: "g3", Sequence: 1, Picks: []provisional.Pick{blind(4, "a", 100, 2, 0), p5, blind(6, "b", 100, 4, 0)}})
	lookup := chain(100, 5)
	if got := repeated(s, lookup); got["a"] != 96 || got["b"] != 0 {
		t.Fatalf("repeated %v, want a 96, b 0", got)
	}
	if got := matches(s, lookup); got["a"] != 4 {
		t.Fatalf("matches %v, want a at 4 blocks", got)
	}
	apply(t, s, provisional.Push{PickerID: "g2", Sequence: 2, Prefilled: []uint64{2}})
	if got := repeated(s, lookup); got["a"] != 32 {
		t.Fatalf("after p2's first token: repeated %v, want a 32", got)
	}

	// The same through a full state, its Prefilled delta lost.
	s2, _ := newStore(0)
	apply(t, s2, provisional.Push{PickerID: "g1", Sequence: 1, Picks: []provisional.Pick{blind(1, "a", 100, 4, 0)}})
	apply(t, s2, provisional.Push{PickerID: "g2", Sequence: 1, Picks: []provisional.Pick{blind(2, "a", 100, 4, 0)}})
	if got := repeated(s2, lookup); got["a"] != 64 {
		t.Fatalf("repeated %v, want a 64", got)
	}
	full := blind(2, "a", 100, 4, 0)
	full.Prefilled = true
	apply(t, s2, provisional.Push{PickerID: "g2", Sequence: 2, Full: true, Picks: []provisional.Pick{full}})
	if got := repeated(s2, lookup); got["a"] != 0 {
		t.Fatalf("after a full state with p2 prefilled: repeated %v, want a 0", got)
	}
	live := s2.Live("g2", 0)
	if len(live) != 1 || !live[0].Prefilled {
		t.Fatalf("live %+v, want p2 prefilled", live)
	}
}

// The wire keeps cached_tokens and the first-token news.
func TestPB_CarriesCachedTokensAndPrefilled(t *testing.T) {
	k := blind(7, "a", 100, 2, 48)
	k.Prefilled = true
	in := provisional.Push{PickerID: "g", Sequence: 3, Picks: []provisional.Pick{k}, Prefilled: []uint64{9}}
	out := provisional.FromPB(provisional.ToPB(&in))
	if got := out.Picks[0]; got.CachedTokens != 48 || !got.Prefilled || len(out.Prefilled) != 1 || out.Prefilled[0] != 9 {
		t.Fatalf("round trip %+v", out)
	}
}

// A hint takes the larger count of the server's and a gateway's own
// table (each counts the picks it holds); a confirmed hint that covers
// the match keeps it too.
func TestMerge_RepeatedTakesTheLarger(t *testing.T) {
	resp := &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_NO_HINT}
	provisional.Merge(resp, []provisional.Match{{Replica: "a", Blocks: 4, Tokens: 64, Repeated: 64}}, 0)
	provisional.Merge(resp, []provisional.Match{{Replica: "a", Blocks: 4, Tokens: 64, Repeated: 32}}, 0)
	if h := resp.Replicas[0]; !h.GetProvisional() || h.GetRepeatedPrefillTokens() != 64 {
		t.Fatalf("hint %v, want provisional with 64 repeated", h)
	}
	conf := &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_PREFIX_MATCH, Replicas: []*pb.ReplicaHint{{ReplicaId: "a", MatchedBlocks: 4, MatchedTokens: 64}}}
	if _, covered := provisional.Merge(conf, []provisional.Match{{Replica: "a", Blocks: 4, Tokens: 64, Repeated: 48}}, 0); len(covered) != 1 {
		t.Fatalf("covered %v", covered)
	}
	if h := conf.Replicas[0]; h.GetProvisional() || h.GetRepeatedPrefillTokens() != 48 {
		t.Fatalf("confirmed hint %v, want confirmed with 48 repeated", h)
	}
}
