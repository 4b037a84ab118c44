package raftnode

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// Clock offsets: every gossip probe's ack carries the responder's clock
// (memberlist's ping delegate), so each node estimates, per peer, the
// peer's clock minus its own, corrected by half the round trip. The
// offset to the leader is reported in Status and as a metric. A node
// whose own clock is more than ClockCorrectThreshold off the cluster's
// (the median over itself and every peer probed within offsetMaxAge, at
// least three clocks) corrects its wall clock by that median (Node.Now):
// one node with a wrong clock then neither stamps observations in its
// own time nor, as leader, expires the index in it.

// ClockCorrectThreshold is how far this node's clock may be off the
// cluster's median clock before Node.Now corrects it. Well above the
// probe's error (half a round trip) and far below the eviction TTL.
const ClockCorrectThreshold = 5 * time.Second

// offsetMaxAge: older offset samples (a peer not probed since) do not
// count toward the cluster's median.
const offsetMaxAge = 30 * time.Second

// offsetSample is one peer's offset and when (monotonic) it was measured.
type offsetSample struct {
	d  time.Duration
	at time.Time
}

// clockOffsets holds the latest estimate per peer id. Read-locked: every
// lookup reads the leader's entry (ReadState), a probe writes one.
type clockOffsets struct {
	mu sync.RWMutex
	by map[string]offsetSample
}

// set records id's offset d measured at (local monotonic) time at.
func (c *clockOffsets) set(id string, d time.Duration, at time.Time) {
	c.mu.Lock()
	if c.by == nil {
		c.by = map[string]offsetSample{}
	}
	c.by[id] = offsetSample{d: d, at: at}
	c.mu.Unlock()
}

func (c *clockOffsets) get(id string) (time.Duration, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	s, ok := c.by[id]
	return s.d, ok
}

// median is the cluster's clock minus this node's: the median of 0 (this
// node) and every sample newer than now-offsetMaxAge, and false with fewer
// than three clocks (two cannot tell which one is wrong). Of two middle
// values the one nearer 0 is taken, so a tie never moves the clock.
func (c *clockOffsets) median(now time.Time) (time.Duration, bool) {
	c.mu.RLock()
	ds := make([]time.Duration, 1, len(c.by)+1)
	for _, s := range c.by {
		if now.Sub(s.at) <= offsetMaxAge {
			ds = append(ds, s.d)
		}
	}
	c.mu.RUnlock()
	if len(ds) < 3 {
		return 0, false
	}
	slices.Sort(ds)
	m := ds[len(ds)/2]
	if len(ds)%2 == 0 {
		if lo := ds[len(ds)/2-1]; lo.Abs() < m.Abs() {
			m = lo
		}
	}
	return m, true
}

// correctionFor is the correction Node.Now applies for a median offset m:
// m when it exceeds ClockCorrectThreshold either way, else 0.
func correctionFor(m time.Duration) time.Duration {
	if m.Abs() > ClockCorrectThreshold {
		return m
	}
	return 0
}

// Now is this server's wall clock corrected toward the cluster's: the
// configured clock (Config.Clock, or time.Now) plus the correction
// computed at the last clock probe (0 unless this node's clock is more
// than ClockCorrectThreshold off the median of at least three clocks).
// Ingest stamps, skew checks, lookup freshness and the expire command's
// now read it. It keeps time.Now's monotonic reading.
func (n *Node) Now() time.Time {
	return n.wallNow(time.Now).Add(time.Duration(n.clockCorrection.Load()))
}

// ClockCorrection is what Now adds to this server's own clock (0 when
// its clock agrees with the cluster's).
func (n *Node) ClockCorrection() time.Duration {
	return time.Duration(n.clockCorrection.Load())
}

// clockCheckWait bounds how long after start a node waits for a cluster
// median before it trusts its clock unchecked (a cluster whose gossip
// probes never answer must still take writes).
const clockCheckWait = 10 * time.Second

