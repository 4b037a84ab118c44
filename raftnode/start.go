package raftnode

// The steps of New, in the order it takes them.

import (
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
	"google.golang.org/grpc"

	"github.com/inference-cache/inference-cache/fsm"
	"github.com/inference-cache/inference-cache/pickerload"
	"github.com/inference-cache/inference-cache/provisional"
)

// newNode is the Node of cfg with nothing opened or started yet.
func newNode(cfg Config) *Node {
	n := &Node{
		cfg:        cfg,
		log:        cfg.Logger.With("node", cfg.NodeID),
		started:    time.Now(),
		nonce:      processNonce(),
		proposeCh:  make(chan *proposal, proposeQueue),
		inflight:   make(chan *inflightEntry, inflightEntries),
		creditCh:   make(chan creditReq, creditQueue),
		kick:       make(chan struct{}, 1),
		appliedSig: make(chan struct{}),
		members:    map[string]*member{},
		peers:      loadPeerAddrs(cfg.DataDir),
		conns:      map[string]*grpc.ClientConn{},
		shutdownCh: make(chan struct{}),
		fatalCh:    make(chan struct{}),
		reqPrefix:  cfg.NodeID + "-" + fmt.Sprintf("%x", time.Now().UnixNano()) + "-",
		pickers:    pickerload.New(pickerload.Config{MaxEntries: cfg.PickerLoadMaxEntries}),
		picks:      provisional.New(provisional.Config{MaxBlocks: cfg.ProvisionalMaxBlocks}),
	}
	n.leaderOffset.Store(math.MinInt64) // unknown until a probe of the leader answers
	return n
}

// abortStart undoes a New that failed part way: it stops what already
// started (the transport's forwarder, raft itself when a later step
// failed) before closing the stores under it.
func (n *Node) abortStart() {
	close(n.shutdownCh)
	if n.raft != nil {
		_ = n.raft.Shutdown().Error()
	}
	n.closeAll()
}

// makeDataDirs creates dataDir/raft and an empty dataDir/tmp (removing
// what an interrupted snapshot or restore left there).
func makeDataDirs(dataDir string) (raftDir, tmpDir string, err error) {
	raftDir = filepath.Join(dataDir, "raft")
	tmpDir = filepath.Join(dataDir, "tmp")
	os.RemoveAll(tmpDir)
	for _, d := range []string{raftDir, tmpDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", "", fmt.Errorf("raftnode: create %s: %w", d, err)
		}
	}
	return raftDir, tmpDir, nil
}

