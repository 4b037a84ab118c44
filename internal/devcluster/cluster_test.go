package devcluster

import (
	"strings"
	"testing"
)

// A dev cluster's data restarted on other ports would never elect a
// leader (Raft keeps the old peer addresses): the second layout is refused
// with a message that says what the data was made with and what to do.
func TestCheckDevLayout_RefusesOtherAddressesForExistingData(t *testing.T) {
	dir := t.TempDir()
	if err := checkDevLayout(dir, "127.0.0.1", 41000, 3); err != nil {
		t.Fatalf("new dir: %v", err)
	}
	if err := checkDevLayout(dir, "127.0.0.1", 41000, 3); err != nil {
		t.Fatalf("same layout again: %v", err)
	}
	for _, c := range []struct {
		host        string
		port, nodes int
	}{
		{"127.0.0.1", 42000, 3},
		{"127.0.0.1", 41000, 5},
		{"0.0.0.0", 41000, 3},
	} {
		err := checkDevLayout(dir, c.host, c.port, c.nodes)
		if err == nil || !strings.Contains(err.Error(), "base-port=41000") || !strings.Contains(err.Error(), "delete "+dir) {
			t.Errorf("%+v: err = %v; want a refusal naming the stored layout and the way out", c, err)
		}
	}
}

// Values no dev cluster can start with are refused, naming the flag.
func TestConfigCheck_NamesTheFlag(t *testing.T) {
	ok := Config{Nodes: 3, Engines: 3, PrefillTPS: 1, DecodeTPS: 1, KVBlocks: 1}
	if err := ok.Check(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		set  func(*Config)
		want string
	}{
		{func(c *Config) { c.Nodes = 0 }, "--nodes 0: must be at least 1"},
		{func(c *Config) { c.Engines = 17 }, "--engines 17: want 0 (no fleet) to 16"},
		{func(c *Config) { c.DecodeTPS = 0 }, "--decode-tps 0: must be positive"},
		{func(c *Config) { c.KVBlocks = 0 }, "--kv-blocks 0: need at least 1"},
	} {
		bad := ok
		c.set(&bad)
		if err := bad.Check(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("err %v, want %q", err, c.want)
		}
	}
}
