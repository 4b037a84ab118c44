package e2e

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/internal/proccluster"
)

// A gossip key change on running servers: the key file is rewritten in
// the three documented steps, each applied by every server without a
// restart; a newcomer holding only the new key then joins as the fourth
// voter (it can only learn the others' Raft addresses through gossip
// encrypted with the new key), while one holding only the old key never
// becomes a member.
func TestServer_GossipKeyRotationWithoutRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts five server processes")
	}
	key := func(b byte) string { return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, 32)) }
	oldK, newK := key(1), key(2)
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "gossip.keys")
	// Each write gets an mtime a second after the one before, so the
	// server's change check (mtime and size) sees it even on a coarse
	// clock.
	mtime := time.Now()
	write := func(path string, lines ...string) {
		t.Helper()
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		mtime = mtime.Add(time.Second)
		if err := os.Chtimes(tmp, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write(keyFile, oldK)
	c := startCluster(t, 3, "--gossip-key-file", keyFile)
	for step, lines := range [][]string{{oldK, newK}, {newK, oldK}, {newK}} {
		write(keyFile, lines...)
		for _, p := range c.procs {
			waitLogCount(t, p, `"msg":"gossip keys applied"`, step+1, 15*time.Second)
		}
	}
	l := c.waitLeader(10 * time.Second)

	joiner := func(id string, k string) *proc {
		f := filepath.Join(dir, id+".keys")
		write(f, k)
		nd := loopbackNode(t, id, dir)
		p := newProc(nd)
		p.args = proccluster.ServerArgs(nd, 3, nil, "--fast-timing", "--log-format", "json", "--gossip-key-file", f)
		for _, o := range c.procs {
			p.args = append(p.args, "--join", o.gossip)
		}
		if err := c.add(p); err != nil { // stopped by the cluster's cleanup
			t.Fatal(err)
		}
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
	poll.Eventually(t, 30*time.Second, 100*time.Millisecond, func() (bool, string) {
		return member(fresh.id), "a server holding only the new gossip key is not a voter"
	})
	if member(stale.id) {
		t.Fatal("a server holding only the dropped gossip key became a member")
	}
}

// waitLogCount waits until p's log holds s at least n times.
func waitLogCount(t *testing.T, p *proc, s string, n int, limit time.Duration) {
	t.Helper()
	poll.Eventually(t, limit, 50*time.Millisecond, func() (bool, string) {
		b, _ := os.ReadFile(p.logPath)
		got := strings.Count(string(b), s)
		return got >= n, fmt.Sprintf("%s: %q logged %d times, want %d", p.id, s, got, n)
	})
}
