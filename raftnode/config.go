package raftnode

import (
	"cmp"
	"fmt"
	"log/slog"
	"runtime"
	"time"

	"google.golang.org/grpc"

	"github.com/inference-cache/inference-cache/policy"
)

// Constants of the Raft wiring, with the reason for each value.
const (
	// DefaultHeartbeatTimeout, DefaultElectionTimeout and
	// DefaultLeaderLeaseTimeout are LAN timings. A follower that misses
	// heartbeats for a random 500–1000 ms starts a pre-vote and election
	// that takes a few round trips, so a dead leader is replaced in about
	// 0.6–1.2 s (measured ~1 s in TestFailover with FastTiming scaled).
	// A leader that cannot reach a quorum for 250 ms steps down.
	DefaultHeartbeatTimeout   = 500 * time.Millisecond
	DefaultElectionTimeout    = 500 * time.Millisecond
	DefaultLeaderLeaseTimeout = 250 * time.Millisecond
	// DefaultCommitTimeout bounds how long a follower waits to learn the
	// commit index when no new entries flow (heartbeat piggyback).
	DefaultCommitTimeout = 10 * time.Millisecond
	// DefaultSnapshotThreshold/Interval: snapshot after 16 k entries at
	// most every 2 min; entries are group-committed batches, so this is
	// millions of events. The entry count applies only while the last
	// snapshot is at most half of SnapshotLogBytes (snapshotbytes.go).
	DefaultSnapshotThreshold = 16384
	DefaultSnapshotInterval  = 2 * time.Minute
	// DefaultSnapshotLogBytes: also snapshot once this many bytes of log
	// entries, or twice the last snapshot's size if that is more, were
	// appended since the last snapshot (snapshotbytes.go).
	// An entry holds anything from one event to 256 KiB of them, so the
	// entry count alone let the log a restart replays grow to gigabytes
	// under heavy ingest: a restarted node replayed 32 M events for 70 s
	// before its first snapshot. 256 MiB is ~6 M packed events, ~10 s of
	// replay on 2 cores.
	DefaultSnapshotLogBytes = 256 << 20
	// DefaultTrailingLogs kept after a snapshot so a briefly lagging
	// follower catches up from the log, not a full snapshot install.
	DefaultTrailingLogs = 10240
	// DefaultSnapshotRetain: contract §13.3 asks for ≥ 2 so start-up can fall
	// back to the older one if the newest is damaged.
	DefaultSnapshotRetain = 2
	// DefaultExpireInterval: how often the leader commits an expire
	// command; small against the 600 s default TTL.
	DefaultExpireInterval = 10 * time.Second
	// DefaultWriteRetry is the bounded time a write retries not-leader /
	// no-leader / transfer-in-progress / ambiguous outcomes (contract §8.5: ~5 s).
	DefaultWriteRetry = 5 * time.Second
	// DefaultGroupCommitLinger: when an entry is already being committed
	// the batcher waits this long for more calls to join the next one.
	DefaultGroupCommitLinger = 200 * time.Microsecond
	// DefaultGroupCommitMaxBytes caps one log entry (encoded commands).
	// Bounded so one entry never stalls replication of others for long.
	DefaultGroupCommitMaxBytes = 4 << 20
	// logCacheSize is the number of recent log entries raft.NewLogCache
	// keeps in memory so replication to followers rarely reads bbolt: one
	// full AppendEntries batch (maxAppendEntries). The cache holds whole
	// entries, so under load it costs up to logCacheSize ×
	// entryTargetBytes (64 MiB) per node; a larger cache spends its time
	// touching fresh heap pages as it fills, for no hit rate gained
	// (one AppendEntries batch is what followers re-read).
	logCacheSize = 256
	// maxAppendEntries: entries per AppendEntries RPC and per leader
	// batch from BatchApplyCh (raft caps it at 1024).
	maxAppendEntries = 256
	// applyEnqueueTimeout bounds raft.Apply's enqueue wait.
	applyEnqueueTimeout = 5 * time.Second
	// barrierTimeout for the Barrier a new leader issues before acting.
	barrierTimeout = 10 * time.Second
	// transferTimeout bounds the leadership transfer of a graceful
	// shutdown; past it the node shuts down anyway.
	transferTimeout = 5 * time.Second
	// reconcileInterval: how often the leader compares gossip membership
	// with the Raft configuration (and on every gossip event).
	reconcileInterval = time.Second
	// bootstrapPoll: how often a fresh node checks gossip for
	// bootstrap_expect peers.
	bootstrapPoll = 100 * time.Millisecond
	// creditFlush: LFU credits are batched for this long per command.
	creditFlush = 100 * time.Millisecond
	// creditQueue: credits buffered before Credit starts dropping.
	creditQueue = 4096
	// proposeQueue: ingest calls queued for the batcher.
	proposeQueue = 8192
	// inflightEntries: group-commit entries awaiting commit at once.
	inflightEntries = 128
	// transportPool and transportTimeout of the Raft TCP transport.
	transportPool    = 3
	transportTimeout = 10 * time.Second
	// transportInFlight: AppendEntries RPCs pipelined to one follower
	// (NetworkTransportConfig.MaxRPCsInFlight; raft's default 2 leaves no
	// request queued behind the one being processed).
	transportInFlight = 16
	// MaxApplyWorkers bounds the default of Config.ApplyWorkers: past a
	// few workers the apply is bound by memory, not cores.
	MaxApplyWorkers = 4
	// entryTargetBytes: the batcher closes a group-commit entry at this
	// size (≤ GroupCommitMaxBytes) and starts the next one at once, so
	// under load raft receives several entries per leader dispatch and
	// writes them in one bbolt transaction. One huge entry per dispatch
	// costs more: bbolt keeps at least two values per leaf page, so every
	// commit rewrites the previous 2–3 (large) entries of the last leaf;
	// with k entries per commit that write amplification drops from ~4×
	// to (k+3)/k.
	entryTargetBytes = 256 << 10
)

