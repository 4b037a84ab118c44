package main

import (
	"strings"
	"testing"
	"time"
)

// Flag values that would start a server unable to work (or one waiting
// forever) are refused, naming the flag.
func TestServerOptions_Validate(t *testing.T) {
	ok := serverOptions{nodeID: "n1", bootstrapExpect: 3, shutdownTimeout: time.Second}
	if err := ok.validate(); err != nil {
		t.Fatalf("valid options: %v", err)
	}
	for name, c := range map[string]struct {
		mod  func(*serverOptions)
		flag string
	}{
		"no node id":              {func(o *serverOptions) { o.nodeID = "" }, "--node-id"},
		"newline in id":           {func(o *serverOptions) { o.nodeID = "a\nb" }, "--node-id"},
		"space in id":             {func(o *serverOptions) { o.nodeID = "a b" }, "--node-id"},
		"long id":                 {func(o *serverOptions) { o.nodeID = strings.Repeat("x", 129) }, "--node-id"},
		"negative expect":         {func(o *serverOptions) { o.bootstrapExpect = -1 }, "--bootstrap-expect"},
		"negative shutdown":       {func(o *serverOptions) { o.shutdownTimeout = -5 * time.Second }, "--shutdown-timeout"},
		"negative cleanup":        {func(o *serverOptions) { o.deadServerCleanup = -time.Minute }, "--dead-server-cleanup -1m0s: must be 0 (never) or positive"},
		"negative turn wait":      {func(o *serverOptions) { o.turnWait = -time.Millisecond }, "--turn-wait -1ms: must be 0 (no turns) or positive"},
		"negative tokenizer wait": {func(o *serverOptions) { o.tokenizerLoadTimeout = -time.Second }, "--tokenizer-load-timeout -1s: must be 0 (do not wait) or positive"},
		"negative apply workers":  {func(o *serverOptions) { o.applyWorkers = -1 }, "--apply-workers -1: must be 0 (one per CPU) or positive"},
		"tiny cleanup":            {func(o *serverOptions) { o.deadServerCleanup = time.Nanosecond }, "--dead-server-cleanup 1ns: must be 0 (never) or at least 10s"},
		"join port not a number":  {func(o *serverOptions) { o.join = []string{"nonsense:zz"} }, `--join item 1 "nonsense:zz": port "zz": must be a number between 1 and 65535`},
		"join port too big":       {func(o *serverOptions) { o.join = []string{"a:7403", "b:65536"} }, `--join item 2 "b:65536": port "65536"`},
		"join port 0":             {func(o *serverOptions) { o.join = []string{"b:0"} }, `port "0"`},
		"join no port":            {func(o *serverOptions) { o.join = []string{"10.0.0.2"} }, `--join item 1 "10.0.0.2": want host:port`},
		"join no host":            {func(o *serverOptions) { o.join = []string{":7403"} }, `--join item 1 ":7403": no host`},
		"join empty item":         {func(o *serverOptions) { o.join = []string{"a:7403", ""} }, "--join item 2 \"\": empty"},
		"join space in host":      {func(o *serverOptions) { o.join = []string{"a b:7403"} }, `character ' ' at byte 1`},
		"join slash in host":      {func(o *serverOptions) { o.join = []string{"http://a:7403"} }, "--join item 1"},
		"raft advertise no port":  {func(o *serverOptions) { o.raftAdvertise = "10.0.0.2" }, `--raft-advertise "10.0.0.2": want host:port`},
		"raft addr port 0":        {func(o *serverOptions) { o.raftAddr = "127.0.0.1:0" }, `--raft-addr "127.0.0.1:0": want host:port with a fixed port`},
		"raft advertise port 0":   {func(o *serverOptions) { o.raftAdvertise = "a:0" }, `--raft-advertise "a:0": port "0"`},
	} {
		o := ok
		c.mod(&o)
		if err := o.validate(); err == nil || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("%s: err = %v, want one naming %s", name, err, c.flag)
		}
	}
}

// --join takes any host:port that could work later (names are not
// resolved at start: DNS may learn them after this node starts), and
// --dead-server-cleanup keeps 0 = never.
func TestServerOptions_ValidateAcceptsWorkableJoinAndCleanup(t *testing.T) {
	o := serverOptions{nodeID: "n1", bootstrapExpect: 3, shutdownTimeout: time.Second,
		join: []string{"10.0.0.2:7403", "[fd00::5]:7403", "[fe80::1%eth0]:7403", "ic-1.ic-peers.default.svc.cluster.local:7403",
			"not-yet-in-dns.invalid:1", "node_3:65535"}}
	for _, d := range []time.Duration{0, 10 * time.Minute} {
		o.deadServerCleanup = d
		if err := o.validate(); err != nil {
			t.Errorf("cleanup %v: %v", d, err)
		}
	}
}
