package api

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/policy"
	"github.com/inference-cache/inference-cache/raftnode"
)

// heldNode is a Backend whose Ingest commits only when the test releases
// it, so writes stay in flight.
type heldNode struct {
	fakeNode
	entered chan struct{}
	release chan struct{}
}

func (h *heldNode) Ingest(ctx context.Context, id string, evs []index.BlockEvent) (raftnode.WriteResult, error) {
	h.entered <- struct{}{}
	select {
	case <-h.release:
	case <-ctx.Done():
		return raftnode.WriteResult{}, ctx.Err()
	}
	return raftnode.WriteResult{Index: 43}, nil
}

func fromConn(addr string) context.Context {
	a, _ := net.ResolveTCPAddr("tcp", addr)
	return peer.NewContext(context.Background(), &peer.Peer{Addr: a})
}

func oneEvent() *pb.IngestRequest {
	return &pb.IngestRequest{Events: []*pb.BlockEvent{{Kind: pb.BlockEvent_STORED, ReplicaId: "r", HashScheme: "vllm", ModelId: "m",
		TokenIds: make([]uint32, 16), BlockSize: 16}}}
}

// One connection holding its whole share of in-flight writes is refused
// RESOURCE_EXHAUSTED with a retry delay and the bound named; another
// connection is still admitted; released room admits the next write.
func TestAdmission_OneConnectionCannotTakeTheNodesWrites(t *testing.T) {
	h := &heldNode{entered: make(chan struct{}, 16), release: make(chan struct{})}
	h.pol = policy.Default()
	s := NewService(Config{Backend: h, Admission: AdmissionLimits{MaxWrites: 8, MaxConnWrites: 3}})
	flood := fromConn("10.0.0.1:5000")
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Ingest(flood, oneEvent()); err != nil {
				t.Errorf("admitted write: %v", err)
			}
		}()
		<-h.entered
	}
	_, err := s.Ingest(flood, oneEvent())
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "this connection has 3 writes in flight (limit 3 per connection)") {
		t.Fatalf("fourth write on the flooding connection: %v; want RESOURCE_EXHAUSTED naming the per-connection limit", err)
	}
	var delay time.Duration
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			delay = ri.GetRetryDelay().AsDuration()
		}
	}
	if delay != AdmissionRetryAfter {
		t.Fatalf("refusal carries retry delay %v, want %v", delay, AdmissionRetryAfter)
	}
	// Another connection gets in while the flood holds its share.
	other := make(chan error, 1)
	go func() { _, err := s.Ingest(fromConn("10.0.0.2:6000"), oneEvent()); other <- err }()
	<-h.entered
	if w, _ := s.admit.inflight(); w != 4 {
		t.Fatalf("%d writes in flight, want 4 (3 flood + 1 other)", w)
	}
	// A waiting write on the flooding connection is admitted as soon as
	// one of its writes commits.
	waiting := make(chan error, 1)
	go func() { _, err := s.Ingest(flood, oneEvent()); waiting <- err }()
	h.release <- struct{}{} // one of the four commits
	<-h.entered             // the waiting one is now in
	close(h.release)
	wg.Wait()
	if err := <-other; err != nil {
		t.Fatalf("other connection's write: %v", err)
	}
	if err := <-waiting; err != nil {
		t.Fatalf("write admitted after room was freed: %v", err)
	}
	if w, b := s.admit.inflight(); w != 0 || b != 0 {
		t.Fatalf("after every write: %d writes, %d bytes in flight; want 0, 0", w, b)
	}
}

// The node-wide byte bound refuses a write that would exceed it; a write
// larger than the bound counts as the bound, so it gets in once the node
// has drained instead of never.
func TestAdmission_ByteBoundAndTheLoneLargeRequest(t *testing.T) {
	a := newAdmission(AdmissionLimits{MaxWrites: 10, MaxBytes: 100, MaxConnBytes: 100})
	r1, err := a.acquire(fromConn("10.0.0.1:1"), 80)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(fromConn("10.0.0.2:1"), 50*time.Millisecond)
	defer cancel()
	if _, err := a.acquire(ctx, 150); err == nil {
		t.Fatal("a second connection's write past the byte bound was admitted")
	}
	r1()
	r2, err := a.acquire(fromConn("10.0.0.2:1"), 150)
	if err != nil {
		t.Fatalf("a write larger than the bound on a drained node: %v", err)
	}
	if w, b := a.inflight(); w != 1 || b != 100 {
		t.Fatalf("in flight %d writes, %d bytes; want 1 write counted as the 100-byte bound", w, b)
	}
	r2()
	_, err = a.acquire(fromConn("10.0.0.3:1"), 10) // still admitted after releases
	if err != nil {
		t.Fatal(err)
	}
}
