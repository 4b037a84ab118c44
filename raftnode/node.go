package raftnode

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

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

	started time.Time
	// nonce is random per process, advertised in gossip meta, so that
	// peers tell this process from an earlier one under the same id.
	nonce       string
	ready       atomic.Bool
	leaderReady atomic.Bool // leader and Barrier done
	hasState    atomic.Bool // advertised in gossip meta
	reqSeq      atomic.Uint64
	// reconcileRounds counts the leader's reconcile passes
	// (membership.go), so a test can wait for rounds instead of sleeping.
	reconcileRounds atomic.Uint64
	// clockCorrection (ns) is what Now adds to this server's clock.
	clockCorrection atomic.Int64
	// leaderOffset (ns; math.MinInt64 = unknown) caches
	// ClockOffsetToLeader (LeaderOffsetCached).
	leaderOffset atomic.Int64
	// opRemoved: id → opRemoval, RemoveServer calls not yet seen by the
	// membership loop (takeOpRemovals).
	opRemoved sync.Map
	// fewVoters: the configuration the membership loop read last has
	// fewer than three voters (no clock can be outvoted; ClockTrusted).
	fewVoters atomic.Bool
	// clockChecked latches the end of ClockTrusted's check.
	clockChecked atomic.Bool
	reqPrefix    string

	proposeCh chan *proposal
	inflight  chan *inflightEntry
	creditCh  chan creditReq
	kick      chan struct{} // gossip changed: reconcile soon

	appliedMu  sync.Mutex
	appliedSig chan struct{} // closed and replaced after every apply batch

	membersMu            sync.Mutex
	members              map[string]*member // by node id
	peers                *peerAddrs         // gRPC addresses learned from gossip, kept across restarts (peers.go)
	rejoins              atomic.Uint64      // gossip re-joins attempted (gossipheal.go)
	rejoining            atomic.Bool        // a re-join is running
	rejoinLogged         atomic.Int64       // unix ns of the last re-join log line
	offsets              clockOffsets       // peers' clocks minus this node's (clockoffset.go)
	contact              raftContact        // followers the leader's heartbeats fail to reach (raftcontact.go)
	watch                *commitWatch       // the transport raft uses (commitwatch.go)
	advertisedAppendFail atomic.Bool        // the AppendFail gossip last advertised (health.go)
	lastStepDown         atomic.Int64       // unix ns of the last step-down for failing appends
	expireClampLogged    atomic.Int64       // unix ns of the last clamped-expire warning (leader.go)

	connsMu sync.Mutex
	conns   map[string]*grpc.ClientConn // by gRPC address

	metrics metrics
	health  health // local log and apply health (health.go)

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
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
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
		reqPrefix:  cfg.NodeID + "-" + fmt.Sprintf("%x", time.Now().UnixNano()) + "-",
	}
	n.leaderOffset.Store(math.MinInt64) // unknown until a probe of the leader answers
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
		TmpDir:       tmpDir,
		Logger:       n.log,
		ApplyWorkers: cfg.ApplyWorkers,
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
	var base raft.LogStore = sealedLogStore{chunkedCompaction{n.store}}
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
	n.watch = newCommitWatch(n.trans, &n.health.leaderCommit, n.shutdownCh)
	n.raft, err = newRaft(rc, n.fsm, logs, n.store, n.snaps, n.watch)
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
	n.wg.Add(9)
	n.watchRaftContact()
	go func() { defer n.wg.Done(); n.peers.saver(n.shutdownCh) }()
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

// closeAll closes what New opened, once raft (if it started) is shut
// down. A raft that started owns the transport: its shutdown closes it
// (raft.WithClose). Only when raft never started is it closed here.
func (n *Node) closeAll() {
	if n.ml != nil {
		n.ml.Shutdown()
	}
	if n.raft == nil && n.trans != nil {
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
	return countVoters(f.Configuration())
}

// NewRequestID returns a fresh request id unique to this node's run.
func (n *Node) NewRequestID() string {
	return n.reqPrefix + fmt.Sprint(n.reqSeq.Add(1))
}

// processNonce returns 64 random bits, hex: Node.nonce.
func processNonce() string {
	var b [8]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])
}
