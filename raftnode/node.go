package raftnode

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
	"google.golang.org/grpc"

	"github.com/inference-cache/inference-cache/fsm"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/policy"
)

// Node is one inference-cache server's replication layer: a Raft member
// whose FSM holds the index, plus gossip membership and write forwarding.
// All methods are safe for concurrent use.
type Node struct {
	cfg   Config
	log   *slog.Logger
	fsm   *fsm.FSM
	raft  *raft.Raft
	store *raftboltdb.BoltStore
	logs  raft.LogStore // the log cache over store, as raft uses it
	snaps *raft.FileSnapshotStore
	trans *raft.NetworkTransport
	ml    *memberlist.Memberlist
	// mlKeyring is memberlist's keyring (nil without gossip encryption);
	// set before memberlist starts, safe for concurrent use after.
	mlKeyring *memberlist.Keyring

	started     time.Time
	ready       atomic.Bool
	leaderReady atomic.Bool // leader and Barrier done
	hasState    atomic.Bool // advertised in gossip meta
	reqSeq      atomic.Uint64
	reqPrefix   string

	proposeCh chan *proposal
	inflight  chan *inflightEntry
	creditCh  chan creditReq
	kick      chan struct{} // gossip changed: reconcile soon

	appliedMu  sync.Mutex
	appliedSig chan struct{} // closed and replaced after every apply batch

	membersMu sync.Mutex
	members   map[string]*member // by node id

	connsMu sync.Mutex
	conns   map[string]*grpc.ClientConn // by gRPC address

	metrics metrics
	health  health    // local log and apply health (health.go)
	gate    writeGate // may this node write packed entries (writegate.go)

	shutdownCh   chan struct{}
	shutdownOnce sync.Once
	fatalCh      chan struct{} // closed when the node's state can no longer be trusted
	fatalOnce    sync.Once
	fatalErr     error // set before fatalCh closes
	shutdownErr  error
	wg           sync.WaitGroup
}

