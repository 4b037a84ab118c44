package client

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/provisional"
)

type recordingSender struct {
	mu     sync.Mutex
	pushes []*pb.SharePicksRequest
	fail   bool
}

func (r *recordingSender) SharePicks(_ context.Context, req *pb.SharePicksRequest) (*pb.SharePicksResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail {
		return nil, errors.New("node down")
	}
	r.pushes = append(r.pushes, req)
	return &pb.SharePicksResponse{}, nil
}

func (r *recordingSender) got() []*pb.SharePicksRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*pb.SharePicksRequest(nil), r.pushes...)
}

// Picks, first tokens and removals go out as deltas with increasing sequences; full
// states go out every interval, the first with every pick's hashes
// (within 0), the later ones asking for the picks made since the full
// state before the last; a failed push is counted, never retried.
func TestPickShare_DeltasFullStatesAndTheHashWindow(t *testing.T) {
	snd := &recordingSender{}
	var wmu sync.Mutex
	var windows []time.Duration
	live := func(within time.Duration) []provisional.Pick {
		wmu.Lock()
		windows = append(windows, within)
		wmu.Unlock()
		return []provisional.Pick{{ID: 1}}
	}
	s, err := StartPickShare(snd, live, PickShareConfig{PickerID: "gw", FullStateInterval: MinFullStateInterval})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	k := provisional.Pick{ID: 9, Replica: "r1", Partition: provisional.Partition{Scheme: "vllm", Model: "m"}, Hashes: []uint64{1, 2}}
	s.Add(k)
	s.Prefilled(9)
	s.Remove(9)
	poll.Eventually(t, 10*time.Second, 5*time.Millisecond, func() (bool, string) {
		adds, prefilled, removes := 0, 0, 0
		for _, p := range snd.got() {
			if !p.FullState {
				adds += len(p.Picks)
				prefilled += len(p.Prefilled)
				removes += len(p.Removed)
			}
		}
		wmu.Lock()
		defer wmu.Unlock()
		return adds == 1 && prefilled == 1 && removes == 1 && len(windows) >= 3, "waiting for the delta and three full states"
	})
	ps := snd.got()
	for i := 1; i < len(ps); i++ {
		if ps[i].Sequence <= ps[i-1].Sequence || ps[i].PickerId != "gw" {
			t.Fatalf("push %d: sequence %d after %d, picker %q", i, ps[i].Sequence, ps[i-1].Sequence, ps[i].PickerId)
		}
	}
	wmu.Lock()
	if windows[0] != 0 || windows[1] != 0 || windows[2] <= 0 {
		t.Errorf("hash windows %v: want 0, 0 (no full state two back yet), then the time since the full state before the last", windows)
	}
	wmu.Unlock()
	snd.mu.Lock()
	snd.fail = true
	snd.mu.Unlock()
	s.Add(k)
	poll.Eventually(t, 10*time.Second, 5*time.Millisecond, func() (bool, string) {
		return s.Stats().Failed > 0, "no failed push counted"
	})
	if _, err := StartPickShare(snd, live, PickShareConfig{}); err == nil {
		t.Fatal("no picker id accepted")
	}
	if _, err := StartPickShare(snd, live, PickShareConfig{PickerID: "gw", FullStateInterval: time.Millisecond}); err == nil {
		t.Fatal("a 1 ms full state interval accepted")
	}
}

// A picker with no picks sends one empty full state, then none until it
// pushes again (an empty full state after an empty one repairs nothing).
func TestPickShare_QuietWithoutPicks(t *testing.T) {
	snd := &recordingSender{}
	var calls atomicCount
	s, err := StartPickShare(snd, func(time.Duration) []provisional.Pick { calls.add(); return nil }, PickShareConfig{PickerID: "gw", FullStateInterval: MinFullStateInterval})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	poll.Eventually(t, 10*time.Second, 5*time.Millisecond, func() (bool, string) {
		return calls.get() >= 4, "fewer than 4 full-state ticks"
	})
	if n := len(snd.got()); n != 1 {
		t.Fatalf("%d pushes over 4 empty full-state ticks, want 1", n)
	}
	s.Remove(5)
	poll.Eventually(t, 10*time.Second, 5*time.Millisecond, func() (bool, string) {
		fulls := 0
		for _, p := range snd.got() {
			if p.FullState {
				fulls++
			}
		}
		return fulls == 2, "no empty full state after the delta"
	})
}

type atomicCount struct {
	mu sync.Mutex
	n  int
}

func (a *atomicCount) add() { a.mu.Lock(); a.n++; a.mu.Unlock() }
func (a *atomicCount) get() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n
}

