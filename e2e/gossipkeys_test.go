package e2e

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/internal/freeport"
)

// A gossip key change on running servers: the key file is rewritten in
// the three documented steps, each applied by every server without a
// restart; a newcomer holding only the new key then joins as the fourth
// voter (it can only learn the others' Raft addresses through gossip
// encrypted with the new key), while one holding only the old key never
// becomes a member.
func TestServer_GossipKeyRotationWithoutRestart(t *testing.T) {
	key := func(b byte) string { return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, 32)) }
	oldK, newK := key(1), key(2)
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "gossip.keys")
	write := func(path string, lines ...string) {
		t.Helper()
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write(keyFile, oldK)
	c := startCluster(t, 3, "--gossip-key-file", keyFile)
	for step, lines := range [][]string{{oldK, newK}, {newK, oldK}, {newK}} {
		time.Sleep(20 * time.Millisecond) // a new mtime even on coarse clocks
		write(keyFile, lines...)
		for _, p := range c.procs {
			waitLogCount(t, p, `"msg":"gossip keys applied"`, step+1, 15*time.Second)
		}
	}
	l := c.waitLeader(10 * time.Second)

	joiner := func(id string, k string) *proc {
		f := filepath.Join(dir, id+".keys")
		write(f, k)
		p := &proc{id: id, grpc: freeport.MustAddr(t), raft: freeport.MustAddr(t), gossip: freeport.MustAddr(t),
			http: freeport.MustAddr(t), data: filepath.Join(dir, id)}
		p.logPath = p.data + ".log"
		p.args = []string{"server", "--node-id", id, "--data-dir", p.data, "--grpc-addr", p.grpc, "--raft-addr", p.raft,
			"--gossip-addr", p.gossip, "--http-addr", p.http, "--bootstrap-expect", "3", "--fast-timing",
			"--log-format", "json", "--gossip-key-file", f}
		for _, o := range c.procs {
			p.args = append(p.args, "--join", o.gossip)
		}
		c.procs = append(c.procs, p) // stopped by the cluster's cleanup
		c.start(p)
		cc, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		p.conn, p.ic, p.cl = cc, pb.NewInferenceCacheClient(cc), pb.NewClusterClient(cc)
		return p
	}
	stale := joiner("stale", oldK)
	fresh := joiner("fresh", newK)
	member := func(id string) bool {
		ctx, cancel := ctxT(time.Second)
		defer cancel()
		st, err := l.cl.Status(ctx, &pb.StatusRequest{})
		if err != nil {
			return false
		}
		for _, m := range st.Members {
			if m.Id == id && m.Suffrage == "Voter" {
				return true
			}
		}
		return false
	}
	deadline := time.Now().Add(30 * time.Second)
	for !member(fresh.id) {
		if time.Now().After(deadline) {
			t.Fatal("a server holding only the new gossip key did not join as a voter within 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if member(stale.id) {
		t.Fatal("a server holding only the dropped gossip key became a member")
	}
}

// waitLogCount waits until p's log holds s at least n times.
func waitLogCount(t *testing.T, p *proc, s string, n int, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		b, _ := os.ReadFile(p.logPath)
		if strings.Count(string(b), s) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %q logged %d times within %v, want %d", p.id, s, strings.Count(string(b), s), limit, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