// New opens (or creates) the node's stores under cfg.DataDir, restores the
// FSM from the newest valid snapshot, starts Raft on cfg.RaftAddr and
// memberlist on cfg.GossipAddr, joins cfg.Join in the background and, with
// BootstrapExpect, bootstraps a fresh cluster (SPEC 8). Errors: ErrInvalid
// for a bad Config; otherwise the failing step (a corrupt snapshot names
// snapshot.ErrCorrupt etc.).
func New(cfg Config) (*Node, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	n := &Node{
		cfg:        cfg,
		log:        cfg.Logger.With("node", cfg.NodeID),
		started:    time.Now(),
		proposeCh:  make(chan *proposal, proposeQueue),
		inflight:   make(chan *inflightEntry, inflightEntries),
		creditCh:   make(chan creditReq, creditQueue),
		kick:       make(chan struct{}, 1),
		appliedSig: make(chan struct{}),
		members:    map[string]*member{},
		conns:      map[string]*grpc.ClientConn{},
		shutdownCh: make(chan struct{}),
		reqPrefix:  cfg.NodeID + "-" + fmt.Sprintf("%x", time.Now().UnixNano()) + "-",
	}
	ok := false
	defer func() {
		if !ok {
			// Stop what already started (the transport's forwarder,
			// raft itself when a later step failed) before closing the
			// stores under it.
			close(n.shutdownCh)
			if n.raft != nil {
				_ = n.raft.Shutdown().Error()
			}
			n.closeAll()
		}
	}()
	raftDir := filepath.Join(cfg.DataDir, "raft")
	tmpDir := filepath.Join(cfg.DataDir, "tmp")
	os.RemoveAll(tmpDir) // leftovers of an interrupted snapshot/restore
	for _, d := range []string{raftDir, tmpDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("raftnode: create %s: %w", d, err)
		}
	}

	hooks := cfg.Hooks
	n.fatalCh = make(chan struct{})
	n.fsm = fsm.New(cfg.Policy, fsm.Options{
		TmpDir:         tmpDir,
		Logger:         n.log,
		MaxEntryFormat: cfg.MaxEntryFormat,
		ApplyWorkers:   cfg.ApplyWorkers,
		OnCorrupt:      func(_ uint64, err error) { n.fail(err) },
		Hooks: fsm.Hooks{
			OnApply: func(entries, commands int, d time.Duration) {
				n.metrics.applyBatches.Add(1)
				n.metrics.applyCommands.Add(uint64(commands))
				n.metrics.applyNanos.Add(uint64(d))
				n.signalApplied()
				if hooks.OnApply != nil {
					hooks.OnApply(entries, commands, d)
				}
			},
			OnSnapshot: func(b int64, d time.Duration, err error) {
				if err == nil {
					n.snapshotDone()
					n.metrics.snapshots.Add(1)
					n.metrics.lastSnapshotBytes.Store(uint64(b))
					n.metrics.lastSnapshotNanos.Store(uint64(d))
				}
				if hooks.OnSnapshot != nil {
					hooks.OnSnapshot(b, d, err)
				}
			},
			OnRestore: func(b int64, d time.Duration, err error) {
				if err == nil {
					// At start-up or a snapshot install, this snapshot is
					// now the node's newest: the log-growth limit scales
					// with it (snapshotbytes.go), not with the 256 MiB
					// floor a restarted node would otherwise fall back to.
					n.snapshotDone()
					n.metrics.lastSnapshotBytes.Store(uint64(b))
				}
				n.signalApplied()
				if hooks.OnRestore != nil {
					hooks.OnRestore(b, d, err)
				}
			},
		},
	})

	if err := checkBoltFile(filepath.Join(raftDir, "raft.db")); err != nil {
		return nil, err
	}
	var err error
	n.store, err = raftboltdb.New(raftboltdb.Options{
		Path: filepath.Join(raftDir, "raft.db"),
		// SPEC 13: without these bbolt rewrites its whole freelist on
		// every append once the log has grown.
		BoltOptions: &bbolt.Options{Timeout: 5 * time.Second, NoFreelistSync: true, FreelistType: bbolt.FreelistMapType},
	})
	if err != nil {
		return nil, fmt.Errorf("raftnode: open log store %s: %w", raftDir, err)
	}
	var base raft.LogStore = chunkedCompaction{n.store}
	if wrapLogStore != nil {
		base = wrapLogStore(cfg.NodeID, base)
	}
	logs, err := raft.NewLogCache(logCacheSize, countingLogStore{base, &n.metrics, &n.health})
	if err != nil {
		return nil, fmt.Errorf("raftnode: log cache: %w", err)
	}
	n.logs = logs
	hl := n.hclog()
	// Under the log store's file lock: no other process writes here.
	n.removeUnfinishedSnapshots(raftDir)
	n.snaps, err = raft.NewFileSnapshotStoreWithLogger(raftDir, cfg.SnapshotRetain, hl.Named("snapshot"))
	if err != nil {
		return nil, fmt.Errorf("raftnode: snapshot store %s: %w", raftDir, err)
	}
	adv, err := net.ResolveTCPAddr("tcp", cfg.RaftAdvertise)
	if err != nil {
		return nil, fmt.Errorf("%w: raft advertise address %q: %v", ErrInvalid, cfg.RaftAdvertise, err)
	}
	ntc := &raft.NetworkTransportConfig{
		Logger:  hl.Named("transport"),
		MaxPool: transportPool,
		Timeout: transportTimeout,
		// Pipelining depth of AppendEntries to each follower (raft's
		// default 2 leaves no request queued behind the one in flight).
		MaxRPCsInFlight: transportInFlight,
	}
	if cfg.RaftTLS != nil {
		n.trans, err = newTLSTransport(cfg.RaftAddr, adv, cfg.RaftTLS, ntc)
	} else {
		n.trans, err = raft.NewTCPTransportWithConfig(cfg.RaftAddr, adv, ntc)
	}
	if err != nil {
		return nil, fmt.Errorf("raftnode: raft transport on %s: %w", cfg.RaftAddr, err)
	}
	has, err := raft.HasExistingState(logs, n.store, n.snaps)
	if err != nil {
		return nil, fmt.Errorf("raftnode: inspect raft state: %w", err)
	}
	n.hasState.Store(has)
	if err := checkRaftState(n.store, n.snaps); err != nil {
		return nil, err
	}

	notify := make(chan bool, 16)
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.HeartbeatTimeout = cfg.Timing.HeartbeatTimeout
	rc.ElectionTimeout = cfg.Timing.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.Timing.LeaderLeaseTimeout
	rc.CommitTimeout = cfg.Timing.CommitTimeout
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.TrailingLogs = cfg.TrailingLogs
	rc.BatchApplyCh = true
	rc.MaxAppendEntries = maxAppendEntries
	rc.NotifyCh = notify
	rc.Logger = hl
	n.raft, err = newRaft(rc, n.fsm, logs, n.store, n.snaps, newCommitWatch(n.trans, &n.health.leaderCommit, n.shutdownCh))
	if err != nil {
		return nil, fmt.Errorf("raftnode: start raft: %w", err)
	}
	n.ready.Store(true)
	// A log tail the FSM has not applied yet (a restart) is replayed once
	// a leader confirms the commit index: until then reads are stale and
	// the node is not Serving (health.go).
	lt := &lagTracker{bootLast: n.raft.LastIndex()}
	lt.caughtUp = lt.bootLast <= n.fsm.AppliedIndex()
	if !lt.caughtUp {
		n.health.setLag(StaleCatchingUp)
	}

	if err := n.startGossip(); err != nil {
		return nil, err
	}
	n.wg.Add(7)
	go n.snapshotByBytes()
	go n.healthLoop(lt)
	go n.leaderLoop(notify)
	go n.batcher()
	go n.committer()
	go n.creditLoop()
	go n.membershipLoop()
	ok = true
	n.log.Info("raftnode: started", "raft", cfg.RaftAdvertise, "gossip", cfg.GossipAddr, "grpc", cfg.GRPCAddr,
		"existing_state", has, "applied_index", n.fsm.AppliedIndex())
	return n, nil
}