// Timing holds the Raft timeouts. The zero value means the LAN defaults.
type Timing struct {
	// HeartbeatTimeout: a follower without leader contact for a random
	// 1–2× this starts an election. Default 500 ms.
	HeartbeatTimeout time.Duration
	// ElectionTimeout: a candidate without a result for a random 1–2×
	// this restarts the election. Default 500 ms.
	ElectionTimeout time.Duration
	// LeaderLeaseTimeout: a leader without quorum contact this long steps
	// down. Must be ≤ HeartbeatTimeout. Default 250 ms.
	LeaderLeaseTimeout time.Duration
	// CommitTimeout: see DefaultCommitTimeout. Default 10 ms.
	CommitTimeout time.Duration
	// LocalGossip selects memberlist's loopback profile (fast probes) in
	// place of the LAN profile, with a full-state sync every 2 s.
	LocalGossip bool
	// WANGossip selects memberlist's WAN profile (slower probes, longer
	// suspicion) for servers across regions; ignored with LocalGossip.
	WANGossip bool
}

// FastTiming is for tests and the loopback `dev` cluster: ~3× faster
// elections than the LAN defaults (failover ≈ 0.2–0.5 s).
var FastTiming = Timing{
	HeartbeatTimeout:   150 * time.Millisecond,
	ElectionTimeout:    150 * time.Millisecond,
	LeaderLeaseTimeout: 100 * time.Millisecond,
	CommitTimeout:      5 * time.Millisecond,
	LocalGossip:        true,
}

// Hooks are optional metric callbacks. They run on raftnode goroutines and
// must not block.
type Hooks struct {
	// OnCommit: one write (any command) committed and applied on the
	// leader; d is from submission to applied, commands the size of its
	// group-commit entry.
	OnCommit func(d time.Duration, commands int)
	// OnApply: one FSM ApplyBatch (entries, commands, duration).
	OnApply func(entries, commands int, d time.Duration)
	// OnSnapshot: one snapshot persisted (stream bytes, duration, error).
	OnSnapshot func(bytes int64, d time.Duration, err error)
	// OnRestore: one snapshot restored into the FSM.
	OnRestore func(bytes int64, d time.Duration, err error)
	// OnLeader: this node gained (true, after its Barrier) or lost
	// leadership.
	OnLeader func(leader bool)
}

