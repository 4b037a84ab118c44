package raftnode

import (
	"encoding/binary"
	"encoding/json"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// Clock offsets: every gossip probe's ack carries the responder's clock
// (memberlist's ping delegate), so each node estimates, per peer, the
// peer's clock minus its own, corrected by half the round trip. The
// offset to the leader is reported in Status and as a metric; the
// replicated state never depends on it.

// clockOffsets holds the latest estimate per peer id. Read-locked: every
// lookup reads the leader's entry (api ReadState), a probe writes one.
type clockOffsets struct {
	mu sync.RWMutex
	by map[string]time.Duration
}

func (c *clockOffsets) set(id string, d time.Duration) {
	c.mu.Lock()
	if c.by == nil {
		c.by = map[string]time.Duration{}
	}
	c.by[id] = d
	c.mu.Unlock()
}

func (c *clockOffsets) get(id string) (time.Duration, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	d, ok := c.by[id]
	return d, ok
}

// pingClock is the memberlist ping delegate carrying the clock.
type pingClock struct{ n *Node }

// ackClock is the clock a node puts in its acks; tests set it
// (export_test.go) to give one node a clock that is off.
var ackClock = func(nodeID string) time.Time { return time.Now() }

// AckPayload is this node's clock, unix ns, little endian.
func (p pingClock) AckPayload() []byte {
	return binary.LittleEndian.AppendUint64(nil, uint64(ackClock(p.n.cfg.NodeID).UnixNano()))
}

// NotifyPingComplete records other's clock offset from its ack.
func (p pingClock) NotifyPingComplete(other *memberlist.Node, rtt time.Duration, payload []byte) {
	if len(payload) != 8 {
		return
	}
	var meta gossipMeta
	if json.Unmarshal(other.Meta, &meta) != nil || meta.ID == "" {
		return
	}
	remote := int64(binary.LittleEndian.Uint64(payload))
	// The ack was written about half a round trip ago.
	p.n.offsets.set(meta.ID, time.Duration(remote+int64(rtt/2)-time.Now().UnixNano()))
}

// ClockOffsetToLeader is the leader's clock minus this node's, as
// measured over gossip probes (0 and false on the leader, or before a
// probe of the leader answered). Cheap enough to call per lookup.
func (n *Node) ClockOffsetToLeader() (time.Duration, bool) {
	_, id := n.raft.LeaderWithID()
	if id == "" || string(id) == n.cfg.NodeID {
		return 0, false
	}
	return n.offsets.get(string(id))
}
