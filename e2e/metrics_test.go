package e2e

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// checkParallelMetrics ingests one batch large enough for the parallel
// apply (≥ 1,024 blocks, into a partition that exists) and reads every
// node's /metrics: each applied it on several workers and counts the log
// bytes it appended.
func checkParallelMetrics(t *testing.T, c *cluster) {
	ctx, cancel := ctxT(20 * time.Second)
	defer cancel()
	if _, err := c.procs[0].ic.Ingest(ctx, &pb.IngestRequest{Events: []*pb.BlockEvent{stored("r-par-0", "t-par", toks(300000, 16))}}); err != nil {
		t.Fatal(err)
	}
	var big []*pb.BlockEvent
	for i := 0; i < 160; i++ { // 160 events × 8 blocks
		big = append(big, stored(fmt.Sprintf("r-par-%d", i%4), "t-par", toks(400000+1000*i, 128)))
	}
	if r, err := c.procs[0].ic.Ingest(ctx, &pb.IngestRequest{Events: big}); err != nil || r.Accepted != 160 {
		t.Fatalf("large ingest: %v %v", r, err)
	}
	c.waitSameDigest(10*time.Second, c.procs...)
	for _, p := range c.procs {
		resp, err := http.Get("http://" + p.http + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, name := range []string{"inferencecache_apply_parallel_batches_total", "inferencecache_raft_log_appended_bytes_total"} {
			m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindSubmatch(body)
			if m == nil {
				t.Fatalf("%s: no %s in /metrics", p.id, name)
			}
			if v, err := strconv.ParseFloat(string(m[1]), 64); err != nil || v < 1 {
				t.Errorf("%s: %s = %s, want ≥ 1", p.id, name, m[1])
			}
		}
	}
}
