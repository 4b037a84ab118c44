package localfleet

import (
	"bytes"
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
	es, proxy, sub := Addrs("127.0.0.1", 7400, 3, 3)
	want := []Engine{{"sim-1", "127.0.0.1:7431", "127.0.0.1:7432", "127.0.0.1:7433"}, {"sim-2", "127.0.0.1:7441", "127.0.0.1:7442", "127.0.0.1:7443"}, {"sim-3", "127.0.0.1:7451", "127.0.0.1:7452", "127.0.0.1:7453"}}
	if len(es) != 3 || es[0] != want[0] || es[1] != want[1] || es[2] != want[2] || proxy != "127.0.0.1:7461" || sub != "127.0.0.1:7462" {
		t.Fatalf("layout %v, proxy %s, subscriber %s", es, proxy, sub)
	}
	if n := Ports(3, 3); n != 63 {
		t.Fatalf("Ports(3, 3) = %d, want base+63 the last port", n)
	}
	c := Config{Engines: es, Scrape: time.Second}
	cfg, err := observe.ParseConfig([]byte(c.subscriberYAML()))
	if err != nil {
		t.Fatalf("%v\n%s", err, c.subscriberYAML())
	}
	if len(cfg.Engines) != 3 || time.Duration(cfg.ScrapeInterval) != time.Second {
		t.Fatalf("parsed %+v", cfg)
	}
	for i, e := range cfg.Engines {
		if e.Endpoint != "tcp://"+es[i].Events || e.ReplayEndpoint != "tcp://"+es[i].Replay || e.ReplicaID != es[i].ID || e.ModelID != Model || e.HashScheme != "vllm" ||
			e.BlockSize != 16 || e.MetricsURL != "http://"+es[i].HTTP+"/metrics" {
			t.Errorf("engine %d: %+v", i, e)
		}
	}
}

// dev's round-robin proxy listens after the subscriber's /metrics, in
// front of every engine, asking the cluster nothing; with a health
// timeout set, both proxies get it.
func TestFleetProxies_RoundRobinBaselineAndHealthTimeout(t *testing.T) {
	es, proxy, _ := Addrs("127.0.0.1", 7400, 3, 3)
	if rr := RRProxyAddr("127.0.0.1", 7400, 3, 3); rr != "127.0.0.1:7463" {
		t.Fatalf("round-robin proxy at %s, want 127.0.0.1:7463", rr)
	}
	c := Config{Engines: es, Proxy: proxy, Cluster: []string{"127.0.0.1:7401"}, ModelsDir: "m", HealthTimeout: 5 * time.Second}
	rr := strings.Join(c.RRProxySpec("proxy-rr", "127.0.0.1:7463").Args, " ")
	want := "proxy --listen 127.0.0.1:7463 --strategy round-robin --drain-time 0s --health-timeout 5s --backend sim-1=http://127.0.0.1:7431 --backend sim-2=http://127.0.0.1:7441 --backend sim-3=http://127.0.0.1:7451"
	if rr != want {
		t.Errorf("round-robin proxy args\n got  %s\n want %s", rr, want)
	}
	if p := strings.Join(c.ProxySpec("proxy", "picker").Args, " "); !strings.Contains(p, "--strategy picker --drain-time 0s --addr 127.0.0.1:7401 --health-timeout 5s --backend sim-1=") {
		t.Errorf("picker proxy args %s", p)
	}
	c.HealthTimeout = 0
	if p := strings.Join(c.ProxySpec("proxy", "picker").Args, " "); strings.Contains(p, "--health-timeout") {
		t.Errorf("no health timeout set, yet %s", p)
	}
}

// The models directory is unpacked from the repository's testdata once:
// tokenizer.json is the decompressed file (as the fixtures decompress it
// on their own), a second call keeps the copy, and a given directory
// without the model is refused naming --models-dir.
func TestFleetModelsDir_UnpacksOnceAndChecksAGivenOne(t *testing.T) {
	dir := t.TempDir()
	got, err := ModelsDir(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	if got != filepath.Join(dir, "models") {
		t.Fatalf("models dir %s", got)
	}
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		a, err := os.ReadFile(filepath.Join(got, Model, f))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(fixtures.TokenizerDir(t, Model), f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Fatalf("%s differs from the fixture's decompressed copy", f)
		}
	}
	if _, err := tokenizer.LoadDir(filepath.Join(got, Model), tokenizer.LoadOptions{}); err != nil {
		t.Fatalf("the unpacked tokenizer does not load: %v", err)
	}
	fi, _ := os.Stat(filepath.Join(got, Model, "tokenizer.json"))
	if _, err := ModelsDir(dir, ""); err != nil {
		t.Fatal(err)
	}
	fi2, err := os.Stat(filepath.Join(got, Model, "tokenizer.json"))
	if err != nil || !os.SameFile(fi, fi2) {
		t.Fatalf("the second call replaced the unpacked copy (%v)", err)
	}
	if _, err := ModelsDir(dir, t.TempDir()); err == nil || !strings.Contains(err.Error(), "--models-dir") || !strings.Contains(err.Error(), Model) {
		t.Fatalf("a models dir without %s: err %v", Model, err)
	}
	if given, err := ModelsDir(dir, got); err != nil || given != got {
		t.Fatalf("a models dir holding %s: %s, %v", Model, given, err)
	}
}
