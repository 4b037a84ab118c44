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
	"github.com/hashicorp/raft"

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

// membershipLoop joins the gossip pool, bootstraps when asked to, keeps
// the advertised "has Raft state" flag current and, on the leader,
// reconciles the Raft configuration with gossip.
func (n *Node) membershipLoop() {
	defer n.wg.Done()
	joined := len(n.cfg.Join) == 0
	lastJoin, lastJoinWarn, lastRejoin := time.Time{}, time.Time{}, time.Now()
	t := time.NewTicker(bootstrapPoll)
	defer t.Stop()
	lastReconcile := time.Time{}
	deadSince := map[string]time.Time{}
	removed := map[string]string{} // trackRemovals
	var inCfg map[string]string    // the configuration's ids at the last tick → gossip nonce then
	for {
		kicked := false
		select {
		case <-n.shutdownCh:
			return
		case <-t.C:
		case <-n.kick:
			kicked = true
		}
		if !joined && n.ml.NumMembers() > 1 {
			// Others joined this node: it is in the pool without its own
			// Join having succeeded (it started first). Losing members
			// later is the re-join's job.
			joined = true
		}
		if !joined && time.Since(lastJoin) > time.Second {
			lastJoin = time.Now()
			if k, err := n.ml.Join(n.cfg.Join); k > 0 {
				joined = true
				n.log.Info("raftnode: joined gossip", "contacted", k)
			} else if err != nil {
				// Peers not up yet is normal at first boot; still
				// failing after joinQuietFor is worth an operator's
				// attention (a wrong gossip key says so here).
				lvl := slog.LevelDebug
				if time.Since(n.started) > joinQuietFor && time.Since(lastJoinWarn) >= joinWarnEvery {
					lvl, lastJoinWarn = slog.LevelWarn, time.Now()
				}
				n.log.Log(context.Background(), lvl, "raftnode: gossip join failed, retrying", "join", n.cfg.Join, "err", err)
			}
		}
		if joined && time.Since(lastRejoin) >= n.rejoinInterval() {
			lastRejoin = time.Now()
			n.maybeRejoin()
		}
		if !n.hasState.Load() {
			if f := n.raft.GetConfiguration(); f.Error() == nil && len(f.Configuration().Servers) > 0 {
				n.setHasState()
			} else if n.cfg.BootstrapExpect > 0 {
				n.tryBootstrap()
			}
		}
		f := n.raft.GetConfiguration()
		if f.Error() != nil {
			continue
		}
		// One read of the configuration for both: a removal reconcile
		// sees missing has been recorded by then.
		cfg := f.Configuration()
		inCfg = trackRemovals(inCfg, cfg, n.gossipSnapshot(), removed)
		n.fewVoters.Store(countVoters(cfg) < 3)
		n.takeOpRemovals(inCfg, removed)
		if n.leaderReady.Load() && (kicked || time.Since(lastReconcile) >= reconcileInterval) {
			lastReconcile = time.Now()
			n.reconcile(cfg, deadSince, removed)
			n.reconcileRounds.Add(1)
		}
	}
}

// trackRemovals runs on every node, every membership tick: it returns the
// ids of cfg, each with the nonce gossip shows for it alive now ("" when
// not alive or without one), and records in removed (id → nonce) each
// server that left the configuration since prev while gossip showed it
// alive at that previous tick. Dead server cleanup only removes servers
// gossip calls dead, so such a removal is an operator's (RemoveServer) of
// a running process, which reconcile must not undo by adding it back
// while that same process lives. The nonce recorded is the one of the
// previous tick, when the server was still in the configuration: an
// operator or a supervisor that removes a server and starts it again
// wiped within the same tick must not have the new process recorded.
// A new nonce (a node wiped and started again under its id) is a new
// server and is added. An id back in the configuration (an operator's
// AddServer) has its record dropped.
//
// Every node keeps the records, not only the leader, so a follower that
// becomes leader does not re-add either. They live in memory: a node
// started after the removal (or restarted) has none and would re-add a
// removed process still running. A server whose meta carries no nonce (an
// older release) is not recorded.
func trackRemovals(prev map[string]string, cfg raft.Configuration, g map[string]member, removed map[string]string) map[string]string {
	cur := make(map[string]string, len(cfg.Servers))
	for _, s := range cfg.Servers {
		id := string(s.ID)
		cur[id] = ""
		if m, ok := g[id]; ok && m.alive {
			cur[id] = m.meta.Nonce
		}
		delete(removed, id)
	}
	for id, nonce := range prev {
		if _, still := cur[id]; still || nonce == "" {
			continue
		}
		removed[id] = nonce
	}
	return cur
}

// countVoters is the number of voters in cfg.
func countVoters(cfg raft.Configuration) int {
	v := 0
	for _, s := range cfg.Servers {
		if s.Suffrage == raft.Voter {
			v++
		}
	}
	return v
}

// opRemoval is a RemoveServer this node made: the removed process's
// gossip nonce, and when.
type opRemoval struct {
	nonce string
	at    time.Time
}

// opRemovalTTL drops a RemoveServer record whose removal never showed in
// the configuration (it failed).
const opRemovalTTL = 30 * time.Second

