package client

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/fingerprint"
)

// fake is an InferenceCache server whose behaviour each test sets.
type fake struct {
	pb.UnimplementedInferenceCacheServer
	name string

	mu         sync.Mutex
	lookupErr  error
	delay      time.Duration
	calls      int
	ingestErr  []error // returned in order, then success
	hangIngest bool    // Ingest blocks until the caller gives up
	ids        []string
}

func (f *fake) LookupRoute(ctx context.Context, req *pb.LookupRouteRequest) (*pb.LookupRouteResponse, error) {
	f.mu.Lock()
	f.calls++
	err, d := f.lookupErr, f.delay
	f.mu.Unlock()
	if d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if err != nil {
		return nil, err
	}
	return &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_PREFIX_MATCH, ServedBy: f.name,
		Replicas: []*pb.ReplicaHint{{ReplicaId: "r", MatchedBlocks: uint32(len(req.BlockHashes))}}}, nil
}

func (f *fake) Ingest(ctx context.Context, req *pb.IngestRequest) (*pb.IngestResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ids = append(f.ids, req.RequestId)
	if f.hangIngest {
		f.mu.Unlock()
		<-ctx.Done() // a write stuck behind a leader that never answers
		f.mu.Lock()
		return nil, ctx.Err()
	}
	if len(f.ingestErr) > 0 {
		err := f.ingestErr[0]
		f.ingestErr = f.ingestErr[1:]
		return nil, err
	}
	return &pb.IngestResponse{Accepted: uint32(len(req.Events)), AppliedIndex: 7}, nil
}

func (f *fake) callCount() int { f.mu.Lock(); defer f.mu.Unlock(); return f.calls }

func (f *fake) ingestIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.ids...)
}

func serve(t *testing.T, f *fake) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	pb.RegisterInferenceCacheServer(s, f)
	healthpb.RegisterHealthServer(s, health.NewServer()) // SERVING, like the real server
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

func newClient(t *testing.T, cfg Config) *Client {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestLookupRoute_SpreadsRoundRobin(t *testing.T) {
	a, b := &fake{name: "a"}, &fake{name: "b"}
	c := newClient(t, Config{Addrs: []string{serve(t, a), serve(t, b)}, LookupTimeout: 2 * time.Second})
	for i := 0; i < 10; i++ {
		if r := c.LookupRoute(context.Background(), &pb.LookupRouteRequest{}); r.ReasonCode != pb.ReasonCode_PREFIX_MATCH {
			t.Fatalf("lookup %d: %v", i, r)
		}
	}
	if a.callCount() != 5 || b.callCount() != 5 {
		t.Fatalf("calls a=%d b=%d, want 5 each", a.callCount(), b.callCount())
	}
}

// A failing node costs no failed lookup: the call moves to another node,
// and the failing node is skipped for FailBackoff.
func TestLookupRoute_SkipsFailingNode(t *testing.T) {
	bad, good := &fake{name: "bad", lookupErr: status.Error(codes.Unavailable, "down")}, &fake{name: "good"}
	c := newClient(t, Config{Addrs: []string{serve(t, bad), serve(t, good)}, LookupTimeout: 2 * time.Second, FailBackoff: time.Hour})
	for i := 0; i < 20; i++ {
		r := c.LookupRoute(context.Background(), &pb.LookupRouteRequest{})
		if r.ServedBy != "good" {
			t.Fatalf("lookup %d served by %q: %v", i, r.ServedBy, r)
		}
	}
	if n := bad.callCount(); n != 1 {
		t.Errorf("bad node called %d times, want 1 (then skipped)", n)
	}
	st := c.Stats()
	if st.Lookups != 20 || st.FailOpen != 0 || st.LookupRetries != 1 {
		t.Errorf("stats = %+v, want 20 lookups, 0 fail-open, 1 retry", st)
	}
}

// With every node failing, lookups answer NO_HINT (never an error) and are
// counted as fail-open.
func TestLookupRoute_FailsOpenWhenAllNodesFail(t *testing.T) {
	a := &fake{lookupErr: status.Error(codes.Internal, "boom")}
	b := &fake{lookupErr: status.Error(codes.Unavailable, "down")}
	dead := "127.0.0.1:1" // nothing listens on port 1
	c := newClient(t, Config{Addrs: []string{serve(t, a), serve(t, b), dead}, LookupTimeout: time.Second})
	for i := 0; i < 6; i++ {
		r := c.LookupRoute(context.Background(), &pb.LookupRouteRequest{})
		if r.ReasonCode != pb.ReasonCode_NO_HINT || !strings.HasPrefix(r.Detail, "client: ") || len(r.Replicas) != 0 {
			t.Fatalf("lookup %d: %v", i, r)
		}
	}
	if st := c.Stats(); st.FailOpen != 6 || st.Lookups != 6 {
		t.Errorf("stats = %+v, want 6 fail-open of 6", st)
	}
}

// A slow node is abandoned at the per-call budget.
func TestLookupRoute_TimeoutFailsOpenWithinBudget(t *testing.T) {
	slow := &fake{delay: 5 * time.Second}
	c := newClient(t, Config{Addrs: []string{serve(t, slow)}, LookupTimeout: 100 * time.Millisecond})
	start := time.Now()
	r := c.LookupRoute(context.Background(), &pb.LookupRouteRequest{})
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("took %v, budget 100ms", el)
	}
	if r.ReasonCode != pb.ReasonCode_NO_HINT || !strings.Contains(r.Detail, "DeadlineExceeded") {
		t.Fatalf("response %v, want client NO_HINT for DeadlineExceeded", r)
	}
}

