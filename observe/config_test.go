package observe

import (
	"errors"
	"strings"
	"testing"
)

const goodEngine = `
  - endpoint: tcp://127.0.0.1:5557
    replica_id: vllm-0
    model_id: m
    hash_scheme: vllm
`

// Each invalid configuration is refused with ErrConfig and an error that
// names the field (engines[i].name) and why; defaults fill what is absent.
func TestConfig_ValidationNamesTheField(t *testing.T) {
	cases := []struct {
		name, yaml, want string
	}{
		{"missing replica_id", "engines:\n  - endpoint: tcp://127.0.0.1:5557\n    model_id: m\n    hash_scheme: vllm\n", "engines[0].replica_id: required"},
		{"duplicate replica_id", "engines:" + goodEngine + strings.Replace(goodEngine, "5557", "5560", 1), "engines[1].replica_id"},
		{"duplicate endpoint", "engines:" + goodEngine + strings.Replace(goodEngine, "vllm-0", "vllm-1", 1), "engines[1].endpoint"},
		{"bad endpoint", "engines:" + strings.Replace(goodEngine, "tcp://127.0.0.1:5557", "udp://x", 1), "engines[0].endpoint"},
		{"missing model", "engines:" + strings.Replace(goodEngine, "    model_id: m\n", "", 1), "engines[0].model_id: required"},
		{"missing scheme", "engines:" + strings.Replace(goodEngine, "    hash_scheme: vllm\n", "", 1), "engines[0].hash_scheme"},
		{"block size too big", "engines:" + goodEngine + "    block_size: 5000\n", "engines[0].block_size"},
		{"metrics url not http", "engines:" + goodEngine + "    metrics_url: ftp://x/metrics\n", "engines[0].metrics_url"},
		{"scrape interval too short", "scrape_interval: 10ms\nengines:" + goodEngine, "scrape_interval"},
		{"unknown key", "engines:" + goodEngine + "    replica: typo\n", "replica"},
		{"page size over block size", "engines:" + goodEngine + "    page_size: 32\n", "engines[0].page_size: 32 is not between 1 and block_size (16)"},
		{"page size not a divisor", "engines:" + goodEngine + "    page_size: 3\n", "engines[0].page_size: block_size 16 is not a multiple of page_size 3"},
		{"negative page size", "engines:" + goodEngine + "    page_size: -1\n", "engines[0].page_size"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(c.yaml))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want one naming %q", err, c.want)
			}
			if c.name != "unknown key" && !errors.Is(err, ErrConfig) {
				t.Errorf("err %v does not wrap ErrConfig", err)
			}
		})
	}
}

func TestConfig_DefaultsAndRankReplicaIDs(t *testing.T) {
	cfg, err := ParseConfig([]byte("engines:" + goodEngine))
	if err != nil {
		t.Fatal(err)
	}
	e := cfg.Engines[0]
	if e.BlockSize != 16 || len(e.Media) != 1 || e.Media[0] != "GPU" || e.DataParallelSize != 1 {
		t.Fatalf("defaults not applied: %+v", e)
	}
	if got := e.ReplicaForRank(0); got != "vllm-0" {
		t.Errorf("rank 0 replica %q, want vllm-0", got)
	}
	if got := e.ReplicaForRank(3); got != "vllm-0-dp3" {
		t.Errorf("rank 3 replica %q, want vllm-0-dp3", got)
	}
}

// page_size: 1 (SGLang's default) is valid with any block size, and a
// change of it restarts the engine like any other field.
func TestConfig_PageSize(t *testing.T) {
	cfg, err := ParseConfig([]byte("engines:" + goodEngine + "    page_size: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	e := cfg.Engines[0]
	if e.PageSize != 1 || e.BlockSize != 16 {
		t.Fatalf("page_size %d block_size %d", e.PageSize, e.BlockSize)
	}
	o := e
	o.PageSize = 2
	if e.equal(&o) {
		t.Fatal("entries differing in page_size compare equal")
	}
}
