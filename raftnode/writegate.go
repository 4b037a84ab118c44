package raftnode

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/inference-cache/inference-cache/fsm"
)

// The packed-format write gate (Consul's ServersMeetMinimumVersion): a
// node writes entries of format fsm.EntryFormatPacked only while every
// server of the latest Raft configuration advertises over gossip that it
// applies that format. A binary that does not would refuse such an entry
// (fsm.ErrEntryFormat) while the others apply it, and the copies would
// diverge.

// writeGateInterval: how often membershipLoop recomputes the gate besides
// on gossip events (catches configuration changes made elsewhere).
const writeGateInterval = time.Second

// writeGate holds whether this node may write format-2 entries. open is
// read on every write; mu serialises recomputation so a flip is logged
// once.
type writeGate struct {
	open   atomic.Bool
	mu     sync.Mutex
	reason string // why the gate is closed ("" while open or never computed)
}

// metaFormat is the newest entry format a server applies according to its
// gossip meta: binaries from before the field advertise nothing, and
// apply format 1.
func metaFormat(m gossipMeta) uint32 {
	return max(m.Fmt, 1)
}

// packedAllowed says whether a node whose own FSM applies up to own may
// write format-2 entries given the Raft configuration servers and the
// gossip view g (last known meta by id, alive or not); self is this
// node's id (its own format is own, whatever gossip says). reason names
// the first obstacle when not allowed.
func packedAllowed(own uint32, self string, servers []raft.Server, g func(id string) (gossipMeta, bool)) (ok bool, reason string) {
	if own < fsm.EntryFormatPacked {
		return false, fmt.Sprintf("this node applies entry format ≤ %d (Config.MaxEntryFormat)", own)
	}
	if len(servers) == 0 {
		return false, "no Raft configuration yet"
	}
	for _, s := range servers {
		id := string(s.ID)
		if id == self {
			continue
		}
		m, known := g(id)
		if !known {
			return false, fmt.Sprintf("server %s is not known from gossip", id)
		}
		if f := metaFormat(m); f < fsm.EntryFormatPacked {
			return false, fmt.Sprintf("server %s applies entry format ≤ %d", id, f)
		}
	}
	return true, ""
}

// refreshWriteGate recomputes the gate from the latest Raft configuration
// and the gossip view, and logs a flip. Cheap: no Raft round trip.
func (n *Node) refreshWriteGate() {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return // shutting down
	}
	servers := f.Configuration().Servers
	n.membersMu.Lock()
	ok, reason := packedAllowed(n.cfg.MaxEntryFormat, n.cfg.NodeID, servers, func(id string) (gossipMeta, bool) {
		m := n.members[id]
		if m == nil {
			return gossipMeta{}, false
		}
		return m.meta, true
	})
	n.membersMu.Unlock()

	g := &n.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	was := g.open.Swap(ok)
	g.reason = reason
	switch {
	case ok && !was:
		n.log.Info("raftnode: writing packed log entries: every server applies entry format 2", "format", fsm.EntryFormatPacked, "servers", len(servers))
	case !ok && was:
		n.log.Info("raftnode: stopped writing packed log entries", "format", 1, "reason", reason)
	}
}

// writeFormat is the entry format this node writes now: 2 while the gate
// is open, else 1.
func (n *Node) writeFormat() uint32 {
	if n.gate.open.Load() {
		return fsm.EntryFormatPacked
	}
	return 1
}

// writeFormatStatus is writeFormat with why the gate is closed ("" when
// open), read together.
func (n *Node) writeFormatStatus() (uint32, string) {
	n.gate.mu.Lock()
	defer n.gate.mu.Unlock()
	if n.gate.open.Load() {
		return fsm.EntryFormatPacked, ""
	}
	if n.gate.reason == "" {
		return 1, "not computed yet"
	}
	return 1, n.gate.reason
}

// formatRefusal says why server id must not be added to the configuration
// ("" = it may be): gossip reports that it applies only format 1 while
// this binary may have written, or may write, format-2 entries. Whether
// any are in the log is not known on every path (a leader that never
// opened its gate, a restart), so the rule does not depend on it: once a
// cluster runs this binary, servers joining it must too. A server unknown
// to gossip is not refused (AddServer names servers gossip may not see
// yet); its format is checked by the gate as soon as gossip reports it.
func (n *Node) formatRefusal(id string) string {
	if n.cfg.MaxEntryFormat < fsm.EntryFormatPacked {
		return ""
	}
	n.membersMu.Lock()
	m := n.members[id]
	n.membersMu.Unlock()
	if m == nil {
		return ""
	}
	if f := metaFormat(m.meta); f < fsm.EntryFormatPacked {
		return fmt.Sprintf("it applies log entry format ≤ %d and this cluster writes format %d (packed ingest); run the same release on it (docs/operations.md, upgrades)", f, fsm.EntryFormatPacked)
	}
	return ""
}
