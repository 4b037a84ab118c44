package api

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/policy"
	"github.com/inference-cache/inference-cache/raftnode"
)

// fakeNode is a Backend whose lookup behaviour a test sets.
type fakeNode struct {
	mu          sync.Mutex
	pol         policy.Policy
	lookup      func(req *index.LookupRequest, res *index.Result)
	credits     [][]uint64
	ingested    []index.BlockEvent
	ingestID    string
	err         error
	notReady    bool
	staleReason string
	newestMs    int64
	offset      time.Duration // ReadState.ClockOffsetToLeader
	fresh       bool          // ReadState.Stale false (default: stale)
}

func (f *fakeNode) Lookup(req *index.LookupRequest, res *index.Result) { f.lookup(req, res) }
func (f *fakeNode) Credit(p index.Partition, h []uint64) {
	f.mu.Lock()
	f.credits = append(f.credits, append([]uint64(nil), h...))
	f.mu.Unlock()
}
func (f *fakeNode) ReadState() raftnode.ReadState {
	return raftnode.ReadState{NodeID: "n1", AppliedIndex: 42, LastLeaderContact: 7 * time.Millisecond, Stale: !f.fresh, StaleReason: f.staleReason, NewestObservedMs: f.newestMs,
		ClockOffsetToLeader: f.offset}
}
func (f *fakeNode) Ready() bool           { return !f.notReady }
func (f *fakeNode) Policy() policy.Policy { return f.pol.Clone() }
func (f *fakeNode) Ingest(_ context.Context, id string, evs []index.BlockEvent) (raftnode.WriteResult, error) {
	f.ingestID, f.ingested = id, evs
	return raftnode.WriteResult{Index: 43}, f.err
}
func (f *fakeNode) ReportStats(context.Context, string, []index.ReplicaStats) (raftnode.WriteResult, error) {
	return raftnode.WriteResult{Index: 44}, f.err
}
func (f *fakeNode) SetPolicy(_ context.Context, p policy.Policy) (policy.Policy, error) {
	p.Version = f.pol.Version + 1
	return p, f.err
}

// match answers like an index under LRU: a PREFIX_MATCH naming no credits.
func match(req *index.LookupRequest, res *index.Result) {
	res.Reason = index.PrefixMatch
	res.Hints = append(res.Hints, index.Hint{ReplicaID: "r1", Score: 64, MatchedTokens: 128, MatchedBlocks: 8, Freshness: 1, AgeMs: 3, Pressure: 0.5})
}

// matchLFU answers like an index under LFU: match, naming the 3 hashes to
// credit.
func matchLFU(req *index.LookupRequest, res *index.Result) {
	match(req, res)
	res.CreditPartition = req.Partition
	res.CreditHashes = append(res.CreditHashes, 1, 2, 3)
}

type fakeTok struct{}

func (fakeTok) EncodeContext(_ context.Context, model, text string, _ int) ([]uint32, error) {
	if model != "known" {
		return nil, errors.New("no tokenizer")
	}
	return make([]uint32, len(text)), nil
}

func newSvc(f *fakeNode, tok Tokenizer) *Service {
	if f.pol.MaxReplicas == 0 {
		f.pol = policy.Default()
	}
	return NewService(Config{Backend: f, Tokenizer: tok})
}

var okReq = &pb.LookupRouteRequest{HashScheme: "vllm", ModelId: "m", TokenIds: []uint32{1, 2, 3}}

func TestLookupRoute_ConvertsHintsAndReadState(t *testing.T) {
	var got index.LookupRequest
	f := &fakeNode{lookup: func(req *index.LookupRequest, res *index.Result) { got = *req; match(req, res) }}
	s := newSvc(f, nil)
	r, err := s.LookupRoute(context.Background(), &pb.LookupRouteRequest{HashScheme: "vllm", ModelId: "m", TenantId: "t", AdapterId: "a",
		BlockHashes: []uint64{5, 6}, BlockTokenCounts: []uint32{16, 16}, PrefixHash: 6, Slo: &pb.Slo{TtftMs: 100}, MaxReplicas: 2})
	if err != nil {
		t.Fatal(err)
	}
	if r.ReasonCode != pb.ReasonCode_PREFIX_MATCH || len(r.Replicas) != 1 || r.Replicas[0].ReplicaId != "r1" || r.Replicas[0].MatchedTokens != 128 ||
		r.Replicas[0].Pressure != 0.5 || r.ServedBy != "n1" || r.AppliedIndex != 42 || !r.Stale || r.LastLeaderContactMs != 7 {
		t.Fatalf("response %v", r)
	}
	want := index.Partition{Scheme: "vllm", Model: "m", Tenant: "t", Adapter: "a"}
	if got.Partition != want || !got.HasPrefixHash || got.PrefixHash != 6 || len(got.BlockHashes) != 2 || got.SLOTTFTMs != 100 || got.MaxReplicas != 2 || got.NowMs == 0 {
		t.Fatalf("index request %+v", got)
	}
	if len(f.credits) != 0 {
		t.Errorf("credited %v; the index named no credits (LRU)", f.credits)
	}
}