// softFake counts the soft-state calls a node receives and fails them with
// UNAVAILABLE while down.
type softFake struct {
	pb.UnimplementedInferenceCacheServer
	mu          sync.Mutex
	picks, load int
	down        bool
	sentTo      []uint32 // each push's sent_to_nodes
}

func (f *softFake) SharePicks(_ context.Context, req *pb.SharePicksRequest) (*pb.SharePicksResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, status.Error(codes.Unavailable, "down")
	}
	f.picks++
	f.sentTo = append(f.sentTo, req.GetSentToNodes())
	return &pb.SharePicksResponse{}, nil
}

func (f *softFake) ReportPickerLoad(context.Context, *pb.ReportPickerLoadRequest) (*pb.ReportPickerLoadResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, status.Error(codes.Unavailable, "down")
	}
	f.load++
	return &pb.ReportPickerLoadResponse{}, nil
}

// sent is the sent_to_nodes of each push answered, in order.
func (f *softFake) sent() []uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.sentTo)
}

func (f *softFake) counts() (picks, load int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.picks, f.load
}

// serveSoftFakes serves n softFakes on loopback and returns them with
// their addresses.
func serveSoftFakes(t *testing.T, n int) ([]*softFake, []string) {
	t.Helper()
	fakes := make([]*softFake, n)
	addrs := make([]string, n)
	for i := range fakes {
		fakes[i] = &softFake{}
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := grpc.NewServer()
		pb.RegisterInferenceCacheServer(s, fakes[i])
		go s.Serve(lis)
		t.Cleanup(s.Stop)
		addrs[i] = lis.Addr().String()
	}
	return fakes, addrs
}

// A picker's picks and load reports all go to one node, so that node's
// queues pass each pick on before the report sent after it; when that
// node stops answering they move to another node, and stay there.
func TestSoftState_OneNodeUntilItFails(t *testing.T) {
	fakes, addrs := serveSoftFakes(t, 3)
	c := newClient(t, Config{Addrs: addrs, LookupTimeout: 2 * time.Second})
	ctx := context.Background()
	push := func(n int) {
		for range n {
			_, _ = c.SharePicks(ctx, &pb.SharePicksRequest{PickerId: "p"})
			_, _ = c.ReportPickerLoad(ctx, &pb.ReportPickerLoadRequest{PickerId: "p"})
		}
	}
	only := func() int {
		got := -1
		for i, f := range fakes {
			if p, l := f.counts(); p+l > 0 {
				if got >= 0 {
					t.Fatalf("soft state reached nodes %d and %d, want one", got, i)
				}
				got = i
			}
		}
		return got
	}
	push(6)
	first := only()
	if p, l := fakes[first].counts(); p != 6 || l != 6 {
		t.Fatalf("node %d got %d picks pushes and %d load reports, want 6 and 6", first, p, l)
	}

	fakes[first].mu.Lock()
	fakes[first].down, fakes[first].picks, fakes[first].load = true, 0, 0
	fakes[first].mu.Unlock()
	push(6) // the first call fails on the down node; the rest go to the next
	second := only()
	if second == first {
		t.Fatalf("calls still counted on the down node %d", first)
	}
	if p, l := fakes[second].counts(); p+l != 11 {
		t.Fatalf("node %d got %d picks pushes and %d load reports, want 11 in all after the one failed call", second, p, l)
	}
}

// A picks push goes to every node at once (one round trip to each, not
// one plus a fan-out hop), saying how many nodes it went to, so that the
// nodes need not pass it on. A node that does not answer is skipped by
// the next pushes while its backoff lasts, and the push still succeeds
// on the others: the push the node missed is sent again to the node the
// load reports go to (a live one), with sent_to_nodes 0, for that node to
// pass on; the next ones say 2 nodes. With every node down it fails.
func TestSharePicksAll_EveryNodeAtOnce(t *testing.T) {
	fakes, addrs := serveSoftFakes(t, 3)
	c := newClient(t, Config{Addrs: addrs, LookupTimeout: 2 * time.Second, FailBackoff: time.Hour})
	ctx := context.Background()
	if _, err := c.SharePicksAll(ctx, &pb.SharePicksRequest{PickerId: "p"}); err != nil {
		t.Fatal(err)
	}
	for i, f := range fakes {
		if got := f.sent(); !slices.Equal(got, []uint32{3}) {
			t.Fatalf("node %d got pushes sent to %v nodes, want one push sent to 3", i, got)
		}
	}
	fakes[1].mu.Lock()
	fakes[1].down = true
	fakes[1].mu.Unlock()
	for range 2 {
		if _, err := c.SharePicksAll(ctx, &pb.SharePicksRequest{PickerId: "p"}); err != nil {
			t.Fatalf("one node down failed the push: %v", err)
		}
	}
	a, b := fakes[0].sent(), fakes[2].sent()
	if len(a) > len(b) {
		a, b = b, a
	}
	if !slices.Equal(a, []uint32{3, 3, 2}) || !slices.Equal(b, []uint32{3, 3, 0, 2}) {
		t.Fatalf("live nodes got pushes sent to %v and %v nodes, want [3 3 2] and [3 3 0 2] (the missed push again, to be passed on)", a, b)
	}
	if got := fakes[1].sent(); len(got) != 1 {
		t.Fatalf("the down node answered %d pushes, want only the first", len(got))
	}
	for _, f := range fakes {
		f.mu.Lock()
		f.down = true
		f.mu.Unlock()
	}
	if _, err := c.SharePicksAll(ctx, &pb.SharePicksRequest{PickerId: "p"}); err == nil {
		t.Fatal("a push no node answered succeeded")
	}
}