func TestFingerprint_MatchesServerScheme(t *testing.T) {
	toks := make([]uint32, 50)
	for i := range toks {
		toks[i] = uint32(i * 7)
	}
	want, _ := fingerprint.Compute(toks, 16)
	req := &pb.LookupRouteRequest{TokenIds: []uint32{1}, PromptText: "x"}
	if err := Fingerprint(req, toks, 16); err != nil {
		t.Fatal(err)
	}
	if len(req.BlockHashes) != 3 || req.PrefixHash != want.PrefixHash || req.TokenIds != nil || req.PromptText != "" {
		t.Fatalf("req = %v, want 3 blocks, prefix %d", req, want.PrefixHash)
	}
	for i, h := range want.BlockHashes {
		if req.BlockHashes[i] != h || req.BlockTokenCounts[i] != 16 {
			t.Fatalf("block %d: %d/%d, want %d/16", i, req.BlockHashes[i], req.BlockTokenCounts[i], h)
		}
	}
	if err := Fingerprint(req, toks, 0); err == nil {
		t.Fatal("block size 0 accepted")
	}
}

// Retriable failures are retried with the same request id on another node;
// INVALID_ARGUMENT is not retried.
func TestIngest_RetriesWithStableRequestID(t *testing.T) {
	a := &fake{ingestErr: []error{status.Error(codes.Unavailable, "no leader")}}
	b := &fake{ingestErr: []error{status.Error(codes.DeadlineExceeded, "outcome unknown")}}
	c := newClient(t, Config{Addrs: []string{serve(t, a), serve(t, b)}})
	resp, err := c.Ingest(context.Background(), &pb.IngestRequest{Events: []*pb.BlockEvent{{}, {}}})
	if err != nil || resp.Accepted != 2 {
		t.Fatalf("resp=%v err=%v", resp, err)
	}
	ids := append(append([]string{}, a.ids...), b.ids...)
	if len(ids) != 3 {
		t.Fatalf("attempts = %d (%v), want 3", len(ids), ids)
	}
	for _, id := range ids {
		if id != ids[0] || len(id) != 32 {
			t.Fatalf("request ids %v: want one 32-hex id on every attempt", ids)
		}
	}
	if c.Stats().WriteRetries != 2 {
		t.Errorf("write retries = %d, want 2", c.Stats().WriteRetries)
	}

	bad := &fake{ingestErr: []error{status.Error(codes.InvalidArgument, "too many events")}}
	c2 := newClient(t, Config{Addrs: []string{serve(t, bad)}})
	if _, err := c2.Ingest(context.Background(), &pb.IngestRequest{RequestId: "mine"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("err = %v, want INVALID_ARGUMENT unretried", err)
	}
	if len(bad.ids) != 1 || bad.ids[0] != "mine" {
		t.Fatalf("attempts %v, want exactly one with the caller's id", bad.ids)
	}
}

func TestIngest_GivesUpAfterRetryBudget(t *testing.T) {
	errs := make([]error, 1000)
	for i := range errs {
		errs[i] = status.Error(codes.Unavailable, "no leader")
	}
	f := &fake{ingestErr: errs}
	c := newClient(t, Config{Addrs: []string{serve(t, f)}, WriteRetry: 300 * time.Millisecond})
	start := time.Now()
	_, err := c.Ingest(context.Background(), &pb.IngestRequest{})
	// The last failure: the node's UNAVAILABLE, or, when the budget ends
	// during an attempt (a loaded machine), that attempt's deadline.
	if code := status.Code(err); code != codes.Unavailable && code != codes.DeadlineExceeded {
		t.Fatalf("err = %v, want the last attempt's UNAVAILABLE or DEADLINE_EXCEEDED", err)
	}
	if el := time.Since(start); el < 300*time.Millisecond || el > 3*time.Second {
		t.Fatalf("gave up after %v, budget 300ms", el)
	}
}

// A request that cannot be sent (here: invalid UTF-8, which the client's
// own encoder refuses) fails open at once: no retry on another node, and
// no healthy node marked down for it.
func TestLookupRoute_BadRequestFailsOpenWithoutBlamingNodes(t *testing.T) {
	a, b := &fake{name: "a"}, &fake{name: "b"}
	c := newClient(t, Config{Addrs: []string{serve(t, a), serve(t, b)}, LookupTimeout: 2 * time.Second, FailBackoff: time.Hour})
	r := c.LookupRoute(context.Background(), &pb.LookupRouteRequest{ModelId: "m\xff\xfe"})
	if r.ReasonCode != pb.ReasonCode_NO_HINT || !strings.Contains(r.Detail, "UTF-8") {
		t.Fatalf("bad request: %v; want NO_HINT whose detail names the encoding error", r)
	}
	if st := c.Stats(); st.LookupRetries != 0 || st.FailOpen != 1 {
		t.Fatalf("stats %+v: want no retry and one fail-open", st)
	}
	for i := 0; i < 4; i++ {
		if r := c.LookupRoute(context.Background(), &pb.LookupRouteRequest{}); r.ReasonCode != pb.ReasonCode_PREFIX_MATCH {
			t.Fatalf("a good lookup after the bad one: %v (a node was marked down)", r)
		}
	}
	if a.callCount() != 2 || b.callCount() != 2 {
		t.Fatalf("calls a=%d b=%d, want 2 each (neither node skipped)", a.callCount(), b.callCount())
	}
}

// A node refusing a write for load (RESOURCE_EXHAUSTED with a RetryInfo)
// is asked again after the delay it names, with the same request id; a
// RESOURCE_EXHAUSTED without one is an ordinary refusal.
func TestIngest_WaitsTheRetryDelayOfALoadRefusal(t *testing.T) {
	busy, _ := status.New(codes.ResourceExhausted, "write not admitted").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(150 * time.Millisecond)})
	f := &fake{ingestErr: []error{busy.Err()}}
	c := newClient(t, Config{Addrs: []string{serve(t, f)}})
	start := time.Now()
	resp, err := c.Ingest(context.Background(), &pb.IngestRequest{Events: []*pb.BlockEvent{{}}})
	if err != nil || resp.Accepted != 1 {
		t.Fatalf("resp=%v err=%v, want the retry to commit", resp, err)
	}
	if el := time.Since(start); el < 150*time.Millisecond {
		t.Fatalf("retried after %v, before the 150ms the node asked for", el)
	}
	if len(f.ids) != 2 || f.ids[0] != f.ids[1] {
		t.Fatalf("attempts %v, want two with one request id", f.ids)
	}
	plain := &fake{ingestErr: []error{status.Error(codes.ResourceExhausted, "quota")}}
	c2 := newClient(t, Config{Addrs: []string{serve(t, plain)}})
	if _, err := c2.Ingest(context.Background(), &pb.IngestRequest{}); status.Code(err) != codes.ResourceExhausted || len(plain.ids) != 1 {
		t.Fatalf("err = %v after %d attempts, want RESOURCE_EXHAUSTED unretried", err, len(plain.ids))
	}
}

