package proxy

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/inference-cache/inference-cache/internal/syncbuf"
)

// At debug level each routing decision is logged with its reason and
// every candidate's cost terms; at info level none is.
func TestProxy_DebugLogsEachDecisionsCosts(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelDebug, slog.LevelInfo} {
		var out syncbuf.Buffer
		log := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: level}))
		a, b := newEngine(t, "qwen3"), newEngine(t, "qwen3")
		tp := newTestProxy(t, prefixMatch("b", 160), Options{Logger: log}, a, b)
		if resp, _ := tp.post(t, "/v1/chat/completions", tp.chat("What is a KV cache?", false)); resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		var line string
		for _, l := range strings.Split(out.String(), "\n") {
			if strings.Contains(l, `msg="routing decision"`) {
				line = l
			}
		}
		if level == slog.LevelInfo {
			if line != "" {
				t.Fatalf("info level logged a decision: %s", line)
			}
			continue
		}
		for _, want := range []string{"replica=b", "reason=PREFIX_MATCH", "matched_tokens=160", "fail_open=false",
			"a NO_HINT cost=", "b PREFIX_MATCH cost=", "cached=160", "queued=", "others=", "engine_waiting="} {
			if !strings.Contains(line, want) {
				t.Fatalf("decision log %q: no %q", line, want)
			}
		}
	}
}