func TestLookupRoute_LFUCreditsDeliveredPrefixMatch(t *testing.T) {
	f := &fakeNode{lookup: matchLFU, pol: policy.Default()}
	f.pol.EvictionPolicy = policy.LFU
	s := newSvc(f, nil)
	if _, err := s.LookupRoute(context.Background(), okReq); err != nil {
		t.Fatal(err)
	}
	if len(f.credits) != 1 || len(f.credits[0]) != 3 {
		t.Fatalf("credits %v, want one batch of 3 hashes", f.credits)
	}
}

// The index decides what to credit, with the policy it ranked with; the
// service credits what the index names even while its own cached copy of
// the policy (refreshed every policyRefresh) still says LRU, as it does
// right after a change to LFU.
func TestLookupRoute_CreditsWhatTheIndexNames(t *testing.T) {
	f := &fakeNode{lookup: matchLFU, pol: policy.Default()}
	f.pol.EvictionPolicy = policy.LRU
	s := newSvc(f, nil)
	if _, err := s.LookupRoute(context.Background(), okReq); err != nil {
		t.Fatal(err)
	}
	if len(f.credits) != 1 || len(f.credits[0]) != 3 {
		t.Fatalf("credits %v, want the index's batch of 3 hashes", f.credits)
	}
}

// Panics and blown budgets become NO_HINT, never a gRPC error.
func TestLookupRoute_FailsOpen(t *testing.T) {
	cases := []struct {
		name   string
		node   *fakeNode
		tok    Tokenizer
		req    *pb.LookupRouteRequest
		detail string
	}{
		{"panic in ranking", &fakeNode{lookup: func(*index.LookupRequest, *index.Result) { panic("boom") }}, nil, okReq, DetailPanic},
		{"over budget", &fakeNode{lookup: func(req *index.LookupRequest, res *index.Result) {
			time.Sleep(30 * time.Millisecond) // the fault under test: a lookup slower than the 10 ms default budget
			match(req, res)
		}}, nil, okReq, DetailTimeout},
		{"not ready", &fakeNode{lookup: match, notReady: true}, nil, okReq, DetailNotReady},
		{"no tokenizer", &fakeNode{lookup: match}, nil, &pb.LookupRouteRequest{HashScheme: "vllm", ModelId: "m", PromptText: "hi"}, DetailNoTokenizer},
		{"unknown model tokenizer", &fakeNode{lookup: match}, fakeTok{}, &pb.LookupRouteRequest{HashScheme: "vllm", ModelId: "m", PromptText: "hi"}, DetailTokenizeFailed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newSvc(c.node, c.tok)
			r, err := s.LookupRoute(context.Background(), c.req)
			if err != nil {
				t.Fatalf("error %v; LookupRoute must fail open", err)
			}
			if r.ReasonCode != pb.ReasonCode_NO_HINT || r.Detail != c.detail || len(r.Replicas) != 0 || r.ServedBy != "n1" {
				t.Fatalf("response %v, want NO_HINT %q from n1", r, c.detail)
			}
		})
	}
}

func TestLookupRoute_PromptTextTokenizedIntoTokenIDs(t *testing.T) {
	var got []uint32
	f := &fakeNode{lookup: func(req *index.LookupRequest, res *index.Result) { got = req.TokenIDs; match(req, res) }}
	s := newSvc(f, fakeTok{})
	r, _ := s.LookupRoute(context.Background(), &pb.LookupRouteRequest{HashScheme: "vllm", ModelId: "known", PromptText: "hello"})
	if r.ReasonCode != pb.ReasonCode_PREFIX_MATCH || len(got) != 5 {
		t.Fatalf("reason %v, tokens %v", r.ReasonCode, got)
	}
}