// Config configures a Node. Addresses are host:port.
type Config struct {
	// NodeID is this server's unique, stable Raft server id (required).
	NodeID string
	// DataDir holds raft/raft.db (log + stable store), raft/snapshots and
	// tmp (required). Same directory on restart.
	DataDir string
	// RaftAddr is the Raft TCP bind address (required, port ≠ 0).
	RaftAddr string
	// RaftAdvertise is the Raft address peers dial; "" = RaftAddr (must
	// then not be 0.0.0.0).
	RaftAdvertise string
	// GossipAddr is the memberlist bind address (TCP+UDP, required).
	GossipAddr string
	// GossipAdvertise is the gossip address peers use; "" = GossipAddr.
	GossipAdvertise string
	// GRPCAddr is this node's gRPC address advertised to peers for write
	// forwarding (the server listens on it; raftnode does not).
	GRPCAddr string
	// Join lists gossip addresses of other servers; any one reachable is
	// enough. Retried in the background until one answers.
	Join []string
	// BootstrapExpect: when > 0 and this node has no Raft state, bootstrap
	// once this many servers without Raft state see each other (contract §8.3).
	// 0 = never bootstrap (join an existing cluster).
	BootstrapExpect int
	// Policy is the initial policy of a fresh FSM (a restored snapshot's
	// policy wins). Zero value = policy.Default().
	Policy policy.Policy
	// SnapshotThreshold, SnapshotInterval, TrailingLogs, SnapshotRetain:
	// 0 = the Default constants above. While SnapshotLogBytes is on, the
	// node turns SnapshotThreshold off (raft.ReloadConfig) once its last
	// snapshot is over half of SnapshotLogBytes, and back on below that.
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	TrailingLogs      uint64
	SnapshotRetain    int
	// SnapshotLogBytes: snapshot once this many bytes of log entries (or
	// twice the last snapshot's size, if more) were appended since the
	// last snapshot, whatever their count; 0 = DefaultSnapshotLogBytes,
	// < 0 = off (raft's entry count only).
	SnapshotLogBytes int64
	// DeadServerCleanup: opt-in grace period after which the leader removes
	// a server gossip reports dead; 0 = off. Never removes more than
	// (voters−1)/2 at once, never below 3 voters.
	DeadServerCleanup time.Duration
	// ExpireInterval: leader expire ticker; 0 = DefaultExpireInterval,
	// < 0 = off.
	ExpireInterval time.Duration
	// WriteRetry: total retry budget of a write; 0 = DefaultWriteRetry.
	WriteRetry time.Duration
	// GroupCommitLinger, GroupCommitMaxBytes: 0 = defaults; linger < 0 =
	// never linger.
	GroupCommitLinger   time.Duration
	GroupCommitMaxBytes int
	// Timing: Raft timeouts; zero = LAN defaults.
	Timing Timing
	// DialOptions for the connections to the other nodes' gRPC addresses
	// (writes forwarded to the leader, picker load passed on to every
	// node); nil = insecure (plaintext) credentials.
	DialOptions []grpc.DialOption
	// PickerLoadMaxEntries bounds the (picker, replica) entries of the
	// pickers' load reports this node holds in memory (contract §5.11);
	// a report past it is refused. 0 = pickerload.DefaultMaxEntries
	// (65,536).
	PickerLoadMaxEntries int
	// ProvisionalMaxBlocks bounds the (pick, block) entries of the
	// pickers' provisional residencies this node holds in memory
	// (contract §5.12); a push past it is refused. 0 =
	// provisional.DefaultMaxBlocks (1,048,576).
	ProvisionalMaxBlocks int
	// RaftTLS, when set, carries Raft RPCs over mutual TLS (tls.go); nil =
	// plain TCP. Every server of a cluster must agree.
	RaftTLS *RaftTLS
	// GossipKeys, when set, encrypt and authenticate memberlist gossip
	// (AES-GCM; each key 16, 24 or 32 bytes). The first key encrypts,
	// every key is accepted to decrypt, so a key change is rolled out by
	// adding the new key second, then first, then removing the old one
	// (Node.SetGossipKeys applies each step at runtime). nil = plaintext
	// gossip. Every server must hold the primary key of the others.
	GossipKeys [][]byte
	// Logger for raftnode, raft (via an hclog adapter, level RaftLogLevel)
	// and memberlist; nil = discard.
	Logger *slog.Logger
	// Clock is this server's wall clock for the times it writes into
	// commands and clock probes: the expire command's now and the clock in
	// its gossip acks (nil = time.Now). Raft and gossip timeouts use the
	// monotonic clock and never read it. The chaos build of the server
	// sets it to run a node whose clock is off.
	Clock func() time.Time
	// RaftLogLevel: the least level of hashicorp/raft logs passed to
	// Logger (default slog.LevelWarn; raft is chatty at info).
	RaftLogLevel slog.Level
	// Hooks for metrics.
	Hooks Hooks
	// ApplyWorkers: goroutines the FSM may use to apply the blocks of a
	// log entry's ingest commands (fsm.Options.ApplyWorkers): 0 =
	// min(GOMAXPROCS, MaxApplyWorkers); 1 = the apply goroutine alone.
	// The replicated state never depends on it (index/parallel.go); it
	// lifts the node's apply ceiling of one core. Negative is an error.
	ApplyWorkers int
}

