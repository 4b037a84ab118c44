// Command benchgo measures the Go SDK's side of the client benchmark
// (clients/python/bench/bench_clients.py runs it beside the Python client
// against the same cluster): fingerprint throughput in tokens per second,
// and the latency of sequential LookupTokens calls (local fingerprint plus
// one LookupRoute) through client.Client. It prints one JSON object:
//
//	{"fingerprint_tokens_per_s": …, "lookups": n, "fail_open": k,
//	 "lookup_p50_us": …, "lookup_p99_us": …}
//
// Flags: --addrs (comma-separated gRPC addresses; empty = fingerprint
// only), --lookups (count), --tokens and --block-size (the prompt),
// --first-token (its first id), --model, --tenant, --hash-scheme,
// --lookup-timeout, --fingerprint-seconds.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
	"github.com/inference-cache/inference-cache/fingerprint"
)

type result struct {
	FingerprintTokensPerS float64 `json:"fingerprint_tokens_per_s"`
	Lookups               int     `json:"lookups"`
	FailOpen              uint64  `json:"fail_open"`
	LookupP50Us           float64 `json:"lookup_p50_us"`
	LookupP99Us           float64 `json:"lookup_p99_us"`
}

func main() {
	addrs := flag.String("addrs", "", "gRPC addresses, comma-separated (empty: fingerprint only)")
	lookups := flag.Int("lookups", 2000, "sequential lookups to time")
	tokens := flag.Int("tokens", 1024, "prompt length in tokens")
	blockSize := flag.Int("block-size", 16, "tokens per block")
	first := flag.Int("first-token", 0, "first token id of the prompt (ids ascend from it)")
	model := flag.String("model", "m", "model_id of the lookups")
	tenant := flag.String("tenant", "t", "tenant_id of the lookups")
	scheme := flag.String("hash-scheme", "vllm", "hash_scheme of the lookups")
	timeout := flag.Duration("lookup-timeout", time.Second, "client LookupTimeout")
	fpSeconds := flag.Float64("fingerprint-seconds", 1, "how long to time fingerprinting")
	flag.Parse()
	if *tokens < 1 || *lookups < 1 || *blockSize < 1 || *blockSize > fingerprint.MaxBlockSize {
		fmt.Fprintln(os.Stderr, "benchgo: --tokens and --lookups must be positive, --block-size 1..4096")
		os.Exit(2)
	}
	prompt := make([]uint32, *tokens)
	for i := range prompt {
		prompt[i] = uint32(*first + i)
	}
	var res result
	buf := make([]uint64, 0, *tokens / *blockSize)
	start, n := time.Now(), 0
	for time.Since(start).Seconds() < *fpSeconds {
		for range 100 {
			buf, _ = fingerprint.AppendBlockHashes(buf[:0], prompt, *blockSize)
		}
		n += 100
	}
	res.FingerprintTokensPerS = float64(n**tokens) / time.Since(start).Seconds()

	if *addrs != "" {
		c, err := client.New(client.Config{Addrs: strings.Split(*addrs, ","), LookupTimeout: *timeout})
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchgo:", err)
			os.Exit(1)
		}
		defer c.Close()
		ctx := context.Background()
		lat := make([]time.Duration, 0, *lookups)
		for i := 0; i < *lookups+50; i++ {
			req := &pb.LookupRouteRequest{HashScheme: *scheme, ModelId: *model, TenantId: *tenant}
			t0 := time.Now()
			c.LookupTokens(ctx, req, prompt, *blockSize)
			if i >= 50 { // the first 50 warm the connections
				lat = append(lat, time.Since(t0))
			}
		}
		slices.Sort(lat)
		res.Lookups = len(lat)
		res.FailOpen = c.Stats().FailOpen
		res.LookupP50Us = float64(lat[len(lat)/2]) / 1e3
		res.LookupP99Us = float64(lat[len(lat)*99/100]) / 1e3
	}
	_ = json.NewEncoder(os.Stdout).Encode(res)
}