// cache_salt reaches the index with the token ids (prompt_text too); an
// over-long salt is refused before any lookup.
func TestLookupRoute_CacheSaltReachesTheIndex(t *testing.T) {
	var got index.LookupRequest
	f := &fakeNode{lookup: func(req *index.LookupRequest, res *index.Result) { got = *req; match(req, res) }}
	s := newSvc(f, fakeTok{})
	for _, req := range []*pb.LookupRouteRequest{
		{HashScheme: "vllm", ModelId: "m", TokenIds: []uint32{1, 2, 3}, CacheSalt: "s1"},
		{HashScheme: "vllm", ModelId: "known", PromptText: "hello", CacheSalt: "s1"},
	} {
		got = index.LookupRequest{}
		if r, _ := s.LookupRoute(context.Background(), req); r.ReasonCode != pb.ReasonCode_PREFIX_MATCH || got.CacheSalt != "s1" {
			t.Fatalf("%v: reason %v, index salt %q", req, r.ReasonCode, got.CacheSalt)
		}
	}
	got = index.LookupRequest{}
	r, _ := s.LookupRoute(context.Background(), &pb.LookupRouteRequest{HashScheme: "vllm", ModelId: "m", TokenIds: []uint32{1}, CacheSalt: strings.Repeat("x", MaxCacheSaltBytes+1)})
	if r.ReasonCode != pb.ReasonCode_NO_HINT || r.Detail != DetailSaltTooLong || got.Partition.Scheme != "" {
		t.Fatalf("over-long salt: %v %q (index called: %v)", r.ReasonCode, r.Detail, got.Partition.Scheme != "")
	}
}

func TestIngest_MapsErrorsAndPassesTheRequestID(t *testing.T) {
	f := &fakeNode{lookup: match}
	s := newSvc(f, nil)
	req := &pb.IngestRequest{Events: []*pb.BlockEvent{
		{Kind: pb.BlockEvent_STORED, ReplicaId: "r", HashScheme: "vllm", ModelId: "m", BlockHashes: []uint64{1}},
		{Kind: pb.BlockEvent_STORED, ReplicaId: "", HashScheme: "vllm", ModelId: "m", BlockHashes: []uint64{1}},
	}}
	r, err := s.Ingest(context.Background(), req)
	if err != nil || r.Accepted != 1 || r.AppliedIndex != 43 || len(r.Rejected) != 1 || r.Rejected[0].EventIndex != 1 {
		t.Fatalf("%v %v", r, err)
	}
	// No request id: the node makes it (raftnode.Node.NewRequestID), so
	// the service passes "" on.
	if f.ingestID != "" || len(f.ingested) != 1 {
		t.Fatalf("request id %q, %d events; want \"\" (the node makes ids) and 1", f.ingestID, len(f.ingested))
	}
	withID := &pb.IngestRequest{RequestId: "client-7", Events: req.Events}
	if _, err := s.Ingest(context.Background(), withID); err != nil || f.ingestID != "client-7" {
		t.Fatalf("request id %q (err %v), want the client's client-7", f.ingestID, err)
	}
	f.err = status.Error(codes.Unavailable, "no leader")
	if _, err := s.Ingest(context.Background(), req); status.Code(err) != codes.Unavailable {
		t.Fatalf("err %v, want UNAVAILABLE passed through", err)
	}
	f.err = context.DeadlineExceeded
	if _, err := s.Ingest(context.Background(), req); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("err %v, want DEADLINE_EXCEEDED", err)
	}
	// Only invalid events: nothing is committed, applied index is the node's.
	f.err = nil
	r, err = s.Ingest(context.Background(), &pb.IngestRequest{Events: req.Events[1:]})
	if err != nil || r.Accepted != 0 || r.AppliedIndex != 42 {
		t.Fatalf("%v %v", r, err)
	}
}