func (c *Config) fill() error {
	if c.NodeID == "" || c.DataDir == "" || c.RaftAddr == "" || c.GossipAddr == "" {
		return fmt.Errorf("%w: NodeID, DataDir, RaftAddr and GossipAddr are required", ErrInvalid)
	}
	if c.RaftAdvertise == "" {
		c.RaftAdvertise = c.RaftAddr
	}
	if c.GossipAdvertise == "" {
		c.GossipAdvertise = c.GossipAddr
	}
	if c.Policy.MaxReplicas == 0 && c.Policy.RankingVersion == "" {
		c.Policy = policy.Default()
	}
	if err := c.Policy.Validate(); err != nil {
		return fmt.Errorf("%w: initial policy: %w", ErrInvalid, err)
	}
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = DefaultSnapshotThreshold
	}
	if c.SnapshotLogBytes == 0 {
		c.SnapshotLogBytes = DefaultSnapshotLogBytes
	}
	if c.SnapshotInterval == 0 {
		c.SnapshotInterval = DefaultSnapshotInterval
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = DefaultTrailingLogs
	}
	if c.SnapshotRetain < DefaultSnapshotRetain {
		c.SnapshotRetain = DefaultSnapshotRetain
	}
	if c.ExpireInterval == 0 {
		c.ExpireInterval = DefaultExpireInterval
	}
	if c.WriteRetry == 0 {
		c.WriteRetry = DefaultWriteRetry
	}
	if c.GroupCommitLinger == 0 {
		c.GroupCommitLinger = DefaultGroupCommitLinger
	}
	if c.GroupCommitMaxBytes == 0 {
		c.GroupCommitMaxBytes = DefaultGroupCommitMaxBytes
	}
	t := &c.Timing
	if t.HeartbeatTimeout == 0 {
		t.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	if t.ElectionTimeout == 0 {
		t.ElectionTimeout = DefaultElectionTimeout
	}
	if t.LeaderLeaseTimeout == 0 {
		t.LeaderLeaseTimeout = DefaultLeaderLeaseTimeout
	}
	if t.CommitTimeout == 0 {
		t.CommitTimeout = DefaultCommitTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.RaftLogLevel == 0 {
		c.RaftLogLevel = slog.LevelWarn
	}
	switch {
	case c.ApplyWorkers < 0:
		return fmt.Errorf("raftnode: ApplyWorkers %d: must be 0 (one per CPU, at most %d) or positive", c.ApplyWorkers, MaxApplyWorkers)
	case c.ApplyWorkers == 0:
		c.ApplyWorkers = min(runtime.GOMAXPROCS(0), MaxApplyWorkers)
	}
	if c.MaxEntryFormat == 0 || c.MaxEntryFormat > fsm.EntryFormat {
		c.MaxEntryFormat = fsm.EntryFormat
	}
	return nil
}

// hclog adapts cfg.Logger for hashicorp/raft: each raft line becomes one
// slog record at raft's own level (an [ERROR] from raft is an ERROR
// record, not an INFO line with the level in its text), with raft's
// key/value pairs as attributes.
func (n *Node) hclog() hclog.Logger {
	return n.interceptLogger("raft", n.cfg.RaftLogLevel)
}

// memberlistLogger adapts cfg.Logger for memberlist, which logs through a
// *log.Logger with the level in the text ("[ERR] memberlist: ..."): hclog
// infers each line's level from that prefix, so a gossip failure such as
// "no installed keys could decrypt the message" is a WARN/ERROR record at
// the default log level, not hidden at DEBUG.
func (n *Node) memberlistLogger() *log.Logger {
	return n.interceptLogger("memberlist", slog.LevelDebug).StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})
}

