package raftnode

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"google.golang.org/grpc"

	"github.com/inference-cache/inference-cache/fsm"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/pickerload"
	"github.com/inference-cache/inference-cache/policy"
	"github.com/inference-cache/inference-cache/provisional"
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
	// (reconcile.go), so a test can wait for rounds instead of sleeping.
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

	pickers *pickerload.Store  // the pickers' load reports (pickershare.go)
	picks   *provisional.Store // the pickers' provisional residencies (picksshare.go)
	share   shareState         // their fan-out to the peers

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
// BootstrapExpect, bootstraps a fresh cluster (contract §8.3). Errors: ErrInvalid
// for a bad Config; otherwise the failing step (a corrupt snapshot names
// snapshot.ErrCorrupt etc.).
func New(cfg Config) (*Node, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	n := newNode(cfg)
	ok := false
	defer func() {
		if !ok {
			n.abortStart()
		}
	}()
	raftDir, tmpDir, err := makeDataDirs(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	n.openFSM(tmpDir)
	if err := n.openLogStore(raftDir); err != nil {
		return nil, err
	}
	hl := n.hclog()
	if err := n.openSnapshotStore(raftDir, hl); err != nil {
		return nil, err
	}
	if err := n.openTransport(hl); err != nil {
		return nil, err
	}
	has, err := n.checkExistingState()
	if err != nil {
		return nil, err
	}
	notify, err := n.startRaft(hl)
	if err != nil {
		return nil, err
	}
	lt := n.bootLag()
	if err := n.startGossip(); err != nil {
		return nil, err
	}
	n.startLoops(notify, lt)
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
		n.stopShares()
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
