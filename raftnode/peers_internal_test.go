package raftnode

import (
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/internal/poll"
)

// A change made while the saver coalesces writes, just before the node
// stops, is in the file once the saver returns: a node restarted where
// gossip cannot reach the others knows their addresses from it alone.
func TestPeerAddrs_AChangeJustBeforeStopIsWritten(t *testing.T) {
	dir := t.TempDir()
	p := loadPeerAddrs(dir)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() { p.saver(stop); close(done) }()
	p.set("n1", "127.0.0.1:7401")
	poll.Eventually(t, 10*time.Second, time.Millisecond, func() (bool, string) {
		return loadPeerAddrs(dir).get("n1") != "", "n1's address not written yet"
	})
	// The saver now waits out its coalescing pause: this change is
	// pending when the node stops.
	p.set("n2", "127.0.0.1:7411")
	close(stop)
	<-done
	if got := loadPeerAddrs(dir).get("n2"); got != "127.0.0.1:7411" {
		t.Fatalf("after stop the file has n2 at %q, want 127.0.0.1:7411", got)
	}
}