// interceptLogger is an hclog.Logger named name whose records at or above
// min go to cfg.Logger (which applies its own level too).
func (n *Node) interceptLogger(name string, min slog.Level) hclog.InterceptLogger {
	// The base logger writes nowhere; its level only answers IsDebug-style
	// questions and drops what the sink would drop anyway. The sink does
	// the writing.
	lvl := hclog.Warn
	switch {
	case min <= slog.LevelDebug:
		lvl = hclog.Debug
	case min <= slog.LevelInfo:
		lvl = hclog.Info
	case min >= slog.LevelError:
		lvl = hclog.Error
	}
	il := hclog.NewInterceptLogger(&hclog.LoggerOptions{Name: name, Level: lvl, Output: io.Discard})
	il.RegisterSink(slogSink{log: n.log, min: min})
	return il
}

// slogSink forwards hclog records at or above min to a slog.Logger.
type slogSink struct {
	log *slog.Logger
	min slog.Level
}

func (s slogSink) Accept(name string, level hclog.Level, msg string, args ...interface{}) {
	var l slog.Level
	switch level {
	case hclog.Trace, hclog.Debug:
		l = slog.LevelDebug
	case hclog.Info, hclog.NoLevel:
		l = slog.LevelInfo
	case hclog.Warn:
		l = slog.LevelWarn
	default:
		l = slog.LevelError
	}
	if l < s.min {
		return
	}
	s.log.Log(context.Background(), l, msg, append([]any{"component", name}, args...)...)
}

func (n *Node) signalApplied() {
	n.appliedMu.Lock()
	close(n.appliedSig)
	n.appliedSig = make(chan struct{})
	n.appliedMu.Unlock()
}

// waitApplied waits until this node's FSM applied idx (read-your-writes
// on the node that acknowledged), ctx or the write budget.
func (n *Node) waitApplied(ctx context.Context, idx uint64) error {
	for {
		n.appliedMu.Lock()
		sig := n.appliedSig
		n.appliedMu.Unlock()
		if n.fsm.AppliedIndex() >= idx {
			return nil
		}
		select {
		case <-sig:
		case <-ctx.Done():
			return fmt.Errorf("%w: waiting for local apply of index %d: %v", ErrTimeout, idx, ctx.Err())
		case <-n.shutdownCh:
			return ErrShutdown
		}
	}
}