// takeOpRemovals moves the RemoveServer calls of this node whose server has
// left the configuration cur into removed (the same records trackRemovals
// keeps), so the leader that made a removal never re-adds the removed
// process, even when a membership tick missed it alive.
func (n *Node) takeOpRemovals(cur map[string]string, removed map[string]string) {
	n.opRemoved.Range(func(k, v any) bool {
		id, r := k.(string), v.(opRemoval)
		if _, in := cur[id]; !in {
			if _, done := removed[id]; !done {
				removed[id] = r.nonce
			}
			n.opRemoved.Delete(id)
		} else if time.Since(r.at) > opRemovalTTL {
			n.opRemoved.Delete(id)
		}
		return true
	})
}

func (n *Node) setHasState() {
	if !n.hasState.Swap(true) {
		n.ml.UpdateNode(time.Second)
	}
}

// tryBootstrap bootstraps when BootstrapExpect servers without Raft state
// (this one included) see each other and no visible server holds state.
// Every such server bootstraps with the identical configuration: all
// visible servers sorted by id; raft's BootstrapCluster writes the same
// entry at index 1 on each, so they form one cluster whatever the start
// order. A server that sees a peer with state waits to be added instead.
func (n *Node) tryBootstrap() {
	g := n.gossipSnapshot()
	servers := []raft.Server{}
	for id, m := range g {
		if !m.alive {
			continue
		}
		if m.meta.State && id != n.cfg.NodeID {
			return // a cluster exists: its leader will add us
		}
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(m.meta.Raft)})
	}
	if _, ok := g[n.cfg.NodeID]; !ok || len(servers) < n.cfg.BootstrapExpect {
		return
	}
	slices.SortFunc(servers, func(a, b raft.Server) int {
		if a.ID < b.ID {
			return -1
		}
		if a.ID > b.ID {
			return 1
		}
		return 0
	})
	err := n.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error()
	if err != nil && err != raft.ErrCantBootstrap {
		n.log.Error("raftnode: bootstrap failed", "err", err)
		return
	}
	ids := make([]string, len(servers))
	for i, s := range servers {
		ids[i] = string(s.ID)
	}
	n.log.Info("raftnode: bootstrapped cluster", "servers", ids, "already", err == raft.ErrCantBootstrap)
	n.setHasState()
}

// reconcile (leader only) adds alive gossip servers missing from the Raft
// configuration cfg as voters (or updates a changed address), except a
// process removed while running (removed, see trackRemovals), and, when
// DeadServerCleanup > 0, removes servers dead for longer than the grace
// period within the safety rules of SPEC 8.
func (n *Node) reconcile(cfg raft.Configuration, deadSince map[string]time.Time, removed map[string]string) {
	inCfg := map[string]raft.Server{}
	voters := 0
	for _, s := range cfg.Servers {
		inCfg[string(s.ID)] = s
		if s.Suffrage == raft.Voter {
			voters++
		}
	}
	g := n.gossipSnapshot()
	ids := make([]string, 0, len(g))
	for id := range g {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		m := g[id]
		if !m.alive || m.meta.Raft == "" {
			continue
		}
		s, ok := inCfg[id]
		if ok && string(s.Address) == m.meta.Raft && s.Suffrage == raft.Voter {
			continue
		}
		if nonce, was := removed[id]; !ok && was {
			if nonce == m.meta.Nonce {
				continue // the process an operator removed: still running
			}
			delete(removed, id) // restarted since: a new server
			n.log.Info("raftnode: removed server restarted; adding it back", "id", id)
		}
		err := n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(m.meta.Raft), 0, 5*time.Second).Error()
		if err != nil {
			n.log.Warn("raftnode: add voter failed", "id", id, "raft", m.meta.Raft, "err", err)
			return
		}
		n.log.Info("raftnode: added voter from gossip", "id", id, "raft", m.meta.Raft)
		return // one change per round; the next round sees the new config
	}

	if n.cfg.DeadServerCleanup <= 0 {
		return
	}
	now := time.Now()
	var dead []string
	for id := range inCfg {
		if id == n.cfg.NodeID {
			continue
		}
		m, seen := g[id]
		switch {
		case seen && m.alive:
			delete(deadSince, id)
			continue
		case seen:
			if _, ok := deadSince[id]; !ok || m.since.Before(deadSince[id]) {
				deadSince[id] = m.since
			}
		default:
			if _, ok := deadSince[id]; !ok {
				deadSince[id] = now
			}
		}
		if now.Sub(deadSince[id]) >= n.cfg.DeadServerCleanup {
			dead = append(dead, id)
		}
	}
	for id := range deadSince {
		if _, ok := inCfg[id]; !ok {
			delete(deadSince, id)
		}
	}
	slices.Sort(dead)
	budget := CleanupBudget(voters, len(dead))
	for _, id := range dead[:budget] {
		if err := n.raft.RemoveServer(raft.ServerID(id), 0, 5*time.Second).Error(); err != nil {
			n.log.Warn("raftnode: dead server cleanup failed", "id", id, "err", err)
			return
		}
		delete(deadSince, id)
		n.log.Warn("raftnode: removed dead server", "id", id, "grace", n.cfg.DeadServerCleanup, "voters_before", voters)
	}
}

// CleanupBudget is how many of dead servers one cleanup round may remove
// from a configuration with voters voters: never more than (voters−1)/2
// at once and never below 3 voters (SPEC 8).
func CleanupBudget(voters, dead int) int {
	b := min(dead, (voters-1)/2, voters-3)
	return max(b, 0)
}
