package observe

import (
	"context"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// sinkNode is a cluster node for GRPCSink: it answers Ingest with err
// (nil = accepted) and records the request ids it saw.
type sinkNode struct {
	pb.UnimplementedInferenceCacheServer
	mu  sync.Mutex
	err error
	ids []string
}

func (n *sinkNode) Ingest(_ context.Context, req *pb.IngestRequest) (*pb.IngestResponse, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.ids = append(n.ids, req.GetRequestId())
	if n.err != nil {
		return nil, n.err
	}
	return &pb.IngestResponse{Accepted: uint32(len(req.GetEvents()))}, nil
}

func (n *sinkNode) seen() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.ids...)
}

func serveSinkNode(t *testing.T, n *sinkNode) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	pb.RegisterInferenceCacheServer(s, n)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

// The sink writes to the first address while it answers; a node that
// fails costs one retry (same request id) on the next, where later
// writes stay; a refused request comes back with its code for the
// Forwarder to drop, tried on one node only.
func TestGRPCSink_FirstAddressUntilItFailsThenStaysOnTheNext(t *testing.T) {
	a, b := &sinkNode{}, &sinkNode{}
	s, err := NewGRPCSink([]string{serveSinkNode(t, a), serveSinkNode(t, b)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ingest := func(id string) error {
		_, err := s.Ingest(t.Context(), &pb.IngestRequest{RequestId: id, Events: []*pb.BlockEvent{{}}})
		return err
	}
	if err := ingest("r1"); err != nil || len(a.seen()) != 1 || len(b.seen()) != 0 {
		t.Fatalf("r1: %v; a saw %v, b saw %v; want a only", err, a.seen(), b.seen())
	}
	a.mu.Lock()
	a.err = status.Error(codes.Unavailable, "node down")
	a.mu.Unlock()
	if err := ingest("r2"); err != nil {
		t.Fatalf("r2 with a down: %v", err)
	}
	if err := ingest("r3"); err != nil {
		t.Fatalf("r3: %v", err)
	}
	if got := b.seen(); len(got) != 2 || got[0] != "r2" || got[1] != "r3" {
		t.Fatalf("b saw %v, want [r2 r3]", got)
	}
	if got := a.seen(); len(got) != 2 || got[1] != "r2" {
		t.Fatalf("a saw %v, want [r1 r2] (r2 failed there, nothing after)", got)
	}
	b.mu.Lock()
	b.err = status.Error(codes.InvalidArgument, "too many events")
	b.mu.Unlock()
	err = ingest("r4")
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("refused request: %v, want INVALID_ARGUMENT", err)
	}
	if len(a.seen()) != 2 || len(b.seen()) != 3 {
		t.Fatalf("refused request tried on a %d, b %d times; want b once", len(a.seen())-2, len(b.seen())-2)
	}
}

// Without addresses there is no sink.
func TestGRPCSink_NeedsAnAddress(t *testing.T) {
	if _, err := NewGRPCSink(nil); err != ErrNoAddress {
		t.Fatalf("err %v, want ErrNoAddress", err)
	}
}
