package api

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/pickerload"
	"github.com/inference-cache/inference-cache/policy"
)

// fakeShare is a PickerLoad over a real store on a hand-moved clock,
// recording what would be passed on to the peers.
type fakeShare struct {
	store *pickerload.Store
	mu    sync.Mutex
	now   time.Time
	fwd   []string // picker ids passed on
}

func newFakeShare(max int) *fakeShare {
	f := &fakeShare{now: time.Unix(1_700_000_000, 0)}
	f.store = pickerload.New(pickerload.Config{MaxEntries: max, Now: func() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now }})
	return f
}

func (f *fakeShare) SharePickerLoad(req *pb.ReportPickerLoadRequest) (pickerload.Outcome, error) {
	o, err := f.store.Put(pickerload.FromPB(req))
	if err == nil && o == pickerload.Stored {
		f.mu.Lock()
		f.fwd = append(f.fwd, req.PickerId)
		f.mu.Unlock()
	}
	return o, err
}
func (f *fakeShare) PickerLoadView() pickerload.View { return f.store.At() }
func (f *fakeShare) advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

// loadsOf answers a PREFIX_MATCH on r1 with fresh stats for r1 and r2
// (r3 has neither stats nor, unless hinted, a place in the answer).
func loadsOf(hinted ...string) func(*index.LookupRequest, *index.Result) {
	return func(req *index.LookupRequest, res *index.Result) {
		res.Reason = index.PrefixMatch
		for _, h := range hinted {
			res.Hints = append(res.Hints, index.Hint{ReplicaID: h, Score: 10, MatchedTokens: 16, MatchedBlocks: 1, Freshness: 1})
		}
		if req.IncludeLoad {
			res.Loads = append(res.Loads, index.Load{ReplicaID: "r1", WaitingRequests: 4, RunningRequests: 9},
				index.Load{ReplicaID: "r2", WaitingRequests: 1, RunningRequests: 2})
		}
	}
}

func shareSvc(f *fakeNode, sh *fakeShare) *Service {
	f.pol = policy.Default()
	return NewService(Config{Backend: f, PickerLoad: sh})
}

func report(id string, seq uint64, loads ...*pb.PickerReplicaLoad) *pb.ReportPickerLoadRequest {
	return &pb.ReportPickerLoadRequest{PickerId: id, Sequence: seq, Loads: loads}
}

func rl(id string, pre uint32, tok uint64, run uint32) *pb.PickerReplicaLoad {
	return &pb.PickerReplicaLoad{ReplicaId: id, PrefillingRequests: pre, PrefillTokens: tok, RunningRequests: run}
}

// A lookup with include_load carries, per replica, the other pickers'
// load summed by hand, never the asker's own; the engine's own stats stay
// as they were. Without include_load nothing of it is read.
func TestLookupRoute_OthersLoadExcludesTheAsker(t *testing.T) {
	sh := newFakeShare(0)
	s := shareSvc(&fakeNode{lookup: loadsOf("r1"), fresh: true}, sh)
	ctx := context.Background()
	for _, r := range []*pb.ReportPickerLoadRequest{
		report("gw-a", 1, rl("r1", 2, 4000, 3), rl("r2", 1, 100, 1)),
		report("gw-b", 1, rl("r1", 1, 1000, 5)),
	} {
		resp, err := s.ReportPickerLoad(ctx, r)
		if err != nil || resp.Accepted != uint32(len(r.Loads)) || resp.Superseded {
			t.Fatalf("report %s: %v %v", r.PickerId, resp, err)
		}
	}
	req := &pb.LookupRouteRequest{HashScheme: "vllm", ModelId: "m", BlockHashes: []uint64{1}, IncludeLoad: true, PickerId: "gw-a"}
	r, _ := s.LookupRoute(ctx, req)
	if len(r.Loads) != 2 {
		t.Fatalf("loads %v, want r1 and r2", r.Loads)
	}
	// gw-a asks: r1 carries gw-b's (1, 1000, 5), r2 nothing (only gw-a there).
	if l := r.Loads[0]; l.ReplicaId != "r1" || l.WaitingRequests != 4 || l.RunningRequests != 9 ||
		l.OthersPrefillingRequests != 1 || l.OthersPrefillTokens != 1000 || l.OthersRunningRequests != 5 || l.OthersPickers != 1 {
		t.Errorf("r1 for gw-a: %v, want engine (4, 9) and others (1, 1000, 5) of 1 picker", l)
	}
	if l := r.Loads[1]; l.ReplicaId != "r2" || l.OthersPickers != 0 || l.OthersPrefillTokens != 0 {
		t.Errorf("r2 for gw-a: %v, want no others' load (its own left out)", l)
	}
	// No picker_id: every picker's, r1 = (2+1, 4000+1000, 3+5).
	req.PickerId = ""
	r, _ = s.LookupRoute(ctx, req)
	if l := r.Loads[0]; l.OthersPrefillingRequests != 3 || l.OthersPrefillTokens != 5000 || l.OthersRunningRequests != 8 || l.OthersPickers != 2 {
		t.Errorf("r1 without picker_id: %v, want (3, 5000, 8) of 2 pickers", l)
	}
	req.IncludeLoad = false
	if r, _ = s.LookupRoute(ctx, req); len(r.Loads) != 0 {
		t.Errorf("without include_load: loads %v", r.Loads)
	}
	if len(sh.fwd) != 2 {
		t.Errorf("passed on %v, want both reports", sh.fwd)
	}
}

