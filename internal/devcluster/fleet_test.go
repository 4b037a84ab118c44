package devcluster

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/internal/fixtures"
	"github.com/inference-cache/inference-cache/internal/localfleet"
	"github.com/inference-cache/inference-cache/tokenizer"
)

// The curl pair's two files are chat requests for the fleet's model
// with the same system prompt, long enough for a prefix match (over the
// policy's minimum of 128 matched tokens by far), new each run.
func TestWriteCurlPair(t *testing.T) {
	dir := t.TempDir()
	es, proxy, _ := localfleet.Addrs("127.0.0.1", 7400, 3, 3)
	f := &fleet{cfg: localfleet.Config{Engines: es, Proxy: proxy}}
	var out bytes.Buffer
	now := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	if err := f.writeCurlPair(&out, dir, now); err != nil {
		t.Fatal(err)
	}
	type msg struct{ Role, Content string }
	var sys []string
	for _, n := range []string{"chat-1.json", "chat-2.json"} {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		var req struct {
			Model    string `json:"model"`
			Messages []msg  `json:"messages"`
		}
		if err := json.Unmarshal(b, &req); err != nil || req.Model != localfleet.Model || len(req.Messages) != 2 || req.Messages[0].Role != "system" {
			t.Fatalf("%s: %v %+v", n, err, req)
		}
		sys = append(sys, req.Messages[0].Content)
		if !strings.Contains(out.String(), "-d @"+filepath.Join(dir, n)+" | grep -i '^x-inference-cache'") ||
			!strings.Contains(out.String(), "http://127.0.0.1:7461/v1/chat/completions") {
			t.Errorf("no curl command for %s:\n%s", n, out.String())
		}
	}
	if sys[0] != sys[1] || !strings.Contains(sys[0], now.Format(time.RFC3339Nano)) || systemPrompt(now.Add(time.Second)) == sys[0] {
		t.Fatal("the system prompts differ, or do not change with the run's time")
	}
	tok, err := tokenizer.LoadDir(fixtures.TokenizerDir(t, localfleet.Model), tokenizer.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ids, _ := tok.Encode(sys[0], false); len(ids) < 1000 {
		t.Fatalf("system prompt of %d tokens, want at least 1000", len(ids))
	}
	if q := shellQuote("/tmp/a b/x.json"); q != `'/tmp/a b/x.json'` {
		t.Fatalf("shellQuote: %s", q)
	}
}