// RegisterGRPC registers the internal forwarding service
// (inferencecache.raftnode.v1.Forward) on s. Call it before s.Serve on
// every node; followers dial the leader's Config.GRPCAddr.
func (n *Node) RegisterGRPC(s *grpc.Server) { registerForward(s, n) }

// Index returns the local index for lookups. Never blocks on the leader.
// The pointer changes after a snapshot restore: call Index per lookup.
func (n *Node) Index() *index.Index { return n.fsm.Index() }

// Lookup answers req into res from the local index (Index().Lookup).
func (n *Node) Lookup(req *index.LookupRequest, res *index.Result) { n.fsm.Index().Lookup(req, res) }

// Policy returns the committed policy in force on this node.
func (n *Node) Policy() policy.Policy { return n.fsm.Policy() }

// Ready reports that the node's state is loaded (snapshot restored, Raft
// running) and trustworthy: lookups are answered from it. Log entries
// after the snapshot are replayed once a leader confirms the commit
// index. For readiness (gRPC health SERVING, /readyz) use Serving, which
// also requires the local log and state machine to keep up.
func (n *Node) Ready() bool { return n.ready.Load() }

// ReadState says how fresh this node's local reads are (SPEC 5, 8).
type ReadState struct {
	// NodeID is this node.
	NodeID string
	// AppliedIndex is the last log index the FSM applied.
	AppliedIndex uint64
	// LastLeaderContact is the time since this node last heard from a
	// leader (0 on the leader; since start when never).
	LastLeaderContact time.Duration
	// Stale: this node's answers may be out of date: never heard from a
	// leader since start, or longer ago than the policy's MaxStaleness; a
	// leader that has not finished its Barrier; or a local fault: appends
	// to its log failing, replaying the log found at start, or committed
	// entries unapplied for longer than MaxStaleness (health.go; the node
	// is then not Serving).
	Stale bool
	// StaleReason says why Stale is set (one of the Stale* constants; ""
	// when not stale). A local fault takes precedence.
	StaleReason string
	// Leader: this node is the leader.
	Leader bool
}

// ReadState returns the current read freshness. Cheap; call per lookup.
func (n *Node) ReadState() ReadState {
	rs := ReadState{NodeID: n.cfg.NodeID, AppliedIndex: n.fsm.AppliedIndex()}
	if n.raft.State() == raft.Leader {
		rs.Leader = true
		if !n.leaderReady.Load() {
			rs.StaleReason = StaleLeaderBarrier
		}
	} else if lc := n.raft.LastContact(); lc.IsZero() {
		rs.LastLeaderContact = time.Since(n.started)
		rs.StaleReason = StaleNoLeaderYet
	} else {
		rs.LastLeaderContact = time.Since(lc)
		if rs.LastLeaderContact > n.fsm.Index().Policy().MaxStaleness {
			rs.StaleReason = StaleNoLeader
		}
	}
	if r := n.health.reason(); r != "" {
		rs.StaleReason = r
	}
	rs.Stale = rs.StaleReason != ""
	return rs
}

// Member is one server as seen by Raft and gossip.
type Member struct {
	ID       string
	RaftAddr string
	GRPCAddr string
	// Suffrage is "Voter", "Nonvoter", "Staging" or "" (gossip only, not in
	// the Raft configuration).
	Suffrage string
	// Healthy: gossip reports the member alive.
	Healthy bool
}

// Status is the node's view of the cluster (SPEC 8 admin status).
type Status struct {
	NodeID string
	// State is "Leader", "Follower", "Candidate" or "Shutdown".
	State         string
	LeaderID      string
	LeaderAddress string // the leader's gRPC address ("" if unknown)
	LeaderRaft    string // the leader's Raft address
	Term          uint64
	AppliedIndex  uint64 // FSM applied index
	CommitIndex   uint64
	LastLogIndex  uint64
	// LastLeaderContact: 0 on the leader.
	LastLeaderContact time.Duration
	Members           []Member
	// WriteFormat is the log entry format this node writes now: 2
	// (fsm.EntryFormatPacked; packed ingest commands) once every server of
	// the Raft configuration advertises over gossip that it applies it and
	// this node does too, else 1. On a follower it is the encoding of the
	// ingest commands it forwards; the leader's own value decides what
	// enters the log (writegate.go).
	WriteFormat uint32
	// WriteFormatReason says why WriteFormat is 1 (e.g. "server n3
	// applies entry format ≤ 1"); "" when it is 2.
	WriteFormatReason string
}