// A hinted replica without fresh stats but with other pickers' load is
// listed with only others_*; one without either is not.
func TestLookupRoute_HintedReplicaWithoutStatsGetsOthersLoad(t *testing.T) {
	sh := newFakeShare(0)
	s := shareSvc(&fakeNode{lookup: loadsOf("r3", "r4"), fresh: true}, sh)
	ctx := context.Background()
	if _, err := s.ReportPickerLoad(ctx, report("gw-b", 1, rl("r3", 2, 64, 2), rl("r9", 1, 1, 1))); err != nil {
		t.Fatal(err)
	}
	r, _ := s.LookupRoute(ctx, &pb.LookupRouteRequest{HashScheme: "vllm", ModelId: "m", BlockHashes: []uint64{1}, IncludeLoad: true, PickerId: "gw-a"})
	var ids []string
	for _, l := range r.Loads {
		ids = append(ids, l.ReplicaId)
	}
	if strings.Join(ids, ",") != "r1,r2,r3" {
		t.Fatalf("loads %v, want r1, r2 (stats) and r3 (hinted, others' load); not r4 (no load) nor r9 (not hinted)", ids)
	}
	if l := r.Loads[2]; l.WaitingRequests != 0 || l.StatsAgeMs != 0 || l.OthersPrefillingRequests != 2 || l.OthersPrefillTokens != 64 || l.OthersPickers != 1 {
		t.Errorf("r3: %v, want others (2, 64, 2) only", l)
	}
}

// A report overtaken by a newer one of its picker is answered
// superseded and changes nothing; a stopped picker's load is gone from
// lookups 2 intervals after its last report.
func TestReportPickerLoad_SupersededAndExpiry(t *testing.T) {
	sh := newFakeShare(0)
	s := shareSvc(&fakeNode{lookup: loadsOf(), fresh: true}, sh)
	ctx := context.Background()
	if _, err := s.ReportPickerLoad(ctx, &pb.ReportPickerLoadRequest{PickerId: "gw-b", Sequence: 5, IntervalMs: 20, Loads: []*pb.PickerReplicaLoad{rl("r1", 1, 10, 1)}}); err != nil {
		t.Fatal(err)
	}
	resp, err := s.ReportPickerLoad(ctx, report("gw-b", 4, rl("r1", 9, 90, 9)))
	if err != nil || !resp.Superseded || resp.Accepted != 0 {
		t.Fatalf("older sequence: %v %v, want superseded, 0 accepted", resp, err)
	}
	look := func() *pb.ReplicaLoad {
		r, _ := s.LookupRoute(ctx, &pb.LookupRouteRequest{HashScheme: "vllm", ModelId: "m", BlockHashes: []uint64{1}, IncludeLoad: true, PickerId: "gw-a"})
		return r.Loads[0]
	}
	if l := look(); l.OthersPrefillTokens != 10 {
		t.Fatalf("r1: %v, want sequence 5's 10 tokens", l)
	}
	sh.advance(39 * time.Millisecond)
	if l := look(); l.OthersPickers != 1 {
		t.Fatalf("39 ms after a report at a 20 ms interval: %v, want it held", l)
	}
	sh.advance(time.Millisecond)
	if l := look(); l.OthersPickers != 0 || l.OthersPrefillTokens != 0 {
		t.Fatalf("40 ms (2 intervals) after: %v, want it gone", l)
	}
}

// Bad reports are refused by the house's error table: INVALID_ARGUMENT
// naming the field, RESOURCE_EXHAUSTED naming the limit; without a
// PickerLoad the RPC is UNIMPLEMENTED.
func TestReportPickerLoad_Errors(t *testing.T) {
	sh := newFakeShare(2)
	s := shareSvc(&fakeNode{lookup: match}, sh)
	ctx := context.Background()
	for _, c := range []struct {
		req  *pb.ReportPickerLoadRequest
		code codes.Code
		want string
	}{
		{report("", 1), codes.InvalidArgument, "picker_id: required"},
		{report(strings.Repeat("x", 129), 1), codes.InvalidArgument, "picker_id: 129 bytes, over the limit of 128"},
		{&pb.ReportPickerLoadRequest{PickerId: "g", Sequence: 1, IntervalMs: 70000}, codes.InvalidArgument, "interval_ms: 70000"},
		{report("g", 1, rl("r1", 0, 0, 0), rl("r1", 0, 0, 0)), codes.InvalidArgument, `loads[1].replica_id: "r1" repeats loads[0]`},
		{report("g", 1, rl("a", 0, 0, 0), rl("b", 0, 0, 0), rl("c", 0, 0, 0)), codes.ResourceExhausted, "limit of 2"},
	} {
		_, err := s.ReportPickerLoad(ctx, c.req)
		if st, _ := status.FromError(err); st.Code() != c.code || !strings.Contains(st.Message(), c.want) {
			t.Errorf("%v: %v, want %v with %q", c.req, err, c.code, c.want)
		}
	}
	if len(sh.fwd) != 0 {
		t.Errorf("refused reports passed on: %v", sh.fwd)
	}
	_, err := newSvc(&fakeNode{lookup: match}, nil).ReportPickerLoad(ctx, report("g", 1))
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("without a PickerLoad: %v, want UNIMPLEMENTED", err)
	}
}
