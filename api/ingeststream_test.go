package api

import (
	"context"
	"fmt"
	"io"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/raftnode"
)

// fakeIngestStream hands IngestStream its requests in order, setting the
// backend's error for each before it does (all on the handler's
// goroutine), and records the responses.
type fakeIngestStream struct {
	grpc.ServerStream
	f    *fakeNode
	reqs []*pb.IngestRequest
	errs []error
	sent []*pb.IngestResponse
}

func (s *fakeIngestStream) Context() context.Context { return context.Background() }

func (s *fakeIngestStream) Recv() (*pb.IngestRequest, error) {
	if len(s.reqs) == 0 {
		return nil, io.EOF
	}
	r := s.reqs[0]
	s.f.err = s.errs[0]
	s.reqs, s.errs = s.reqs[1:], s.errs[1:]
	return r, nil
}

func (s *fakeIngestStream) Send(r *pb.IngestResponse) error {
	s.sent = append(s.sent, r)
	return nil
}

// IngestStream tells a request refused whole from a failed commit by the
// error's type, whatever its words: a refusal of any wording (a limit, or
// the state machine's) is answered as one rejection and the stream goes
// on; a failed commit ends the stream with its code.
func TestIngestStream_RefusalIsTypedNotParsed(t *testing.T) {
	f := &fakeNode{lookup: match}
	s := newSvc(f, nil)
	good := &pb.IngestRequest{Events: []*pb.BlockEvent{{Kind: pb.BlockEvent_STORED, ReplicaId: "r", HashScheme: "vllm", ModelId: "m", BlockHashes: []uint64{1}}}}
	tooMany := &pb.IngestRequest{Events: make([]*pb.BlockEvent, MaxEventsPerRequest+1)}
	for i := range tooMany.Events {
		tooMany.Events[i] = good.Events[0]
	}
	refusedByApply := fmt.Errorf("%w: words no test has seen before", raftnode.ErrRejected)
	st := &fakeIngestStream{f: f,
		reqs: []*pb.IngestRequest{good, tooMany, good, good, good},
		errs: []error{nil, nil, refusedByApply, nil, fmt.Errorf("%w: gave up", raftnode.ErrTimeout)}}
	err := s.IngestStream(st)
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("stream ended with %v, want DEADLINE_EXCEEDED from the failed commit", err)
	}
	want := []struct {
		accepted uint32
		reason   string // of the one rejection; "" = none
	}{
		{1, ""},
		{0, WholeRequestRefused + "request refused: at most 4096 events per request (MaxEventsPerRequest): 4097 events"},
		{0, WholeRequestRefused + "raftnode: command rejected: words no test has seen before"},
		{1, ""},
	}
	if len(st.sent) != len(want) {
		t.Fatalf("%d responses, want %d: %v", len(st.sent), len(want), st.sent)
	}
	for i, w := range want {
		r := st.sent[i]
		got := ""
		if len(r.Rejected) == 1 {
			got = r.Rejected[0].Reason
		}
		if r.Accepted != w.accepted || got != w.reason || len(r.Rejected) > 1 {
			t.Errorf("response %d: accepted %d, rejections %v; want %d and %q", i, r.Accepted, r.Rejected, w.accepted, w.reason)
		}
		if w.reason != "" && r.AppliedIndex != 42 {
			t.Errorf("response %d: refusal at applied index %d, want the node's 42", i, r.AppliedIndex)
		}
	}
}
