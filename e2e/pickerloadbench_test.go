package e2e

import (
	"flag"
	"fmt"
	"slices"
	"testing"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
)

var pickerLoadBench = flag.Bool("picker-load-bench", false, "run TestPickerLoadFreshness: how soon a picker's load change is seen in lookups on another node, over real processes")

// samplesText is "median / p90 / max of n" of ds in ms.
func samplesText(ds []time.Duration) string {
	slices.Sort(ds)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return fmt.Sprintf("median %.1f ms, p90 %.1f ms, max %.1f ms of %d", ms(ds[len(ds)/2]), ms(ds[len(ds)*9/10]), ms(ds[len(ds)-1]), len(ds))
}

// The freshness of shared load at the nodes (contract §5.11), measured
// two ways on a real 3-node cluster: the SDK's reporter at its default
// interval (a change in the picker's in flight, StartOn, until a lookup
// on another node carries it: the wait for the next report plus the
// report's way through two nodes), and one report alone (sent to n1 until
// seen on n2: the fan-out hop). Lookups poll n2 every millisecond.
func TestPickerLoadFreshness(t *testing.T) {
	if !*pickerLoadBench {
		t.Skip("a benchmark: run with -picker-load-bench")
	}
	c := startCluster(t, 3)
	n1, n2 := c.procs[0], c.procs[1]
	reportStats(t, n1)
	// seen waits for a lookup on n2 to carry tokens and returns the time
	// since start.
	seen := func(start time.Time, tokens uint64) time.Duration {
		for time.Since(start) < 5*time.Second {
			if l, _ := othersOn(n2, "gw-b"); l != nil && l.OthersPrefillTokens == tokens {
				return time.Since(start)
			}
			time.Sleep(time.Millisecond)
		}
		t.Fatalf("load of %d tokens not seen on n2 within 5 s", tokens)
		return 0
	}
	cl, err := client.New(client.Config{Addrs: []string{n1.grpc}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	p := client.NewPicker(client.DefaultPickerConfig())
	s, err := client.StartLoadShare(p, cl, client.LoadShareConfig{PickerID: "gw-a"})
	if err != nil {
		t.Fatal(err)
	}
	var e2e []time.Duration
	total := uint64(0)
	for i := range 60 {
		tokens := 1000 + uint64(i)
		total += tokens
		start := time.Now()
		p.StartOn("r1", int(tokens))
		e2e = append(e2e, seen(start, total))
		// Seen just after a report arrived: a pause of 0 to 49 ms puts
		// the next change anywhere in the report interval.
		time.Sleep(time.Duration(i*17%50) * time.Millisecond)
	}
	s.Stop()
	t.Logf("picker load change → seen on another node, SDK at %v: %s", client.DefaultLoadShareInterval, samplesText(e2e))

	var hop []time.Duration
	for i := range 60 {
		tokens := 50_000 + uint64(i)
		ctx, cancel := ctxT(2 * time.Second)
		start := time.Now()
		if _, err := n1.ic.ReportPickerLoad(ctx, &pb.ReportPickerLoadRequest{PickerId: "gw-c", Sequence: uint64(i + 1), IntervalMs: 1000,
			Loads: []*pb.PickerReplicaLoad{{ReplicaId: "r1", PrefillingRequests: 1, PrefillTokens: tokens, RunningRequests: 1}}}); err != nil {
			t.Fatal(err)
		}
		cancel()
		hop = append(hop, seen(start, tokens))
	}
	t.Logf("one report sent to n1 → seen on n2: %s", samplesText(hop))
}