// With StickyWrites every write goes to the first address while it
// answers, moves to the next when it fails (the retry keeps the request
// id), and stays there afterwards.
func TestIngest_StickyWritesStayOnTheNodeThatAnswered(t *testing.T) {
	a := &fake{name: "a"}
	b := &fake{name: "b"}
	c := newClient(t, Config{Addrs: []string{serve(t, a), serve(t, b)}, StickyWrites: true})
	ingest := func(id string) {
		t.Helper()
		if _, err := c.Ingest(context.Background(), &pb.IngestRequest{RequestId: id}); err != nil {
			t.Fatalf("ingest %s: %v", id, err)
		}
	}
	for _, id := range []string{"w1", "w2", "w3"} {
		ingest(id)
	}
	if got := a.ingestIDs(); strings.Join(got, ",") != "w1,w2,w3" || len(b.ingestIDs()) != 0 {
		t.Fatalf("a got %v, b got %v; want every write on a", got, b.ingestIDs())
	}
	a.mu.Lock()
	a.ingestErr = []error{status.Error(codes.Unavailable, "down"), status.Error(codes.Unavailable, "down")}
	a.mu.Unlock()
	ingest("w4")
	ingest("w5")
	if got := b.ingestIDs(); strings.Join(got, ",") != "w4,w5" {
		t.Fatalf("b got %v, want w4 (retried after a failed) and w5", got)
	}
	if got := a.ingestIDs(); strings.Join(got, ",") != "w1,w2,w3,w4" {
		t.Fatalf("a got %v, want w1..w4 (w4 failed) and nothing after", got)
	}
}

