package epp

import (
	"context"
	"net"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/gateway"
	"github.com/inference-cache/inference-cache/openai"
	"github.com/inference-cache/inference-cache/prompt"
)

// fakeLookup answers every lookup with resp (nil = no hint), or only
// when ctx ends when wait is set (a cluster slower than the budget).
type fakeLookup struct {
	mu   sync.Mutex
	resp *pb.LookupRouteResponse
	wait bool
	n    int
	last *pb.LookupRouteRequest
}

func (f *fakeLookup) LookupRoute(ctx context.Context, req *pb.LookupRouteRequest) *pb.LookupRouteResponse {
	f.mu.Lock()
	f.n++
	f.last = req
	resp, wait := f.resp, f.wait
	f.mu.Unlock()
	if wait {
		<-ctx.Done()
		return &pb.LookupRouteResponse{Detail: "client: DeadlineExceeded; failing open"}
	}
	return resp
}

func (f *fakeLookup) calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

// fakePrompts gives every request 70 token ids (4 full blocks of 16).
type fakePrompts struct{}

func (fakePrompts) Tokens(_ context.Context, req *openai.Request) (prompt.Prompt, error) {
	ids := make([]uint32, 70)
	for i := range ids {
		ids[i] = uint32(100 + i)
	}
	return prompt.Prompt{Model: req.Model, TokenIDs: ids}, nil
}

// prefixMatch is a server's hint that replica holds tokens of the prompt.
func prefixMatch(replica string, tokens uint32) *pb.LookupRouteResponse {
	return &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_PREFIX_MATCH, ServedBy: "n1",
		Replicas: []*pb.ReplicaHint{{ReplicaId: replica, MatchedTokens: tokens, MatchedBlocks: tokens / 16}}}
}

// The pool of the tests: three endpoints, one of them serving only
// "other".
var pool = []Endpoint{
	{Address: "10.0.0.1:8000", ReplicaID: "a"},
	{Address: "10.0.0.2:8000", ReplicaID: "b"},
	{Address: "10.0.0.3:8000", ReplicaID: "c"},
	{Address: "10.0.0.4:8000", ReplicaID: "d", Model: "other"},
}

// rig is a picker on loopback over a fake lookup.
type rig struct {
	lk   *fakeLookup
	gw   *gateway.Gateway
	t    *Table
	m    *Metrics
	reg  *prometheus.Registry
	conn *grpc.ClientConn
}

func newRig(t *testing.T, lk *fakeLookup, opts Options) *rig {
	t.Helper()
	gw, err := gateway.New(gateway.Config{Prompts: fakePrompts{}, Lookup: lk})
	if err != nil {
		t.Fatal(err)
	}
	r := newRigOpts(t, gw, opts)
	r.lk = lk
	return r
}

// newRigWith is a rig over gw with default options.
func newRigWith(tb testing.TB, gw *gateway.Gateway) *rig { return newRigOpts(tb, gw, Options{}) }

func newRigOpts(t testing.TB, gw *gateway.Gateway, opts Options) *rig {
	t.Helper()
	tbl := &Table{}
	if err := tbl.Set(pool); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	opts.Gateway, opts.Endpoints, opts.Metrics = gw, tbl, NewMetrics(reg, "pool", tbl)
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(s.GRPCOptions()...)
	s.Register(g)
	NewHealth(tbl).Register(g)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &rig{gw: gw, t: tbl, m: opts.Metrics, reg: reg, conn: conn}
}
