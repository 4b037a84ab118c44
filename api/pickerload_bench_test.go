package api

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/pickerload"
	"github.com/inference-cache/inference-cache/raftnode/forwardpb"
)

// encodingShare is a PickerLoad whose fan-out encodes the report for each
// of peers as raftnode's sender does (one ShareLoadRequest per peer), so
// the benchmark counts the handler, the store and the fan-out encoding.
type encodingShare struct {
	store *pickerload.Store
	peers int
	bytes int
}

func (e *encodingShare) SharePickerLoad(req *pb.ReportPickerLoadRequest) (pickerload.Outcome, error) {
	o, err := e.store.Put(pickerload.FromPB(req))
	if err != nil || o != pickerload.Stored {
		return o, err
	}
	for range e.peers {
		b, err := proto.Marshal(&forwardpb.ShareLoadRequest{FromNode: "n1", Reports: []*pb.ReportPickerLoadRequest{req}})
		if err != nil {
			return o, err
		}
		e.bytes = len(b)
	}
	return o, nil
}
func (e *encodingShare) PickerLoadView() pickerload.View { return e.store.At() }

// benchReport is one picker's report on n replicas named as the
// subscriber names vLLM replicas, with loads of a busy fleet.
func benchReport(picker string, n int, seq uint64) *pb.ReportPickerLoadRequest {
	r := &pb.ReportPickerLoadRequest{PickerId: picker, Sequence: seq, IntervalMs: 50}
	for i := range n {
		r.Loads = append(r.Loads, &pb.PickerReplicaLoad{ReplicaId: fmt.Sprintf("vllm-qwen3-%02d", i), PrefillingRequests: 3, PrefillTokens: 12_345, RunningRequests: 17})
	}
	return r
}

// BenchmarkReportPickerLoad is the cost of one report on the receiving
// node of a 3-node cluster: the handler, the store's replacement of the
// picker's previous report among 8 pickers, and its encoding for the 2
// peers. report-bytes is the request's wire size (what a picker sends
// every interval), share-bytes one ShareLoad call's.
func BenchmarkReportPickerLoad(b *testing.B) {
	for _, n := range []int{8, 64} {
		b.Run(fmt.Sprintf("replicas=%d", n), func(b *testing.B) {
			e := &encodingShare{store: pickerload.New(pickerload.Config{}), peers: 2}
			s := NewService(Config{Backend: &fakeNode{lookup: match}, PickerLoad: e})
			for p := range 7 {
				if _, err := s.ReportPickerLoad(context.Background(), benchReport(fmt.Sprintf("gw-%d", p), n, 1)); err != nil {
					b.Fatal(err)
				}
			}
			reqs := make([]*pb.ReportPickerLoadRequest, 64)
			for i := range reqs {
				reqs[i] = benchReport("gw-me", n, 0)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				r := reqs[i%len(reqs)]
				r.Sequence = uint64(i + 1)
				if _, err := s.ReportPickerLoad(context.Background(), r); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(proto.Size(reqs[0])), "report-bytes")
			b.ReportMetric(float64(e.bytes), "share-bytes")
		})
	}
}

// BenchmarkOthersLoad is what include_load adds to a lookup: the sums
// over the other 7 of 8 pickers for each of n replicas.
func BenchmarkOthersLoad(b *testing.B) {
	for _, n := range []int{8, 64} {
		b.Run(fmt.Sprintf("replicas=%d", n), func(b *testing.B) {
			st := pickerload.New(pickerload.Config{})
			var ids []string
			for p := range 8 {
				if _, err := st.Put(pickerload.FromPB(benchReport(fmt.Sprintf("gw-%d", p), n, 1))); err != nil {
					b.Fatal(err)
				}
			}
			for _, l := range benchReport("x", n, 1).Loads {
				ids = append(ids, l.ReplicaId)
			}
			b.ReportAllocs()
			b.ResetTimer()
			var sink uint64
			for i := 0; i < b.N; i++ {
				v := st.At()
				for _, id := range ids {
					sink += v.Others("gw-0", id).PrefillTokens
				}
			}
			if sink == 0 {
				b.Fatal("no load summed")
			}
		})
	}
}
