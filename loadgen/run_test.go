package loadgen

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/bench"
)

// streamHandler answers like the proxy in front of vLLM: the routing
// headers, a role chunk, a pause of delay, two content chunks, the usage
// chunk and [DONE]. It records the bodies it got.
type streamHandler struct {
	delay  time.Duration
	mu     sync.Mutex
	bodies []chatBody
}

func (h *streamHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var b chatBody
	if r.URL.Path != "/v1/chat/completions" || json.NewDecoder(r.Body).Decode(&b) != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	h.bodies = append(h.bodies, b)
	h.mu.Unlock()
	w.Header().Set(HeaderReplica, "sim-1")
	w.Header().Set(HeaderReason, "PREFIX_MATCH")
	w.Header().Set(HeaderMatchedTokens, "512")
	w.Header().Set("Content-Type", "text/event-stream")
	f := w.(http.Flusher)
	fmt.Fprint(w, `data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`+"\n\n")
	f.Flush()
	time.Sleep(h.delay)
	fmt.Fprint(w, `data: {"choices":[{"index":0,"delta":{"content":" tok"}}]}`+"\n\n")
	fmt.Fprint(w, `data: {"choices":[{"index":0,"delta":{"content":" tok"},"finish_reason":"length"}]}`+"\n\n")
	fmt.Fprint(w, `data: {"choices":[],"usage":{"prompt_tokens":1030,"total_tokens":1032,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":512}}}`+"\n\n")
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func records(ts ...int64) []bench.Request {
	rs := make([]bench.Request, len(ts))
	for i, t := range ts {
		rs[i] = bench.Request{Timestamp: t, InputLength: 1024 + i, OutputLength: 500, HashIDs: []uint64{0, uint64(i + 1), uint64(i + 100)}}
	}
	return rs
}

// A streamed request is measured at the client: TTFT at the first
// content (not vLLM's empty role chunk), E2E at [DONE], the proxy's
// headers and the usage chunk's counts; the body is the record's prompt
// text with max_tokens capped.
func TestReplay_MeasuresAStreamedRequest(t *testing.T) {
	h := &streamHandler{delay: 50 * time.Millisecond}
	srv := httptest.NewServer(h)
	defer srv.Close()
	recs := records(0)
	run, err := Replay(context.Background(), recs, Config{Target: srv.URL, Model: "qwen3", MaxTokens: 32})
	if err != nil {
		t.Fatal(err)
	}
	if len(run.Results) != 1 {
		t.Fatalf("%d results, want 1", len(run.Results))
	}
	r := run.Results[0]
	if r.Failed() {
		t.Fatalf("failed: %s %s", r.ErrKind, r.Err)
	}
	if r.TTFTMs < 50 || r.E2EMs < r.TTFTMs {
		t.Errorf("TTFT %.1f ms, E2E %.1f ms: want TTFT ≥ the server's 50 ms pause before the first content and E2E ≥ TTFT", r.TTFTMs, r.E2EMs)
	}
	want := Result{Status: 200, Replica: "sim-1", Reason: "PREFIX_MATCH", MatchedTokens: 512, PromptTokens: 1030, CachedTokens: 512, OutputTokens: 2, OutputChunks: 2, TraceInputLength: 1024}
	got := r
	got.DueMs, got.StartMs, got.TTFTMs, got.E2EMs = 0, 0, 0, 0
	if got != want {
		t.Errorf("result %+v\nwant   %+v", got, want)
	}
	b := h.bodies[0]
	if b.Model != "qwen3" || len(b.Messages) != 1 || b.Messages[0].Role != "user" || b.Messages[0].Content != PromptText(&recs[0]) ||
		b.MaxTokens != 32 || !b.Stream || !b.StreamOptions.IncludeUsage {
		t.Errorf("request body: model %q, %d messages, max_tokens %d, stream %v, include_usage %v; want qwen3, the record's prompt as one user message, 32 (output_length 500 capped), streamed with usage",
			b.Model, len(b.Messages), b.MaxTokens, b.Stream, b.StreamOptions.IncludeUsage)
	}
}

// Each way a request can fail is reported with its kind, and the replay
// goes on.
func TestReplay_ReportsEachFailureKind(t *testing.T) {
	refused := httptest.NewServer(http.NotFoundHandler())
	refusedURL := refused.URL
	refused.Close()
	unavailable := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"error":{"message":"no backend serves model qwen3","type":"ServiceUnavailableError","param":null,"code":503}}`)
	}))
	defer unavailable.Close()
	cut := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, `data: {"choices":[{"index":0,"delta":{"content":" tok"}}]}`+"\n\n")
		w.(http.Flusher).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer cut.Close()
	errEvent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, `data: {"error":{"message":"engine overloaded","type":"InternalServerError","param":null,"code":500}}`+"\n\n")
	}))
	defer errEvent.Close()
	hang := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-hang }))
	defer slow.Close()
	defer close(hang)

	for _, c := range []struct {
		target, kind, in string
		timeout          time.Duration
	}{
		{refusedURL, ErrConnect, "refused", 0},
		{unavailable.URL, ErrStatus, "HTTP 503: no backend serves model qwen3", 0},
		{cut.URL, ErrStream, "", 0},
		{errEvent.URL, ErrBadReply, "engine overloaded", 0},
		{slow.URL, ErrTimeout, "", 100 * time.Millisecond},
	} {
		run, err := Replay(context.Background(), records(0, 0), Config{Target: c.target, Model: "m", Timeout: c.timeout})
		if err != nil {
			t.Fatal(err)
		}
		if len(run.Results) != 2 {
			t.Fatalf("%s: %d results, want both records", c.kind, len(run.Results))
		}
		for _, r := range run.Results {
			if r.ErrKind != c.kind || !strings.Contains(r.Err, c.in) {
				t.Errorf("%s: error %q %q, want kind %q containing %q", c.target, r.ErrKind, r.Err, c.kind, c.in)
			}
		}
		if s := Summarize(run.Results); s.Failed != 2 || s.Errors[c.kind] != 2 || s.OK != 0 {
			t.Errorf("%s: summary %d failed %v, want 2 of kind %s", c.kind, s.Failed, s.Errors, c.kind)
		}
	}
}

// Records go out at their timestamps over the speed-up (never before),
// and the replay stops at --limit records or after --duration.
func TestReplay_PacesBySpeedupAndStops(t *testing.T) {
	srv := httptest.NewServer(&streamHandler{})
	defer srv.Close()
	recs := records(5000, 6000, 7000, 65000)
	run, err := Replay(context.Background(), recs, Config{Target: srv.URL, Model: "m", Speedup: 10, Duration: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(run.Results) != 3 {
		t.Fatalf("%d requests sent, want the 3 due within --duration 2s (the 4th is due at 6 s)", len(run.Results))
	}
	for i, r := range run.Results {
		if want := float64(100 * i); r.DueMs != want || r.StartMs < r.DueMs || r.Failed() {
			t.Errorf("request %d: due %.1f ms, started %.1f ms, error %q; want due %.0f ms (timestamps from the first, over speed-up 10), started no earlier",
				i, r.DueMs, r.StartMs, r.Err, want)
		}
	}
	run, err = Replay(context.Background(), recs, Config{Target: srv.URL, Model: "m", Speedup: 100, Limit: 2})
	if err != nil || len(run.Results) != 2 {
		t.Fatalf("--limit 2: %v requests, %v", len(run.Results), err)
	}
}

// Stopping the run cancels the requests in flight, reported so.
func TestReplay_CanceledRunEndsRequestsInFlight(t *testing.T) {
	hang := make(chan struct{})
	got := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- struct{}{}
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(hang)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-got; cancel() }()
	run, err := Replay(ctx, records(0, 60000), Config{Target: srv.URL, Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if len(run.Results) != 1 || run.Results[0].ErrKind != ErrCanceled {
		t.Fatalf("results %+v, want the one request sent, canceled", run.Results)
	}
}

func TestCheckTarget(t *testing.T) {
	for _, ok := range []string{"http://127.0.0.1:8080", "http://localhost:1", "http://[::1]:80/prefix", "http://127.1.2.3:9"} {
		if _, err := CheckTarget(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for target, want := range map[string]string{
		"http://10.0.0.1:8080":    "not a loopback address",
		"http://example.com:80":   "not a loopback address",
		"http://127.0.0.1":        "no port",
		"ftp://127.0.0.1:21":      "want http://HOST:PORT",
		"127.0.0.1:8080":          "want http://HOST:PORT",
		"http://127.0.0.1:80/?q=": "want http://HOST:PORT",
	} {
		if _, err := CheckTarget(target); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--target") {
			t.Errorf("%s: err %v, want one naming --target and %q", target, err, want)
		}
	}
}

func TestReplay_RefusesBadConfig(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Target: "http://127.0.0.1:1"}, "--model"},
		{Config{Target: "http://127.0.0.1:1", Model: "m", Speedup: -1}, "--speedup -1"},
		{Config{Target: "http://127.0.0.1:1", Model: "m", Speedup: 20000}, "at most 10000"},
		{Config{Target: "http://127.0.0.1:1", Model: "m", Limit: -1}, "--limit -1"},
		{Config{Target: "http://127.0.0.1:1", Model: "m", MaxTokens: -1}, "--max-tokens -1"},
		{Config{Target: "http://192.168.1.1:1", Model: "m"}, "loopback"},
	} {
		if _, err := Replay(context.Background(), records(0), c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err %v, want %q", c.cfg, err, c.want)
		}
	}
}

// The summary's figures, by hand from four results.
func TestSummarize(t *testing.T) {
	rs := []Result{
		{StartMs: 0, DueMs: 0, TTFTMs: 100, E2EMs: 1000, Replica: "a", Reason: "PREFIX_MATCH", MatchedTokens: 600, PromptTokens: 1000, CachedTokens: 500},
		{StartMs: 100, DueMs: 90, TTFTMs: 300, E2EMs: 1200, Replica: "a", Reason: "LOAD", PromptTokens: 1000, CachedTokens: 100},
		{StartMs: 200, DueMs: 200, TTFTMs: 200, E2EMs: 1100, Replica: "b", Reason: "LOAD", MatchedTokens: 5000, PromptTokens: 2000},
		{StartMs: 300, DueMs: 300, E2EMs: 2700, Replica: "c", ErrKind: ErrStream, Err: "cut"},
	}
	s := Summarize(rs)
	if s.Requests != 4 || s.OK != 3 || s.Failed != 1 || s.Errors[ErrStream] != 1 {
		t.Errorf("counts %d/%d/%d %v", s.Requests, s.OK, s.Failed, s.Errors)
	}
	if s.TTFT.P50 != 200 || s.TTFT.P99 != 300 || s.TTFT.Mean != 200 || s.E2E.P50 != 1100 {
		t.Errorf("TTFT %+v E2E %+v: want p50 200, p99 300, mean 200; E2E p50 1100 (failures left out)", s.TTFT, s.E2E)
	}
	// Matched tokens count at most the prompt: (600 + 0 + 2000) / 4000.
	if s.HitRate != 0.65 || s.CacheHitRate != 0.15 || s.PromptTokens != 4000 {
		t.Errorf("hit rate %v, cache hit rate %v over %d tokens; want 0.65 and 0.15 over 4000", s.HitRate, s.CacheHitRate, s.PromptTokens)
	}
	// a 2, b 1, c 1: max 2 over mean 4/3.
	if s.MaxOverMean != 1.5 || s.Reasons["LOAD"] != 2 || s.Replicas["c"] != 1 {
		t.Errorf("max/mean %v, reasons %v, replicas %v", s.MaxOverMean, s.Reasons, s.Replicas)
	}
	if s.MaxLateMs != 10 || s.SpanS != 3 {
		t.Errorf("late %v ms, span %v s; want 10 and 3 (0 to 300 + 2700 ms)", s.MaxLateMs, s.SpanS)
	}
	var b strings.Builder
	if err := s.WriteText(&b); err != nil || !strings.Contains(b.String(), "1 failed (stream 1)") || !strings.Contains(b.String(), "a 2, b 1, c 1") {
		t.Errorf("text:\n%s", b.String())
	}
}

// With several targets the records go round robin by arrival: record i
// to the (i mod n)-th, Target first.
func TestReplay_SplitsRecordsOverTargetsRoundRobin(t *testing.T) {
	var hs [3]*streamHandler
	var urls [3]string
	for k := range hs {
		hs[k] = &streamHandler{}
		srv := httptest.NewServer(hs[k])
		defer srv.Close()
		urls[k] = srv.URL
	}
	run, err := Replay(context.Background(), records(0, 1, 2, 3, 4, 5, 6), Config{Target: urls[0], MoreTargets: urls[1:], Model: "m", Speedup: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range run.Results {
		if r.Failed() {
			t.Fatalf("record %d failed: %s", r.Index, r.Err)
		}
	}
	// Records 0, 3, 6 on the first; 1, 4 on the second; 2, 5 on the
	// third.
	for k, want := range [][]int{{0, 3, 6}, {1, 4}, {2, 5}} {
		if len(hs[k].bodies) != len(want) {
			t.Fatalf("target %d got %d requests, want %d", k, len(hs[k].bodies), len(want))
		}
	}
	if _, err := Replay(context.Background(), records(0), Config{Target: urls[0], MoreTargets: []string{"http://10.0.0.1:80"}, Model: "m"}); err == nil ||
		!strings.Contains(err.Error(), "10.0.0.1") {
		t.Fatalf("a non-loopback further target: %v, want it refused by name", err)
	}
}
