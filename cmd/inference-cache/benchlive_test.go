package main

import (
	"path/filepath"
	"testing"
)

// bench --live refuses the modelled bench's own flags and bad live
// values, naming the flag, before it starts anything.
func TestBenchLive_RefusesFlagsItDoesNotUse(t *testing.T) {
	refusedBy(t, []string{"bench", "--live"}, []refusal{
		{[]string{"--report-interval", "1s"}, "--report-interval: not used with --live"},
		{[]string{"--gateways", "9"}, "--gateways 9: --live runs 1 to 8 proxies"},
		{[]string{"--addr", "127.0.0.1:7401"}, "--addr: not used with --live"},
		{[]string{"--engines", "1"}, "--engines 1: --live needs at least 2"},
		{[]string{"--strategies", "picker,oracle"}, `--strategies "oracle"`},
		{[]string{"--speedup", "0"}, "--speedup 0"},
		{[]string{"--requests", "100", "--warmup", "100"}, "--warmup 100: leaves none"},
		{[]string{"--max-tokens", "0"}, "--max-tokens 0"},
		{[]string{"--trace", filepath.Join(t.TempDir(), "none.jsonl")}, "--trace"},
		{[]string{"--trace", filepath.Join("..", "..", "testdata", "mooncake", "conversation_trace.jsonl.gz"), "--skip", "99999"},
			"--skip 99999: want 0 to 12030 (the trace has 12031 records)"},
	})
}
