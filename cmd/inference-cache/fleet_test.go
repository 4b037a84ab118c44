package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/internal/fixtures"
	"github.com/inference-cache/inference-cache/observe"
	"github.com/inference-cache/inference-cache/tokenizer"
)

// The fleet follows the nodes' ports, and the subscriber's file is a
// valid configuration (contract §12.6) naming each engine's KV-event
// socket, replica id and /metrics.
func TestFleetLayoutAndSubscriberConfig(t *testing.T) {
	es, proxy, sub := fleetAddrs("127.0.0.1", 7400, 3, 3)
	want := []fleetEngine{{"sim-1", "127.0.0.1:7431", "127.0.0.1:7432", "127.0.0.1:7433"}, {"sim-2", "127.0.0.1:7441", "127.0.0.1:7442", "127.0.0.1:7443"}, {"sim-3", "127.0.0.1:7451", "127.0.0.1:7452", "127.0.0.1:7453"}}
	if len(es) != 3 || es[0] != want[0] || es[1] != want[1] || es[2] != want[2] || proxy != "127.0.0.1:7461" || sub != "127.0.0.1:7462" {
		t.Fatalf("layout %v, proxy %s, subscriber %s", es, proxy, sub)
	}
	if n := fleetPorts(3, 3); n != 63 {
		t.Fatalf("fleetPorts(3, 3) = %d, want base+63 the last port", n)
	}
	c := fleetConfig{Engines: es, Scrape: time.Second}
	cfg, err := observe.ParseConfig([]byte(c.subscriberYAML()))
	if err != nil {
		t.Fatalf("%v\n%s", err, c.subscriberYAML())
	}
	if len(cfg.Engines) != 3 || time.Duration(cfg.ScrapeInterval) != time.Second {
		t.Fatalf("parsed %+v", cfg)
	}
	for i, e := range cfg.Engines {
		if e.Endpoint != "tcp://"+es[i].Events || e.ReplayEndpoint != "tcp://"+es[i].Replay || e.ReplicaID != es[i].ID || e.ModelID != fleetModel || e.HashScheme != "vllm" ||
			e.BlockSize != 16 || e.MetricsURL != "http://"+es[i].HTTP+"/metrics" {
			t.Errorf("engine %d: %+v", i, e)
		}
	}
}

// dev's round-robin proxy listens after the subscriber's /metrics, in
// front of every engine, asking the cluster nothing; with a health
// timeout set, both proxies get it.
func TestFleetProxies_RoundRobinBaselineAndHealthTimeout(t *testing.T) {
	es, proxy, _ := fleetAddrs("127.0.0.1", 7400, 3, 3)
	if rr := rrProxyAddr("127.0.0.1", 7400, 3, 3); rr != "127.0.0.1:7463" {
		t.Fatalf("round-robin proxy at %s, want 127.0.0.1:7463", rr)
	}
	c := fleetConfig{Engines: es, Proxy: proxy, Cluster: []string{"127.0.0.1:7401"}, ModelsDir: "m", HealthTimeout: 5 * time.Second}
	rr := strings.Join(c.rrProxySpec("proxy-rr", "127.0.0.1:7463").Args, " ")
	want := "proxy --listen 127.0.0.1:7463 --strategy round-robin --drain-time 0s --health-timeout 5s --backend sim-1=http://127.0.0.1:7431 --backend sim-2=http://127.0.0.1:7441 --backend sim-3=http://127.0.0.1:7451"
	if rr != want {
		t.Errorf("round-robin proxy args\n got  %s\n want %s", rr, want)
	}
	if p := strings.Join(c.proxySpec("proxy", "picker").Args, " "); !strings.Contains(p, "--strategy picker --drain-time 0s --addr 127.0.0.1:7401 --health-timeout 5s --backend sim-1=") {
		t.Errorf("picker proxy args %s", p)
	}
	c.HealthTimeout = 0
	if p := strings.Join(c.proxySpec("proxy", "picker").Args, " "); strings.Contains(p, "--health-timeout") {
		t.Errorf("no health timeout set, yet %s", p)
	}
}

// The models directory is unpacked from the repository's testdata once:
// tokenizer.json is the decompressed file (as the fixtures decompress it
// on their own), a second call keeps the copy, and a given directory
// without the model is refused naming --models-dir.
func TestFleetModelsDir_UnpacksOnceAndChecksAGivenOne(t *testing.T) {
	dir := t.TempDir()
	got, err := fleetModelsDir(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	if got != filepath.Join(dir, "models") {
		t.Fatalf("models dir %s", got)
	}
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		a, err := os.ReadFile(filepath.Join(got, fleetModel, f))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(fixtures.TokenizerDir(t, fleetModel), f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Fatalf("%s differs from the fixture's decompressed copy", f)
		}
	}
	if _, err := tokenizer.LoadDir(filepath.Join(got, fleetModel), tokenizer.LoadOptions{}); err != nil {
		t.Fatalf("the unpacked tokenizer does not load: %v", err)
	}
	fi, _ := os.Stat(filepath.Join(got, fleetModel, "tokenizer.json"))
	if _, err := fleetModelsDir(dir, ""); err != nil {
		t.Fatal(err)
	}
	fi2, err := os.Stat(filepath.Join(got, fleetModel, "tokenizer.json"))
	if err != nil || !os.SameFile(fi, fi2) {
		t.Fatalf("the second call replaced the unpacked copy (%v)", err)
	}
	if _, err := fleetModelsDir(dir, t.TempDir()); err == nil || !strings.Contains(err.Error(), "--models-dir") || !strings.Contains(err.Error(), fleetModel) {
		t.Fatalf("a models dir without %s: err %v", fleetModel, err)
	}
	if given, err := fleetModelsDir(dir, got); err != nil || given != got {
		t.Fatalf("a models dir holding %s: %s, %v", fleetModel, given, err)
	}
}

// The curl pair's two files are chat requests for the fleet's model
// with the same system prompt, long enough for a prefix match (over the
// policy's minimum of 128 matched tokens by far), new each run.
func TestWriteCurlPair(t *testing.T) {
	dir := t.TempDir()
	es, proxy, _ := fleetAddrs("127.0.0.1", 7400, 3, 3)
	f := &devFleet{cfg: fleetConfig{Engines: es, Proxy: proxy}}
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
		if err := json.Unmarshal(b, &req); err != nil || req.Model != fleetModel || len(req.Messages) != 2 || req.Messages[0].Role != "system" {
			t.Fatalf("%s: %v %+v", n, err, req)
		}
		sys = append(sys, req.Messages[0].Content)
		if !strings.Contains(out.String(), "-d @"+filepath.Join(dir, n)+" | grep -i '^x-inference-cache'") ||
			!strings.Contains(out.String(), "http://127.0.0.1:7461/v1/chat/completions") {
			t.Errorf("no curl command for %s:\n%s", n, out.String())
		}
	}
	if sys[0] != sys[1] || !strings.Contains(sys[0], now.Format(time.RFC3339Nano)) || devSystemPrompt(now.Add(time.Second)) == sys[0] {
		t.Fatal("the system prompts differ, or do not change with the run's time")
	}
	tok, err := tokenizer.LoadDir(fixtures.TokenizerDir(t, fleetModel), tokenizer.LoadOptions{})
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
