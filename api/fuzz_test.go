package api

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/policy"
)

// FuzzValidateRequest decodes arbitrary bytes as each request message and
// runs the validators (LookupRoute's limits and the full handler against a
// real index, EventsFromPB, StatsFromPB, PolicyFromPB). No input may panic,
// LookupRoute never errors, and rejections point at real entries in order.
func FuzzValidateRequest(f *testing.F) {
	seeds := validatorSeeds()
	for i, m := range seeds {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(i), b)
	}
	pol := policy.Default()
	ix := index.New(pol)
	s := NewService(Config{Backend: isoNode{ix}})
	s.Ingest(context.Background(), &pb.IngestRequest{Events: []*pb.BlockEvent{stored(), with(func(e *pb.BlockEvent) { e.ObservedAtMs = 0 })}})
	f.Fuzz(func(t *testing.T, kind uint8, data []byte) {
		fuzzOne(t, s, &pol, kind, data)
	})
}

func validatorSeeds() []proto.Message {
	return []proto.Message{
		&pb.LookupRouteRequest{HashScheme: "vllm", ModelId: "m", TenantId: "t", TokenIds: seq(40)},
		&pb.LookupRouteRequest{HashScheme: "vllm", ModelId: "m", BlockHashes: []uint64{1, 2}, BlockTokenCounts: []uint32{16, 0}, PrefixHash: 9, MaxReplicas: 65},
		&pb.IngestRequest{Events: []*pb.BlockEvent{stored(), {Kind: pb.BlockEvent_CLEARED, ReplicaId: "r"}, {Kind: 1, TokenIds: seq(33), BlockSize: 16, HashScheme: "s", ModelId: "m", ReplicaId: "r", PrefixTokensBefore: math.MaxUint32}}},
		&pb.ReportReplicaStatsRequest{Stats: []*pb.ReplicaStats{goodStats(), {ReplicaId: "r", Pressure: math.NaN()}}},
		PolicyToPB(policy.Default()),
	}
}

func fuzzOne(t *testing.T, s *Service, pol *policy.Policy, kind uint8, data []byte) {
	switch kind % 5 {
	case 0, 1:
		var req pb.LookupRouteRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		checkLookup(&req)
		r, err := s.LookupRoute(context.Background(), &req)
		if err != nil || r == nil {
			t.Fatalf("LookupRoute failed closed: %v", err)
		}
	case 2:
		var req pb.IngestRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		evs, rej, err := EventsFromPB(&req, pol, testNow)
		checkRejections(t, len(req.GetEvents()), len(evs), rej, err)
	case 3:
		var req pb.ReportReplicaStatsRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		sts, rej, err := StatsFromPB(&req, testNow)
		checkRejections(t, len(req.GetStats()), len(sts), rej, err)
	case 4:
		var p pb.CachePolicy
		if proto.Unmarshal(data, &p) != nil {
			return
		}
		if got, err := PolicyFromPB(&p); err == nil {
			if verr := got.Validate(); verr != nil {
				t.Fatalf("PolicyFromPB accepted a policy that does not validate: %v", verr)
			}
		}
	}
}

func checkRejections(t *testing.T, n, valid int, rej []*pb.Rejection, err error) {
	t.Helper()
	if err != nil {
		if valid != 0 || rej != nil {
			t.Fatalf("refused whole but returned %d entries, %d rejections", valid, len(rej))
		}
		return
	}
	if valid+len(rej) != n {
		t.Fatalf("%d entries: %d valid + %d rejected", n, valid, len(rej))
	}
	last := -1
	for _, r := range rej {
		if int(r.EventIndex) <= last || int(r.EventIndex) >= n || r.Reason == "" {
			t.Fatalf("rejection %v out of order, out of range or without reason", r)
		}
		last = int(r.EventIndex)
	}
}

// TestFuzzSeeds_WriteValidatorCorpus writes testdata/fuzz/FuzzValidateRequest
// when FUZZ_WRITE_SEEDS is set.
func TestFuzzSeeds_WriteValidatorCorpus(t *testing.T) {
	if os.Getenv("FUZZ_WRITE_SEEDS") == "" {
		t.Skip("set FUZZ_WRITE_SEEDS=1 to rewrite testdata/fuzz/FuzzValidateRequest")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzValidateRequest")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, m := range validatorSeeds() {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		body := "go test fuzz v1\nbyte(" + strconv.QuoteRune(rune(i)) + ")\n[]byte(" + strconv.Quote(string(b)) + ")\n"
		if err := os.WriteFile(filepath.Join(dir, "seed-"+strconv.Itoa(i)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
