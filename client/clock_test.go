package client

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/api"
	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/internal/clustertest"
	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/internal/syncbuf"
	"github.com/inference-cache/inference-cache/raftnode"
)

// serveReal starts a one-node cluster behind the real API server on
// loopback and returns its gRPC address once the node serves.
func serveReal(t *testing.T) string {
	t.Helper()
	c := clustertest.New(t, 1, func(_ int, cfg *raftnode.Config) { cfg.ExpireInterval = -1 })
	c.StartAll()
	c.WaitLeader(15 * time.Second)
	n := c.Nodes[0].Node
	srv := api.NewServer(api.ServerConfig{Node: n, Logger: slog.New(slog.DiscardHandler)})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.GRPC.Serve(lis)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	poll.Eventually(t, 10*time.Second, 10*time.Millisecond, func() (bool, string) {
		return n.Serving(), fmt.Sprintf("one-node cluster not Serving: read state %+v", n.ReadState())
	})
	return lis.Addr().String()
}

// Events stamped 10 minutes ahead of the server's clock come back as an
// answer (no error, nothing retried), are counted in
// Stats.IngestRejectedAheadOfClock, and are logged with the skew once: a
// second such batch within ClockWarnInterval adds to the count, not to
// the log.
func TestIngest_EventsAheadOfTheServerClockAreCountedAndWarnedOnce(t *testing.T) {
	addr := serveReal(t)
	var logs syncbuf.Buffer
	c := newClient(t, Config{Addrs: []string{addr}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	at := time.Now().Add(10 * time.Minute).UnixMilli()
	req := func() *pb.IngestRequest {
		return &pb.IngestRequest{Events: []*pb.BlockEvent{
			{Kind: pb.BlockEvent_STORED, ReplicaId: "r", HashScheme: "vllm", ModelId: "m", BlockHashes: []uint64{1}, ObservedAtMs: at},
			{Kind: pb.BlockEvent_STORED, ReplicaId: "r", HashScheme: "vllm", ModelId: "m", BlockHashes: []uint64{2}, ObservedAtMs: at},
		}}
	}
	for i := 1; i <= 2; i++ {
		resp, err := c.Ingest(context.Background(), req())
		if err != nil {
			t.Fatalf("ingest %d: %v; clock trouble must not be an error", i, err)
		}
		if resp.GetAccepted() != 0 || resp.GetRejectedAheadOfClock() != 2 || resp.GetServerTimeMs() == 0 {
			t.Fatalf("ingest %d: %v", i, resp)
		}
		if got := c.Stats().IngestRejectedAheadOfClock; got != uint64(2*i) {
			t.Fatalf("after ingest %d: IngestRejectedAheadOfClock %d, want %d", i, got, 2*i)
		}
	}
	if st := c.Stats(); st.WriteRetries != 0 {
		t.Errorf("%d write retries; a clock rejection is not retried", st.WriteRetries)
	}
	out := logs.String()
	if n := strings.Count(out, "observed_at_ms ahead of the server clock"); n != 1 {
		t.Fatalf("%d clock warnings, want 1 within ClockWarnInterval:\n%s", n, out)
	}
	// The skew is named: 10 minutes, less the moments the calls took.
	if !strings.Contains(out, "events_ahead_by=9m59") && !strings.Contains(out, "events_ahead_by=10m0") {
		t.Fatalf("warning does not name a skew of about 10 minutes:\n%s", out)
	}
}

func TestMillisDuration_Saturates(t *testing.T) {
	for _, tc := range []struct {
		ms   int64
		want time.Duration
	}{
		{600_000, 10 * time.Minute},
		{-600_000, -10 * time.Minute},
		{32503680000000 - 1796147684446, math.MaxInt64}, // a stamp in the year 3000
		{math.MinInt64, math.MinInt64},
	} {
		if got := MillisDuration(tc.ms); got != tc.want {
			t.Errorf("MillisDuration(%d) = %v, want %v", tc.ms, got, tc.want)
		}
	}
}