// A full state is not sent a second time when a node misses it: every
// node passes a full state on, so the live ones already do what a second
// copy would ask of them. The caller's request is left as it was.
func TestSharePicksAll_FullStateNotSentAgain(t *testing.T) {
	fakes, addrs := serveSoftFakes(t, 3)
	c := newClient(t, Config{Addrs: addrs, LookupTimeout: 2 * time.Second, FailBackoff: time.Hour})
	fakes[1].mu.Lock()
	fakes[1].down = true
	fakes[1].mu.Unlock()
	req := &pb.SharePicksRequest{PickerId: "p", Sequence: 7, FullState: true}
	if _, err := c.SharePicksAll(context.Background(), req); err != nil {
		t.Fatalf("one node down failed the full state: %v", err)
	}
	for _, i := range []int{0, 2} {
		if got := fakes[i].sent(); !slices.Equal(got, []uint32{3}) {
			t.Fatalf("live node %d got pushes sent to %v nodes, want the full state once, sent to 3", i, got)
		}
	}
	if req.GetSentToNodes() != 0 || !req.GetFullState() || req.GetSequence() != 7 {
		t.Fatalf("the caller's request was changed: %v", req)
	}
}

// sentTo copies every field of the push, so that a field added to
// SharePicksRequest is not silently dropped from what SharePicksAll sends.
func TestSentTo_CopiesEveryField(t *testing.T) {
	req := &pb.SharePicksRequest{}
	m := req.ProtoReflect()
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		switch {
		case fd.IsList():
			l := m.Mutable(fd).List()
			l.Append(l.NewElement())
			if fd.Kind() != protoreflect.MessageKind {
				l.Set(0, protoreflect.ValueOfUint64(uint64(i+1)))
			}
		case fd.Kind() == protoreflect.StringKind:
			m.Set(fd, protoreflect.ValueOfString("x"))
		case fd.Kind() == protoreflect.BoolKind:
			m.Set(fd, protoreflect.ValueOfBool(true))
		case fd.Kind() == protoreflect.Uint32Kind:
			m.Set(fd, protoreflect.ValueOfUint32(uint32(i+1)))
		case fd.Kind() == protoreflect.Uint64Kind:
			m.Set(fd, protoreflect.ValueOfUint64(uint64(i+1)))
		case fd.Kind() == protoreflect.MessageKind:
			sub := m.Mutable(fd).Message()
			sub.Set(sub.Descriptor().Fields().ByName("sequence"), protoreflect.ValueOfUint64(uint64(i+1)))
		default:
			t.Fatalf("field %s of kind %v: extend this test", fd.Name(), fd.Kind())
		}
	}
	got := sentTo(req, 9)
	if got.GetSentToNodes() != 9 {
		t.Fatalf("sent_to_nodes %d, want 9", got.GetSentToNodes())
	}
	got.SentToNodes = req.GetSentToNodes()
	if !proto.Equal(got, req) {
		t.Fatalf("copy %v differs from %v", got, req)
	}
}