// Status returns the node's current view. Members are sorted by id.
func (n *Node) Status() Status {
	rs := n.ReadState()
	laddr, lid := n.raft.LeaderWithID()
	st := Status{
		NodeID:            n.cfg.NodeID,
		State:             n.raft.State().String(),
		LeaderID:          string(lid),
		LeaderRaft:        string(laddr),
		Term:              n.raft.CurrentTerm(),
		AppliedIndex:      rs.AppliedIndex,
		CommitIndex:       n.raft.CommitIndex(),
		LastLogIndex:      n.raft.LastIndex(),
		LastLeaderContact: rs.LastLeaderContact,
	}
	if m := n.member(string(lid)); m != nil {
		st.LeaderAddress = m.meta.GRPC
	}
	st.Members = n.memberList()
	st.WriteFormat, st.WriteFormatReason = n.writeFormatStatus()
	return st
}

// Digest returns the FSM's applied index and the 64-bit index digest as a
// consistent pair; equal on every node at an equal applied index.
func (n *Node) Digest() (appliedIndex, digest uint64) { return n.fsm.Digest() }

// Shutdown stops the node gracefully: a leader first transfers leadership
// (bounded by 5 s), then the node leaves gossip, stops Raft and closes its
// stores. Idempotent.
func (n *Node) Shutdown() error { return n.shutdown(true) }

// Kill stops the node abruptly, as a crash would look to peers: no
// leadership transfer, no gossip leave. For tests and fatal paths.
func (n *Node) Kill() error { return n.shutdown(false) }

func (n *Node) shutdown(graceful bool) error {
	n.shutdownOnce.Do(func() {
		if graceful && n.raft != nil && n.raft.State() == raft.Leader && n.voters() > 1 {
			f := n.raft.LeadershipTransfer()
			done := make(chan error, 1)
			go func() { done <- f.Error() }()
			select {
			case err := <-done:
				if err != nil {
					n.log.Warn("raftnode: leadership transfer before shutdown failed", "err", err)
				} else {
					n.log.Info("raftnode: leadership transferred before shutdown")
				}
			case <-time.After(transferTimeout):
				n.log.Warn("raftnode: leadership transfer timed out; shutting down anyway")
			}
		}
		close(n.shutdownCh)
		// raft.Shutdown waits for a snapshot being written, which takes
		// minutes for a large index on a busy node: stop it (it is not
		// recorded; the next start replays the log instead).
		if n.fsm != nil {
			n.fsm.AbortSnapshots()
		}
		if n.ml != nil {
			if graceful {
				n.ml.Leave(time.Second)
			}
			n.ml.Shutdown()
		}
		if n.raft != nil {
			n.shutdownErr = translate(n.raft.Shutdown().Error())
		}
		n.wg.Wait()
		n.closeAll()
	})
	return n.shutdownErr
}

// shuttingDown reports whether Shutdown has begun.
func (n *Node) shuttingDown() bool {
	select {
	case <-n.shutdownCh:
		return true
	default:
		return false
	}
}

func (n *Node) closeAll() {
	if n.ml != nil {
		n.ml.Shutdown()
	}
	if n.raft == nil && n.trans != nil {
		n.trans.Close()
	}
	if n.trans != nil {
		n.trans.Close()
	}
	if n.store != nil {
		n.store.Close()
	}
	n.connsMu.Lock()
	for a, c := range n.conns {
		c.Close()
		delete(n.conns, a)
	}
	n.connsMu.Unlock()
}

func (n *Node) voters() int {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return 0
	}
	v := 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			v++
		}
	}
	return v
}

// NewRequestID returns a fresh request id unique to this node's run.
func (n *Node) NewRequestID() string {
	return n.reqPrefix + fmt.Sprint(n.reqSeq.Add(1))
}