// A batch whose events are all 10 minutes ahead of the server clock is
// answered, not refused: accepted 0, every event counted in
// rejected_ahead_of_clock, and the server clock it was checked against in
// server_time_ms. In a mixed batch the valid event still commits and only
// the future one is counted; a clean batch counts none.
func TestIngest_EventsAheadOfTheClockAreCountedWithTheServerClock(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	f := &fakeNode{lookup: match}
	f.pol = policy.Default()
	s := NewService(Config{Backend: f, Now: func() time.Time { return now }})
	ev := func(at time.Time) *pb.BlockEvent {
		return &pb.BlockEvent{Kind: pb.BlockEvent_STORED, ReplicaId: "r", HashScheme: "vllm", ModelId: "m", BlockHashes: []uint64{1}, ObservedAtMs: at.UnixMilli()}
	}
	future := now.Add(10 * time.Minute)
	cases := []struct {
		name            string
		events          []*pb.BlockEvent
		accepted, ahead uint32
	}{
		{"all ahead", []*pb.BlockEvent{ev(future), ev(future), ev(future)}, 0, 3},
		{"mixed", []*pb.BlockEvent{ev(now), ev(future)}, 1, 1},
		{"in step", []*pb.BlockEvent{ev(now), ev(now.Add(-time.Minute))}, 2, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := s.Ingest(context.Background(), &pb.IngestRequest{Events: c.events})
			if err != nil {
				t.Fatalf("error %v; clock trouble is an answer, not an error", err)
			}
			if r.Accepted != c.accepted || r.RejectedAheadOfClock != c.ahead || r.ServerTimeMs != now.UnixMilli() {
				t.Fatalf("accepted %d, rejected_ahead_of_clock %d, server_time_ms %d; want %d, %d, %d",
					r.Accepted, r.RejectedAheadOfClock, r.ServerTimeMs, c.accepted, c.ahead, now.UnixMilli())
			}
		})
	}
}

func TestSetCachePolicy_ValidatesAndVersions(t *testing.T) {
	f := &fakeNode{lookup: match, pol: policy.Default()}
	f.pol.Version = 4
	s := newSvc(f, nil)
	q := PolicyToPB(policy.Default())
	q.MaxReplicas = 9
	got, err := s.SetCachePolicy(context.Background(), &pb.SetCachePolicyRequest{Policy: q})
	if err != nil || got.Version != 5 || got.MaxReplicas != 9 {
		t.Fatalf("%v %v", got, err)
	}
	// Refusals name the message's field and the value as sent (contract
	// §9.4), and the rules a user's policy must meet beyond Validate's.
	for name, c := range map[string]struct {
		edit func(*pb.CachePolicy)
		want string
	}{
		"ranking version": {func(q *pb.CachePolicy) { q.RankingVersion = "v9" }, `ranking_version="v9"`},
		"zero timeout":    {func(q *pb.CachePolicy) { q.LookupTimeoutMs = 0 }, `lookup_timeout_ms="0": must be between 1ms and 10s`},
		"zero ttl":        {func(q *pb.CachePolicy) { q.EvictionTtlSeconds = 0 }, `eviction_ttl_seconds="0"`},
		"infinite floor":  {func(q *pb.CachePolicy) { q.RoutingFloorScore = "+Inf" }, `routing_floor_score="+Inf"`},
		"hex floor":       {func(q *pb.CachePolicy) { q.RoutingFloorScore = "0x1p-3" }, `routing_floor_score="0x1p-3"`},
		"model id":        {func(q *pb.CachePolicy) { q.BlockSize = map[string]uint32{"m\x00": 16} }, `block_size="m\x00": model id holds control character U+0000 at byte 1`},
		"block size":      {func(q *pb.CachePolicy) { q.BlockSize = map[string]uint32{"m": 0} }, `block_size["m"]="0"`},
	} {
		q := PolicyToPB(policy.Default())
		c.edit(q)
		_, err := s.SetCachePolicy(context.Background(), &pb.SetCachePolicyRequest{Policy: q})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want INVALID_ARGUMENT saying %s", name, err, c.want)
		}
	}
}

// BenchmarkLookupRouteHandler measures the handler alone (no network) with
// a constant index answer: the API layer's own cost and allocations.
func BenchmarkLookupRouteHandler(b *testing.B) {
	f := &fakeNode{lookup: match}
	s := newSvc(f, nil)
	req := &pb.LookupRouteRequest{HashScheme: "vllm", ModelId: "m", TenantId: "t", BlockHashes: make([]uint64, 24)}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_, _ = s.LookupRoute(ctx, req)
	}
}

// startFake serves s on loopback and returns a client (helper for gRPC tests).
func startFake(t testing.TB, s *Service) pb.InferenceCacheClient {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	pb.RegisterInferenceCacheServer(gs, s)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return pb.NewInferenceCacheClient(cc)
}

// Over gRPC a panicking index still gives a NO_HINT response.
func TestLookupRoute_PanicOverGRPCIsNoHint(t *testing.T) {
	c := startFake(t, newSvc(&fakeNode{lookup: func(*index.LookupRequest, *index.Result) { panic("x") }}, nil))
	r, err := c.LookupRoute(context.Background(), okReq)
	if err != nil || r.ReasonCode != pb.ReasonCode_NO_HINT || r.Detail != DetailPanic {
		t.Fatalf("%v %v", r, err)
	}
}

