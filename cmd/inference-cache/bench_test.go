package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Off a terminal the progress is plain lines, one per tenth of the run,
// with no carriage return; the rate is measured from the first report and
// left out until a second has passed (it once read 28738213 req/s).
func TestProgress_PlainLinesOffATerminal(t *testing.T) {
	var out bytes.Buffer
	clock := time.Unix(1000, 0)
	p := newProgressAt(&out, false, func() time.Time { return clock })
	step := func(strategy string, done, total int, after time.Duration) {
		clock = clock.Add(after)
		p(strategy, done, total)
	}
	step("dynamo", 64, 640, 0)                     // 10 %: the first line, no rate yet
	step("dynamo", 100, 640, 500*time.Millisecond) // still the first tenth: nothing
	step("dynamo", 128, 640, 500*time.Millisecond) // 20 % after 1 s: 64 req/s
	step("dynamo", 640, 640, 2*time.Second)        // done: 576 more in 3 s
	step("sglang", 64, 640, 0)                     // a new strategy starts over
	want := "bench: dynamo: 64/640 requests (10%)\n" +
		"bench: dynamo: 128/640 requests (20%), 64 req/s\n" +
		"bench: dynamo: 640/640 requests (100%), 192 req/s\n" +
		"bench: sglang: 64/640 requests (10%)\n"
	if got := out.String(); got != want {
		t.Fatalf("progress:\n%s\nwant:\n%s", got, want)
	}
	if strings.ContainsRune(out.String(), '\r') {
		t.Fatal("carriage return written off a terminal")
	}
}

// A modelled run takes --live's window of the trace: --skip, --requests
// and --speedup (1 unless given), and refuses a window outside the trace.
func TestBench_ModelsTheLiveWindow(t *testing.T) {
	trace := filepath.Join("..", "..", "testdata", "mooncake", "conversation_trace.jsonl.gz")
	out, err := runCLI(t, "", "bench", "--no-progress", "--trace", trace, "--skip", "100", "--requests", "50", "--speedup", "2",
		"--strategies", "round-robin")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "conversation_trace.jsonl[100:150] at speed-up 2: 50 requests") {
		t.Fatalf("the report does not name the window:\n%s", out)
	}
	if out, err = runCLI(t, "", "bench", "--no-progress", "--trace", trace, "--requests", "50", "--strategies", "round-robin"); err != nil ||
		!strings.Contains(out, "conversation_trace.jsonl[:50]: 50 requests") {
		t.Fatalf("without --skip and --speedup the records as recorded: err %v\n%s", err, out)
	}
	refusedBy(t, []string{"bench", "--no-progress", "--trace", trace, "--strategies", "round-robin"}, []refusal{
		{[]string{"--skip", "20000"}, "--skip 20000: want 0 to 12030 (the trace has 12031 records)"},
		{[]string{"--speedup", "-1"}, "--speedup -1: want a number above 0"},
		{[]string{"--speedup", "0"}, "--speedup 0: want a number above 0"},
	})
}
