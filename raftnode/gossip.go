package raftnode

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/inference-cache/inference-cache/command"
)

// gossipMeta is what every server advertises in memberlist (≤ 512 bytes).
type gossipMeta struct {
	ID    string `json:"id"`
	Raft  string `json:"raft"`
	GRPC  string `json:"grpc"`
	State bool   `json:"state"` // holds Raft state (bootstrapped or joined)
	// Fmt is the log entry format the server writes and the newest it
	// applies (command.EntryFormat). Informational: every server of this
	// code writes the same, single format, so nothing depends on it.
	Fmt uint32 `json:"fmt,omitempty"`
	// AppendFail: the server's own log appends are failing (a full
	// disk); it is not healthy whatever gossip says.
	AppendFail bool `json:"af,omitempty"`
	// Nonce is random per process (Node.nonce): it tells a restarted
	// server from the process that was running before under the same id,
	// which memberlist's name and address cannot (trackRemovals).
	Nonce string `json:"nonce,omitempty"`
}

type member struct {
	meta   gossipMeta
	alive  bool
	since  time.Time // when alive last changed
	gossip string    // its gossip address host:port (for re-joins)
}

type delegate struct{ n *Node }

func (d delegate) NodeMeta(limit int) []byte {
	b, _ := json.Marshal(gossipMeta{ID: d.n.cfg.NodeID, Raft: d.n.cfg.RaftAdvertise, GRPC: d.n.cfg.GRPCAddr, State: d.n.hasState.Load(), Fmt: command.EntryFormat,
		AppendFail: d.n.health.appendFailing.Load(), Nonce: d.n.nonce})
	if len(b) > limit {
		return nil
	}
	return b
}
func (delegate) NotifyMsg([]byte)                           {}
func (delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (delegate) LocalState(join bool) []byte                { return nil }
func (delegate) MergeRemoteState(buf []byte, join bool)     {}

type events struct{ n *Node }

func (e events) NotifyJoin(m *memberlist.Node)   { e.n.observe(m, true) }
func (e events) NotifyLeave(m *memberlist.Node)  { e.n.observe(m, false) }
func (e events) NotifyUpdate(m *memberlist.Node) { e.n.observe(m, true) }

func (n *Node) observe(m *memberlist.Node, alive bool) {
	var meta gossipMeta
	if err := json.Unmarshal(m.Meta, &meta); err != nil || meta.ID == "" {
		return // not an inference-cache server
	}
	n.membersMu.Lock()
	cur := n.members[meta.ID]
	if cur == nil || cur.alive != alive {
		cur = &member{alive: alive, since: time.Now()}
		n.members[meta.ID] = cur
	}
	cur.meta = meta
	cur.gossip = m.Address()
	n.membersMu.Unlock()
	n.peers.set(meta.ID, meta.GRPC)
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

func (n *Node) member(id string) *member {
	n.membersMu.Lock()
	defer n.membersMu.Unlock()
	if m := n.members[id]; m != nil {
		c := *m
		return &c
	}
	return nil
}

func (n *Node) gossipSnapshot() map[string]member {
	n.membersMu.Lock()
	defer n.membersMu.Unlock()
	out := make(map[string]member, len(n.members))
	for id, m := range n.members {
		out[id] = *m
	}
	return out
}

// memberList merges the Raft configuration with gossip, sorted by id.
func (n *Node) memberList() []Member {
	g := n.gossipSnapshot()
	byID := map[string]*Member{}
	if f := n.raft.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			byID[string(s.ID)] = &Member{ID: string(s.ID), RaftAddr: string(s.Address), Suffrage: s.Suffrage.String()}
		}
	}
	for id, m := range g {
		x := byID[id]
		if x == nil {
			x = &Member{ID: id, RaftAddr: m.meta.Raft}
			byID[id] = x
		}
		x.GRPCAddr = m.meta.GRPC
		x.Healthy = m.alive
		switch {
		case !m.alive:
			x.UnhealthyReason = "gossip: not alive"
		case m.meta.AppendFail && id != n.cfg.NodeID:
			x.UnhealthyReason = "its log appends are failing (disk full or I/O errors)"
		}
	}
	out := make([]Member, 0, len(byID))
	for id, m := range byID {
		if _, seen := g[id]; !seen {
			m.UnhealthyReason = "not seen in gossip"
		}
		if m.UnhealthyReason == "" {
			if id == n.cfg.NodeID && n.health.appendFailing.Load() {
				m.UnhealthyReason = "this node's log appends are failing (disk full or I/O errors)"
			} else if r := n.raftContactProblem(id); r != "" {
				m.UnhealthyReason = r
			}
		}
		m.Healthy = m.UnhealthyReason == ""
		out = append(out, *m)
	}
	slices.SortFunc(out, func(a, b Member) int {
		if a.ID < b.ID {
			return -1
		}
		if a.ID > b.ID {
			return 1
		}
		return 0
	})
	return out
}