// Validate reports whether New would accept c: the required fields are
// set, the initial policy (after defaults) is valid and ApplyWorkers is
// not negative. It lets a caller check its flags before opening anything.
// Errors wrap ErrInvalid, except a negative ApplyWorkers.
func (c Config) Validate() error {
	c.setDefaults()
	return c.validate()
}

// validate checks a config whose defaults are set.
func (c *Config) validate() error {
	if c.NodeID == "" || c.DataDir == "" || c.RaftAddr == "" || c.GossipAddr == "" {
		return fmt.Errorf("%w: NodeID, DataDir, RaftAddr and GossipAddr are required", ErrInvalid)
	}
	if err := c.Policy.Validate(); err != nil {
		return fmt.Errorf("%w: initial policy: %w", ErrInvalid, err)
	}
	if c.ApplyWorkers < 0 {
		return fmt.Errorf("raftnode: ApplyWorkers %d: must be 0 (one per CPU, at most %d) or positive", c.ApplyWorkers, MaxApplyWorkers)
	}
	return nil
}

// setDefaults replaces every zero field that has a default with it (the
// Default constants; see each field).
func (c *Config) setDefaults() {
	c.RaftAdvertise = cmp.Or(c.RaftAdvertise, c.RaftAddr)
	c.GossipAdvertise = cmp.Or(c.GossipAdvertise, c.GossipAddr)
	if c.Policy.MaxReplicas == 0 && c.Policy.RankingVersion == "" {
		c.Policy = policy.Default()
	}
	c.SnapshotThreshold = cmp.Or(c.SnapshotThreshold, DefaultSnapshotThreshold)
	c.SnapshotLogBytes = cmp.Or(c.SnapshotLogBytes, DefaultSnapshotLogBytes)
	c.SnapshotInterval = cmp.Or(c.SnapshotInterval, DefaultSnapshotInterval)
	c.TrailingLogs = cmp.Or(c.TrailingLogs, DefaultTrailingLogs)
	c.SnapshotRetain = max(c.SnapshotRetain, DefaultSnapshotRetain)
	c.ExpireInterval = cmp.Or(c.ExpireInterval, DefaultExpireInterval)
	c.WriteRetry = cmp.Or(c.WriteRetry, DefaultWriteRetry)
	c.GroupCommitLinger = cmp.Or(c.GroupCommitLinger, DefaultGroupCommitLinger)
	c.GroupCommitMaxBytes = cmp.Or(c.GroupCommitMaxBytes, DefaultGroupCommitMaxBytes)
	t := &c.Timing
	t.HeartbeatTimeout = cmp.Or(t.HeartbeatTimeout, DefaultHeartbeatTimeout)
	t.ElectionTimeout = cmp.Or(t.ElectionTimeout, DefaultElectionTimeout)
	t.LeaderLeaseTimeout = cmp.Or(t.LeaderLeaseTimeout, DefaultLeaderLeaseTimeout)
	t.CommitTimeout = cmp.Or(t.CommitTimeout, DefaultCommitTimeout)
	c.Logger = cmp.Or(c.Logger, slog.New(slog.DiscardHandler))
	c.RaftLogLevel = cmp.Or(c.RaftLogLevel, slog.LevelWarn)
	if c.ApplyWorkers == 0 {
		c.ApplyWorkers = min(runtime.GOMAXPROCS(0), MaxApplyWorkers)
	}
}