// LoadFor's report rides in the push of the picks it was asked for, with
// their ids; a push of first tokens alone and a full state carry none.
func TestPickShare_LoadRidesInThePicksPush(t *testing.T) {
	snd := &recordingSender{}
	var asked [][]uint64
	var mu sync.Mutex
	cfg := PickShareConfig{PickerID: "gw", FullStateInterval: MinFullStateInterval, LoadFor: func(ids []uint64) *pb.ReportPickerLoadRequest {
		mu.Lock()
		asked = append(asked, slices.Clone(ids))
		mu.Unlock()
		return &pb.ReportPickerLoadRequest{Sequence: 41, SettledTurns: []uint64{7}}
	}}
	s, err := StartPickShare(snd, func(time.Duration) []provisional.Pick { return []provisional.Pick{{ID: 9}} }, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	s.Add(provisional.Pick{ID: 9, Replica: "r1", Partition: provisional.Partition{Scheme: "vllm", Model: "m"}, Hashes: []uint64{1, 2}})
	poll.Eventually(t, 10*time.Second, 5*time.Millisecond, func() (bool, string) {
		for _, p := range snd.got() {
			if len(p.Picks) == 1 && !p.FullState {
				return true, ""
			}
		}
		return false, "the pick's push"
	})
	s.Prefilled(9)
	poll.Eventually(t, 10*time.Second, 5*time.Millisecond, func() (bool, string) {
		full := 0
		for _, p := range snd.got() {
			if p.FullState {
				full++
			}
		}
		for _, p := range snd.got() {
			if len(p.Prefilled) == 1 {
				return full > 0, "a full state"
			}
		}
		return false, "the first token's push"
	})
	for _, p := range snd.got() {
		withPick := len(p.Picks) == 1 && !p.FullState
		if got := p.GetLoad(); withPick != (got != nil) || withPick && (got.Sequence != 41 || !slices.Equal(got.SettledTurns, []uint64{7})) {
			t.Fatalf("push (full %v, %d picks, %d prefilled) carries the report %v", p.FullState, len(p.Picks), len(p.Prefilled), got)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 1 || !slices.Equal(asked[0], []uint64{9}) {
		t.Fatalf("LoadFor asked for %v, want once for pick 9", asked)
	}
}

// Begin and End run the pushes one at a time: what is given while a push
// is in flight gathers into the next delta, a full state that fell due
// meanwhile goes once no delta waits, and every delta that adds or
// removes picks calls AfterDelta at its End, answered or failed.
func TestPickShare_ManualOneInFlightGathersABurst(t *testing.T) {
	var loadFor, after [][]uint64
	live := []provisional.Pick{{ID: 1}, {ID: 2}, {ID: 3}}
	s, err := StartPickShare(nil, func(time.Duration) []provisional.Pick { return live }, PickShareConfig{PickerID: "gw", Manual: true,
		LoadFor: func(ids []uint64) *pb.ReportPickerLoadRequest {
			loadFor = append(loadFor, ids)
			return &pb.ReportPickerLoadRequest{PickerId: "gw", Sequence: uint64(len(loadFor))}
		},
		AfterDelta: func(ids []uint64) { after = append(after, ids) }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	t0 := time.Unix(100, 0)
	pick := func(id uint64) provisional.Pick {
		return provisional.Pick{ID: id, Replica: "r1", Partition: provisional.Partition{Scheme: "vllm", Model: "m"}, Hashes: []uint64{id}}
	}
	if c := s.Begin(t0, false); c != nil {
		t.Fatalf("a push with nothing waiting: %v", c.Request)
	}
	s.Add(pick(1))
	c1 := s.Begin(t0, false)
	if c1 == nil || len(c1.Request.Picks) != 1 || c1.Request.GetLoad().GetSequence() != 1 || c1.Request.FullState {
		t.Fatalf("first push %v: want pick 1 with its load report", c1)
	}
	s.Add(pick(2))
	s.Add(pick(3))
	s.Prefilled(1)
	if c := s.Begin(t0.Add(time.Millisecond), true); c != nil {
		t.Fatalf("a second push while one is in flight: %v", c.Request)
	}
	s.End(c1, nil)
	c2 := s.Begin(t0.Add(2*time.Millisecond), false)
	if c2 == nil || len(c2.Request.Picks) != 2 || c2.Request.Picks[0].PickId != 2 || c2.Request.Picks[1].PickId != 3 ||
		len(c2.Request.Prefilled) != 1 || c2.Request.Sequence <= c1.Request.Sequence || c2.Request.FullState {
		t.Fatalf("second push %v: want picks 2 and 3 and the first token of 1 in one delta, a later sequence", c2)
	}
	s.End(c2, errors.New("node down"))
	c3 := s.Begin(t0.Add(3*time.Millisecond), false)
	if c3 == nil || !c3.Request.FullState || len(c3.Request.Picks) != 3 {
		t.Fatalf("third push %v: want the full state that fell due during the first", c3)
	}
	s.End(c3, nil)
	if c := s.Begin(t0.Add(4*time.Millisecond), false); c != nil {
		t.Fatalf("a push after everything went: %v", c.Request)
	}
	if len(loadFor) != 2 || len(loadFor[1]) != 2 || len(after) != 2 || after[0][0] != 1 || after[1][1] != 3 {
		t.Fatalf("LoadFor %v, AfterDelta %v: want [[1] [2 3]] each", loadFor, after)
	}
	if st := s.Stats(); st.Pushes != 2 || st.Full != 1 || st.Failed != 1 {
		t.Fatalf("stats %+v: want 2 pushes (1 full) and 1 failed", st)
	}
}