func (n *Node) startGossip() error {
	mc := memberlist.DefaultLANConfig()
	if n.cfg.Timing.WANGossip {
		mc = memberlist.DefaultWANConfig()
	}
	if n.cfg.Timing.LocalGossip {
		mc = memberlist.DefaultLocalConfig()
		// A restarted server's new meta (its entry format) reaches
		// the others in a refute broadcast over UDP; when that is lost
		// under load only the periodic full-state sync delivers it,
		// every 15 s in this profile. On loopback that sync is cheap.
		mc.PushPullInterval = localPushPull
	}
	mc.Name = n.cfg.NodeID
	host, port, err := splitHostPort(n.cfg.GossipAddr)
	if err != nil {
		return fmt.Errorf("%w: gossip address %q: %v", ErrInvalid, n.cfg.GossipAddr, err)
	}
	mc.BindAddr, mc.BindPort = host, port
	ahost, aport, err := splitHostPort(n.cfg.GossipAdvertise)
	if err != nil {
		return fmt.Errorf("%w: gossip advertise address %q: %v", ErrInvalid, n.cfg.GossipAdvertise, err)
	}
	if ahost != "0.0.0.0" && ahost != "" {
		mc.AdvertiseAddr, mc.AdvertisePort = ahost, aport
	}
	mc.Delegate = delegate{n}
	mc.Events = events{n}
	mc.Ping = pingClock{n}
	mc.LogOutput = nil
	mc.Logger = n.memberlistLogger()
	if err := n.gossipEncryption(mc); err != nil {
		return err
	}
	if wrapGossipTransport != nil {
		nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{host}, BindPort: port, Logger: mc.Logger})
		if err != nil {
			return fmt.Errorf("raftnode: start gossip on %s: %w", n.cfg.GossipAddr, err)
		}
		mc.Transport = wrapGossipTransport(n.cfg.NodeID, nt)
	}
	n.ml, err = memberlist.Create(mc)
	if err != nil {
		return fmt.Errorf("raftnode: start gossip on %s: %w", n.cfg.GossipAddr, err)
	}
	return nil
}

func splitHostPort(a string) (string, int, error) {
	h, p, err := net.SplitHostPort(a)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	return h, port, err
}

// wrapGossipTransport, when set (tests only, before New), wraps node
// nodeID's memberlist transport: a test drops gossip without touching
// Raft.
var wrapGossipTransport func(nodeID string, t memberlist.Transport) memberlist.Transport

// localPushPull is the full-state gossip sync interval of the loopback
// profile (Timing.LocalGossip).
const localPushPull = 2 * time.Second

// A gossip join still failing joinQuietFor after start is logged as a
// warning, at most once per joinWarnEvery.
const (
	joinQuietFor  = 10 * time.Second
	joinWarnEvery = 30 * time.Second
)

// gossipJoin is the membership loop's record of its gossip joins.
type gossipJoin struct {
	joined                             bool
	lastJoin, lastJoinWarn, lastRejoin time.Time
}

// keepJoined joins the gossip pool through Config.Join, retried every
// second until an address answers, and once in the pool re-joins while
// voters are missing from it (gossipheal.go).
func (n *Node) keepJoined(j *gossipJoin) {
	if !j.joined && n.ml.NumMembers() > 1 {
		// Others joined this node: it is in the pool without its own
		// Join having succeeded (it started first). Losing members
		// later is the re-join's job.
		j.joined = true
	}
	if !j.joined && time.Since(j.lastJoin) > time.Second {
		j.lastJoin = time.Now()
		if k, err := n.ml.Join(n.cfg.Join); k > 0 {
			j.joined = true
			n.log.Info("raftnode: joined gossip", "contacted", k)
		} else if err != nil {
			// Peers not up yet is normal at first boot; still
			// failing after joinQuietFor is worth an operator's
			// attention (a wrong gossip key says so here).
			lvl := slog.LevelDebug
			if time.Since(n.started) > joinQuietFor && time.Since(j.lastJoinWarn) >= joinWarnEvery {
				lvl, j.lastJoinWarn = slog.LevelWarn, time.Now()
			}
			n.log.Log(context.Background(), lvl, "raftnode: gossip join failed, retrying", "join", n.cfg.Join, "err", err)
		}
	}
	if j.joined && time.Since(j.lastRejoin) >= n.rejoinInterval() {
		j.lastRejoin = time.Now()
		n.maybeRejoin()
	}
}