// A stale answer says why in its detail (the response has no field for
// the reason): a hint from a node on a full disk must not read like a
// fresh one.
func TestLookupRoute_StaleReasonInDetail(t *testing.T) {
	f := &fakeNode{lookup: match, staleReason: "appends to the local log are failing"}
	r, err := newSvc(f, nil).LookupRoute(context.Background(), okReq)
	if err != nil {
		t.Fatal(err)
	}
	if r.ReasonCode != pb.ReasonCode_PREFIX_MATCH || !r.Stale || !strings.HasSuffix(r.Detail, " (stale: appends to the local log are failing)") {
		t.Fatalf("response %v", r)
	}
	f.staleReason = ""
	if r, _ := newSvc(f, nil).LookupRoute(context.Background(), okReq); strings.Contains(r.Detail, "stale:") {
		t.Fatalf("no reason known, detail %q", r.Detail)
	}
}

// A node whose clock runs far ahead of what its index holds ranks with
// the newest observation plus LookupClockMargin, not its own clock, and
// says so in the detail; a node in step uses its clock.
func TestLookupRoute_ClockBoundedByTheNewestObservation(t *testing.T) {
	var got index.LookupRequest
	f := &fakeNode{lookup: func(req *index.LookupRequest, res *index.Result) { got = *req; match(req, res) }}
	newest := time.Now().Add(-10 * time.Minute).UnixMilli()
	f.newestMs = newest
	s := newSvc(f, nil)
	r, err := s.LookupRoute(context.Background(), okReq)
	if err != nil {
		t.Fatal(err)
	}
	if want := newest + LookupClockMargin.Milliseconds(); got.NowMs != want {
		t.Fatalf("lookup clock %d, want the newest observation + margin %d", got.NowMs, want)
	}
	if !strings.Contains(r.Detail, "clock is 600 s ahead of the newest observation") && !strings.Contains(r.Detail, "clock is 601 s ahead") {
		t.Fatalf("detail %q does not say the clock is ahead", r.Detail)
	}
	f.newestMs = time.Now().UnixMilli()
	before := time.Now().UnixMilli()
	if _, err := s.LookupRoute(context.Background(), okReq); err != nil {
		t.Fatal(err)
	}
	if got.NowMs < before {
		t.Fatalf("a node in step ranked with %d, before its own clock %d", got.NowMs, before)
	}
}

// A node whose clock is more than LookupClockOffsetBound off the leader's
// says so in the detail, with the direction and the seconds, whatever the
// reason code; it is not marked stale (contract §5.8: stale is about leader
// contact, which this node has). A node in step, or within the bound,
// adds nothing.
func TestLookupRoute_ClockOffsetToLeaderInDetail(t *testing.T) {
	noMatch := func(*index.LookupRequest, *index.Result) {}
	cases := []struct {
		name   string
		offset time.Duration // the leader's clock minus this node's
		lookup func(*index.LookupRequest, *index.Result)
		want   string // in the detail; "" = no clock clause
	}{
		{"behind by 10 min", 10 * time.Minute, match, "this node's clock is 600 s behind the leader's"},
		{"ahead by 10 min", -10 * time.Minute, match, "this node's clock is 600 s ahead of the leader's"},
		{"behind, no match", 10 * time.Minute, noMatch, "this node's clock is 600 s behind the leader's"},
		{"in step", 0, match, ""},
		{"within the bound", LookupClockOffsetBound - time.Second, match, ""},
		{"within the bound, ahead", -(LookupClockOffsetBound - time.Second), match, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeNode{lookup: c.lookup, offset: c.offset, fresh: true}
			r, err := newSvc(f, nil).LookupRoute(context.Background(), okReq)
			if err != nil {
				t.Fatal(err)
			}
			if r.Stale {
				t.Errorf("stale set for a clock offset of %v; stale is for leader contact", c.offset)
			}
			if c.want == "" {
				if strings.Contains(r.Detail, "clock") {
					t.Errorf("offset %v within the bound, detail %q names the clock", c.offset, r.Detail)
				}
				return
			}
			if !strings.Contains(r.Detail, c.want) {
				t.Errorf("detail %q, want it to contain %q", r.Detail, c.want)
			}
		})
	}
}