// ClockTrusted reports whether this node may stamp writes with Now. It is
// true once the clock has been compared with the cluster's (a median of
// at least three clocks since start), or when the Raft configuration has
// fewer than three voters (no clock can be outvoted), or after
// clockCheckWait. Before that it is false while the node replays the log
// it found at start (or has a local fault), and then true unless the
// clock runs more than ClockCorrectThreshold past the newest observation
// the index holds: a
// server restarted with a clock far ahead would otherwise stamp
// observations that outlive everything else and let the expire bound
// slide with them. An empty index (a new cluster) is trusted.
func (n *Node) ClockTrusted() bool {
	if n.clockChecked.Load() {
		return true
	}
	if time.Since(n.started) >= clockCheckWait || n.fewVoters.Load() {
		n.clockChecked.Store(true)
		return true
	}
	if n.health.reason() != "" {
		// Still applying the log found at start (or a local fault): the
		// index does not hold the cluster's newest observation yet, so
		// there is nothing to compare the clock with.
		return false
	}
	newest := n.fsm.Index().NewestObservedMs()
	return newest == 0 || n.Now().UnixMilli() <= newest+ClockCorrectThreshold.Milliseconds()
}

// updateClockCorrection recomputes the correction after a probe and logs
// when it starts or stops.
func (n *Node) updateClockCorrection(now time.Time) {
	m, ok := n.offsets.median(now)
	if !ok {
		return
	}
	n.clockChecked.Store(true)
	c := correctionFor(m)
	if old := time.Duration(n.clockCorrection.Swap(int64(c))); (old == 0) != (c == 0) {
		if c != 0 {
			n.log.Warn("raftnode: this server's clock is off the cluster's median clock; stamping, expiry and lookups use the cluster's time until it is fixed (check NTP on this server)",
				"correction", c.Round(time.Millisecond), "threshold", ClockCorrectThreshold)
		} else {
			n.log.Info("raftnode: this server's clock agrees with the cluster's again; correction removed", "was", old.Round(time.Millisecond))
		}
	}
}

// pingClock is the memberlist ping delegate carrying the clock.
type pingClock struct{ n *Node }

// ackClock is the clock a node puts in its acks; tests set it
// (export_test.go) to give one node a clock that is off.
var ackClock = func(nodeID string) time.Time { return time.Now() }

// probeNow is the clock this node puts in its gossip acks.
func (n *Node) probeNow() time.Time {
	if n.cfg.Clock != nil {
		return n.cfg.Clock()
	}
	return ackClock(n.cfg.NodeID)
}

// AckPayload is this node's clock, unix ns, little endian.
func (p pingClock) AckPayload() []byte {
	return binary.LittleEndian.AppendUint64(nil, uint64(p.n.probeNow().UnixNano()))
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
	now := time.Now()
	// This side reads its configured clock, not the ack test hook: the
	// hook only changes what this node tells others.
	p.n.offsets.set(meta.ID, time.Duration(remote+int64(rtt/2)-p.n.wallNow(time.Now).UnixNano()), now)
	p.n.updateClockCorrection(now)
	p.n.updateLeaderOffset()
}

// updateLeaderOffset caches ClockOffsetToLeader for LeaderOffsetCached.
func (n *Node) updateLeaderOffset() {
	d, ok := n.ClockOffsetToLeader()
	if !ok {
		n.leaderOffset.Store(math.MinInt64)
		return
	}
	n.leaderOffset.Store(int64(d))
}

// LeaderOffsetCached is ClockOffsetToLeader as of the last gossip probe
// (about a second old at most, and after a leader change until the next
// probe it may still be the previous leader's): one atomic load, for the
// per-lookup read state.
func (n *Node) LeaderOffsetCached() (time.Duration, bool) {
	v := n.leaderOffset.Load()
	if v == math.MinInt64 {
		return 0, false
	}
	return time.Duration(v), true
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