// openFSM creates the FSM, its hooks feeding the node's metrics, apply
// signal and snapshot sizes before Config.Hooks.
func (n *Node) openFSM(tmpDir string) {
	hooks := n.cfg.Hooks
	n.fsm = fsm.New(n.cfg.Policy, fsm.Options{
		TmpDir:       tmpDir,
		Logger:       n.log,
		ApplyWorkers: n.cfg.ApplyWorkers,
		OnCorrupt:    func(_ uint64, err error) { n.fail(err) },
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
}

// openLogStore opens the bbolt log and stable store (checked first) and
// the log cache raft reads through, with the sealing, chunked compaction
// and counting layers between them.
func (n *Node) openLogStore(raftDir string) error {
	if err := checkBoltFile(filepath.Join(raftDir, "raft.db")); err != nil {
		return err
	}
	var err error
	n.store, err = raftboltdb.New(raftboltdb.Options{
		Path: filepath.Join(raftDir, "raft.db"),
		// contract §13: without these bbolt rewrites its whole freelist on
		// every append once the log has grown.
		BoltOptions: &bbolt.Options{Timeout: 5 * time.Second, NoFreelistSync: true, FreelistType: bbolt.FreelistMapType},
	})
	if err != nil {
		return fmt.Errorf("raftnode: open log store %s: %w", raftDir, err)
	}
	var base raft.LogStore = sealedLogStore{chunkedCompaction{n.store}}
	if wrapLogStore != nil {
		base = wrapLogStore(n.cfg.NodeID, base)
	}
	n.logs, err = raft.NewLogCache(logCacheSize, countingLogStore{base, &n.metrics, &n.health})
	if err != nil {
		return fmt.Errorf("raftnode: log cache: %w", err)
	}
	return nil
}

// openSnapshotStore removes unfinished snapshots and opens the snapshot
// store. Called with the log store open: under its file lock no other
// process writes here.
func (n *Node) openSnapshotStore(raftDir string, hl hclog.Logger) error {
	n.removeUnfinishedSnapshots(raftDir)
	var err error
	n.snaps, err = raft.NewFileSnapshotStoreWithLogger(raftDir, n.cfg.SnapshotRetain, hl.Named("snapshot"))
	if err != nil {
		return fmt.Errorf("raftnode: snapshot store %s: %w", raftDir, err)
	}
	return nil
}

// openTransport listens for Raft on Config.RaftAddr (TLS with
// Config.RaftTLS), advertising Config.RaftAdvertise.
func (n *Node) openTransport(hl hclog.Logger) error {
	adv, err := net.ResolveTCPAddr("tcp", n.cfg.RaftAdvertise)
	if err != nil {
		return fmt.Errorf("%w: raft advertise address %q: %v", ErrInvalid, n.cfg.RaftAdvertise, err)
	}
	ntc := &raft.NetworkTransportConfig{
		Logger:  hl.Named("transport"),
		MaxPool: transportPool,
		Timeout: transportTimeout,
		// Pipelining depth of AppendEntries to each follower (raft's
		// default 2 leaves no request queued behind the one in flight).
		MaxRPCsInFlight: transportInFlight,
	}
	if n.cfg.RaftTLS != nil {
		n.trans, err = newTLSTransport(n.cfg.RaftAddr, adv, n.cfg.RaftTLS, ntc)
	} else {
		n.trans, err = raft.NewTCPTransportWithConfig(n.cfg.RaftAddr, adv, ntc)
	}
	if err != nil {
		return fmt.Errorf("raftnode: raft transport on %s: %w", n.cfg.RaftAddr, err)
	}
	return nil
}

// checkExistingState reports whether the stores hold Raft state (and
// advertises it) and refuses state that fails the integrity checks
// (integrity.go).
func (n *Node) checkExistingState() (bool, error) {
	has, err := raft.HasExistingState(n.logs, n.store, n.snaps)
	if err != nil {
		return false, fmt.Errorf("raftnode: inspect raft state: %w", err)
	}
	n.hasState.Store(has)
	if err := checkRaftState(n.store, n.snaps); err != nil {
		return false, err
	}
	return has, nil
}

// startRaft starts raft with the configured timing over the opened
// stores and transport; it returns the channel of leadership changes
// for leaderLoop.
func (n *Node) startRaft(hl hclog.Logger) (chan bool, error) {
	notify := make(chan bool, 16)
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(n.cfg.NodeID)
	rc.HeartbeatTimeout = n.cfg.Timing.HeartbeatTimeout
	rc.ElectionTimeout = n.cfg.Timing.ElectionTimeout
	rc.LeaderLeaseTimeout = n.cfg.Timing.LeaderLeaseTimeout
	rc.CommitTimeout = n.cfg.Timing.CommitTimeout
	rc.SnapshotThreshold = n.cfg.SnapshotThreshold
	rc.SnapshotInterval = n.cfg.SnapshotInterval
	rc.TrailingLogs = n.cfg.TrailingLogs
	rc.BatchApplyCh = true
	rc.MaxAppendEntries = maxAppendEntries
	rc.NotifyCh = notify
	rc.Logger = hl
	n.watch = newCommitWatch(n.trans, &n.health.leaderCommit, n.shutdownCh)
	var err error
	n.raft, err = newRaft(rc, n.fsm, n.logs, n.store, n.snaps, n.watch)
	if err != nil {
		return nil, fmt.Errorf("raftnode: start raft: %w", err)
	}
	n.ready.Store(true)
	return notify, nil
}

// bootLag tracks the log tail the FSM has not applied yet (a restart).
// It is replayed once a leader confirms the commit index: until then
// reads are stale and the node is not Serving (health.go).
func (n *Node) bootLag() *lagTracker {
	lt := &lagTracker{bootLast: n.raft.LastIndex()}
	lt.caughtUp = lt.bootLast <= n.fsm.AppliedIndex()
	if !lt.caughtUp {
		n.health.setLag(StaleCatchingUp)
	}
	return lt
}

// startLoops starts the node's goroutines, each counted in n.wg.
func (n *Node) startLoops(notify chan bool, lt *lagTracker) {
	n.wg.Add(10)
	n.watchRaftContact()
	go func() { defer n.wg.Done(); n.peers.saver(n.shutdownCh) }()
	go n.snapshotByBytes()
	go n.healthLoop(lt)
	go n.leaderLoop(notify)
	go n.batcher()
	go n.committer()
	go n.creditLoop()
	go n.membershipLoop()
	go n.sweepPickerLoad()
}