// A cluster that hangs costs requests no lookup budget once each node
// has failed: the lookups that follow fail open without calling any node
// (the hung nodes count their calls), until a node's skip period ends and
// one lookup probes it.
func TestLookupRoute_FailsOpenAtOnceWhileEveryNodeIsSkipped(t *testing.T) {
	a, b := &fake{name: "a", delay: time.Hour}, &fake{name: "b", delay: time.Hour}
	c := newClient(t, Config{Addrs: []string{serve(t, a), serve(t, b)}, LookupTimeout: 300 * time.Millisecond, FailBackoff: time.Hour})
	// The first two lookups each spend their budget on one hung node
	// (a call that the budget ended while it dialled counts at neither).
	for i := 0; i < 2; i++ {
		if r := c.LookupRoute(context.Background(), &pb.LookupRouteRequest{}); r.ReasonCode != pb.ReasonCode_NO_HINT {
			t.Fatalf("lookup %d: %v", i, r)
		}
	}
	ca, cb := a.callCount(), b.callCount()
	if ca > 1 || cb > 1 {
		t.Fatalf("calls a=%d b=%d after two lookups, want at most one each", ca, cb)
	}
	for i := 0; i < 20; i++ {
		r := c.LookupRoute(context.Background(), &pb.LookupRouteRequest{})
		if r.ReasonCode != pb.ReasonCode_NO_HINT || !strings.Contains(r.Detail, "every node is skipped") || !strings.HasSuffix(r.Detail, "; failing open") {
			t.Fatalf("lookup %d while both nodes are skipped: %v", i, r)
		}
	}
	if a.callCount() != ca || b.callCount() != cb {
		t.Errorf("calls a=%d b=%d, were %d and %d: the skipped nodes were called again", a.callCount(), b.callCount(), ca, cb)
	}
	if st := c.Stats(); st.FailOpen != 22 || st.Lookups != 22 {
		t.Errorf("stats = %+v, want 22 fail-open of 22", st)
	}
	// The nodes answer again and their periods end: the next lookup
	// probes one, which answers, and lookups use the nodes again.
	for _, f := range []*fake{a, b} {
		f.mu.Lock()
		f.delay = 0
		f.mu.Unlock()
	}
	for _, n := range c.nodes {
		n.lookup.downUntil.Store(time.Now().UnixNano())
	}
	for i := 0; i < 4; i++ {
		if r := c.LookupRoute(context.Background(), &pb.LookupRouteRequest{}); r.ReasonCode != pb.ReasonCode_PREFIX_MATCH {
			t.Fatalf("lookup %d after the skip periods ended: %v", i, r)
		}
	}
}
