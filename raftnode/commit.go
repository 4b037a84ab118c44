package raftnode

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/inference-cache/inference-cache/fsm"
	"github.com/inference-cache/inference-cache/fsm/fsmpb"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/policy"
)

// The write path: caller → submit (retry loop) → leader: proposeCh →
// batcher (group commit into one log entry) → raft.Apply → committer
// (waits for the future, hands each caller its fsm.Result);
// follower: forward RPC to the leader's submitLocal.

type proposal struct {
	cmd    []byte
	format uint32 // fsm.CommandFormat(cmd): the entry format cmd needs
	start  time.Time
	done   chan outcome // buffered 1
}

type outcome struct {
	res fsm.Result
	err error
}

type inflightEntry struct {
	fut   raft.ApplyFuture
	props []*proposal
}

// batcher coalesces queued proposals into log entries (leader side).
func (n *Node) batcher() {
	defer n.wg.Done()
	var batch []*proposal
	buf := make([]byte, 0, 64<<10)
	for {
		var first *proposal
		select {
		case first = <-n.proposeCh:
		case <-n.shutdownCh:
			return
		}
		batch = append(batch[:0], first)
		size := len(first.cmd)
		lingered := false
		limit := min(n.cfg.GroupCommitMaxBytes, entryTargetBytes)
	collect:
		for size < limit {
			select {
			case p := <-n.proposeCh:
				batch = append(batch, p)
				size += len(p.cmd) + 8
				continue
			default:
			}
			// Linger only while an earlier entry is still committing:
			// then waiting costs no latency, and it grows the batch.
			if lingered || n.cfg.GroupCommitLinger < 0 || len(n.inflight) == 0 {
				break collect
			}
			lingered = true
			t := time.NewTimer(n.cfg.GroupCommitLinger)
			select {
			case p := <-n.proposeCh:
				batch = append(batch, p)
				size += len(p.cmd) + 8
				lingered = false
			case <-t.C:
			case <-n.shutdownCh:
			}
			t.Stop()
		}
		// The entry's format is the newest any command in it needs, so
		// an entry of format-1 commands stays readable by every binary.
		format, packed := uint32(1), uint64(0)
		for _, p := range batch {
			format = max(format, p.format)
			if p.format >= fsm.EntryFormatPacked {
				packed++
			}
		}
		buf = fsm.NewEntryFormat(buf, format)
		for _, p := range batch {
			buf = fsm.AppendCommand(buf, p.cmd)
		}
		entry := fsm.SealEntry(make([]byte, 0, len(buf)+9), buf) // a new slice: raft keeps it
		props := slices.Clone(batch)
		n.metrics.entries.Add(1)
		n.metrics.entryCommands.Add(uint64(len(props)))
		n.metrics.packedCommands.Add(packed)
		fut := n.raft.Apply(entry, applyEnqueueTimeout)
		select {
		case n.inflight <- &inflightEntry{fut: fut, props: props}:
		case <-n.shutdownCh:
			for _, p := range props {
				p.done <- outcome{err: ErrShutdown}
			}
			return
		}
	}
}

// committer waits for entries in commit order and answers their callers.
func (n *Node) committer() {
	defer n.wg.Done()
	for {
		var e *inflightEntry
		select {
		case e = <-n.inflight:
		case <-n.shutdownCh:
			// drain what is left so no caller hangs
			for {
				select {
				case e = <-n.inflight:
					for _, p := range e.props {
						p.done <- outcome{err: ErrShutdown}
					}
				default:
					return
				}
			}
		}
		err := translateApply(e.fut.Error(), n.log)
		var er *fsm.EntryResult
		if err == nil {
			er, _ = e.fut.Response().(*fsm.EntryResult)
			if er == nil || len(er.Results) != len(e.props) {
				err = fmt.Errorf("raftnode: internal: apply returned %T for %d commands", e.fut.Response(), len(e.props))
			}
		}
		now := time.Now()
		for i, p := range e.props {
			if err != nil {
				p.done <- outcome{err: err}
				continue
			}
			r := er.Results[i]
			var rerr error
			if r.Err != nil {
				rerr = translate(r.Err)
			}
			d := now.Sub(p.start)
			n.metrics.commits.Add(1)
			n.metrics.commitNanos.Add(uint64(d))
			if h := n.cfg.Hooks.OnCommit; h != nil {
				h(d, len(e.props))
			}
			p.done <- outcome{res: r, err: rerr}
		}
	}
}

// submitLocal proposes one encoded command on this node (which must be the
// leader) and waits for its outcome. No retries. It serves local writes
// and forwarded ones: a packed ingest (format 2) from a follower that
// believed every server applies it is converted to the protobuf form
// while this leader's write gate is closed (writegate.go), since this
// leader decides what goes into the log.
func (n *Node) submitLocal(ctx context.Context, cmd []byte) (fsm.Result, error) {
	if n.raft.State() != raft.Leader {
		return fsm.Result{}, n.notLeaderErr()
	}
	format := fsm.CommandFormat(cmd)
	if format > n.writeFormat() {
		c, err := fsm.UnpackIngest(cmd)
		if err != nil {
			return fsm.Result{}, fmt.Errorf("%w: packed ingest command: %v", ErrInvalid, err)
		}
		cmd, format = c, fsm.CommandFormat(c)
		n.metrics.packedConverted.Add(1)
	}
	if len(cmd) > n.cfg.GroupCommitMaxBytes {
		return fsm.Result{}, fmt.Errorf("%w: command of %d bytes exceeds the %d byte entry limit", ErrInvalid, len(cmd), n.cfg.GroupCommitMaxBytes)
	}
	p := &proposal{cmd: cmd, format: format, start: time.Now(), done: make(chan outcome, 1)}
	select {
	case n.proposeCh <- p:
	case <-ctx.Done():
		return fsm.Result{}, fmt.Errorf("%w: queueing write: %v", ErrTimeout, ctx.Err())
	case <-n.shutdownCh:
		return fsm.Result{}, ErrShutdown
	}
	select {
	case o := <-p.done:
		return o.res, o.err
	case <-ctx.Done():
		// queued or in flight: outcome unknown
		return fsm.Result{}, fmt.Errorf("%w: %w: %v", ErrLeadershipLost, ErrTimeout, ctx.Err())
	case <-n.shutdownCh:
		return fsm.Result{}, ErrShutdown
	}
}

func (n *Node) notLeaderErr() error {
	_, id := n.raft.LeaderWithID()
	if id == "" {
		return ErrNoLeader
	}
	return fmt.Errorf("%w: leader is %s", ErrNotLeader, id)
}

// submit runs one command to completion: locally when leader, forwarded
// otherwise; retries not-leader / no-leader / transfer-in-progress and
// ambiguous outcomes (same request id, so apply de-duplicates) with jitter
// for at most Config.WriteRetry; then waits for the local FSM to apply it.
func (n *Node) submit(ctx context.Context, c *fsmpb.Command) (fsm.Result, error) {
	cmd, err := fsm.MarshalCommand(c)
	if err != nil {
		return fsm.Result{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return n.submitEncoded(ctx, cmd)
}

// retryBackoff is the jittered wait before retry attempt+1 of a write
// (10–50 ms, growing to 50–250 ms from the fifth attempt): short against
// an election, spread so retries from many callers do not arrive at once.
func retryBackoff(attempt int) time.Duration {
	return time.Duration(10+rand.IntN(40)) * time.Millisecond * time.Duration(min(attempt+1, 5))
}

// submitEncoded is submit for a command already encoded (MarshalCommand or
// MarshalIngest).
func (n *Node) submitEncoded(ctx context.Context, cmd []byte) (fsm.Result, error) {
	var err error
	ctx, cancel := context.WithTimeout(ctx, n.cfg.WriteRetry)
	defer cancel()
	for attempt := 0; ; attempt++ {
		var res fsm.Result
		if n.raft.State() == raft.Leader {
			res, err = n.submitLocal(ctx, cmd)
		} else {
			res, err = n.forward(ctx, cmd)
		}
		if err == nil {
			// Read-your-writes on the acknowledging node, unless it has a
			// local fault (health.go): a follower on a full disk would
			// hold the acknowledgement for the whole budget, and its
			// reads are marked stale anyway.
			if n.health.reason() == "" {
				if werr := n.waitApplied(ctx, res.Index); werr != nil {
					n.log.Debug("raftnode: committed but not yet applied locally", "index", res.Index, "err", werr)
				}
			}
			return res, nil
		}
		if !retriable(err) || ctx.Err() != nil {
			if ctx.Err() != nil && retriable(err) {
				err = fmt.Errorf("%w: gave up after %d attempts: %w", ErrTimeout, attempt+1, err)
			}
			return res, err
		}
		n.metrics.retries.Add(1)
		backoff := retryBackoff(attempt)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
		case <-n.shutdownCh:
			return res, ErrShutdown
		}
	}
}

// Ingest commits a batch of validated block events (SPEC 6) and returns
// the log index it applied at, once it is committed by a quorum and applied
// on this node. Concurrent calls on the leader share log entries (group
// commit); a follower forwards to the leader. requestID "" gets a fresh id;
// a retried requestID applies once. Errors: ErrTimeout, ErrNoLeader (no
// leader within the retry budget), ErrRejected, ErrShutdown.
func (n *Node) Ingest(ctx context.Context, requestID string, evs []index.BlockEvent) (uint64, error) {
	r, err := n.IngestWrite(ctx, requestID, evs)
	return r.Index, err
}

// WriteResult is the outcome of a committed write.
type WriteResult struct {
	// Index is the log index the write applied at (for a duplicate, the
	// index of the original application).
	Index uint64
	// Duplicate is true when the request id had already been applied
	// within the de-duplication window: the write was acknowledged as a
	// retry and its payload not applied again (SPEC 8).
	Duplicate bool
}

// IngestWrite is Ingest reporting whether the request id was a duplicate.
// The command is encoded packed (fsm.MarshalIngestPacked) while this
// node's write gate is open (Status.WriteFormat 2), else as protobuf; the
// leader converts a packed command back if its own gate is closed.
func (n *Node) IngestWrite(ctx context.Context, requestID string, evs []index.BlockEvent) (WriteResult, error) {
	if requestID == "" {
		requestID = n.NewRequestID()
	}
	marshal := fsm.MarshalIngest
	if n.writeFormat() >= fsm.EntryFormatPacked {
		marshal = fsm.MarshalIngestPacked
	}
	cmd, err := marshal(requestID, evs)
	if err != nil {
		return WriteResult{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	r, err := n.submitEncoded(ctx, cmd)
	return WriteResult{Index: r.Index, Duplicate: r.Duplicate}, err
}

// ReportStats commits replica stats like Ingest.
func (n *Node) ReportStats(ctx context.Context, requestID string, st []index.ReplicaStats) (uint64, error) {
	r, err := n.ReportStatsWrite(ctx, requestID, st)
	return r.Index, err
}

// ReportStatsWrite is ReportStats reporting whether the request id was a
// duplicate.
func (n *Node) ReportStatsWrite(ctx context.Context, requestID string, st []index.ReplicaStats) (WriteResult, error) {
	if requestID == "" {
		requestID = n.NewRequestID()
	}
	r, err := n.submit(ctx, fsm.StatsCommand(requestID, st))
	return WriteResult{Index: r.Index, Duplicate: r.Duplicate}, err
}

// SetPolicy validates p (ErrInvalid wrapping *policy.FieldError), commits
// it and returns the committed policy with its new Version (previous + 1).
func (n *Node) SetPolicy(ctx context.Context, p policy.Policy) (policy.Policy, error) {
	if err := p.Validate(); err != nil {
		return policy.Policy{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	r, err := n.submit(ctx, fsm.SetPolicyCommand(n.NewRequestID(), p))
	if err != nil {
		return policy.Policy{}, err
	}
	if r.Policy == nil {
		return n.Policy(), nil
	}
	return *r.Policy, nil
}

// Expire commits an expire command with nowMs (normally the leader's
// ticker does this; exposed for tests and operators). Returns the index.
func (n *Node) Expire(ctx context.Context, nowMs int64) (uint64, error) {
	r, err := n.submit(ctx, fsm.ExpireCommand(n.NewRequestID(), nowMs))
	return r.Index, err
}

type creditReq struct {
	p      index.Partition
	hashes []uint64
}

// Credit queues LFU access credits for blocks of partition p (SPEC 5). It
// never blocks: credits are batched for ~100 ms and committed through the
// log; under overload or failure they are dropped. Ignored unless the
// policy is LFU. hashes is copied.
func (n *Node) Credit(p index.Partition, hashes []uint64) {
	if len(hashes) == 0 || n.Policy().EvictionPolicy != policy.LFU {
		return
	}
	select {
	case n.creditCh <- creditReq{p: p, hashes: slices.Clone(hashes)}:
	default:
		n.metrics.creditsDropped.Add(1)
	}
}

func (n *Node) creditLoop() {
	defer n.wg.Done()
	t := time.NewTicker(creditFlush)
	defer t.Stop()
	pending := map[index.Partition][]uint64{}
	for {
		select {
		case c := <-n.creditCh:
			pending[c.p] = append(pending[c.p], c.hashes...)
		case <-t.C:
			for p, hs := range pending {
				delete(pending, p)
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				if _, err := n.submit(ctx, fsm.CreditCommand(n.NewRequestID(), p, hs)); err != nil {
					n.metrics.creditsDropped.Add(1)
				}
				cancel()
			}
		case <-n.shutdownCh:
			return
		}
	}
}

func policyBytes(p *policy.Policy) []byte {
	if p == nil {
		return nil
	}
	b, _ := proto.Marshal(fsmpb.PolicyToPB(*p))
	return b
}

func policyFromBytes(b []byte) *policy.Policy {
	if len(b) == 0 {
		return nil
	}
	var q fsmpb.Policy
	if proto.Unmarshal(b, &q) != nil {
		return nil
	}
	p := fsmpb.PolicyFromPB(&q)
	return &p
}

// Metrics are cumulative counters since start (read with Node.Metrics).
type Metrics struct {
	// ApplyBatches/ApplyCommands/ApplyTime: FSM ApplyBatch calls, commands
	// applied and total time spent applying.
	ApplyBatches, ApplyCommands uint64
	ApplyTime                   time.Duration
	// Entries/EntryCommands: group-commit log entries proposed by this node
	// as leader and the commands they carried.
	Entries, EntryCommands uint64
	// Commits/CommitTime: writes committed as leader and their total
	// submission-to-applied latency.
	Commits    uint64
	CommitTime time.Duration
	// Forwarded: writes this node forwarded to a leader. Retries: write
	// attempts retried.
	Forwarded, Retries uint64
	// CreditsDropped: LFU credit batches dropped (queue full or failure).
	CreditsDropped uint64
	// Snapshots, LastSnapshotBytes, LastSnapshotTime: persisted snapshots.
	Snapshots         uint64
	LastSnapshotBytes uint64
	LastSnapshotTime  time.Duration
	// LogAppends/LogAppendEntries: appends to the local Raft log store
	// (one bbolt transaction and fsync each) and the entries they wrote.
	// Their ratio is the entries per transaction; an append rewrites the
	// log's last bbolt leaf, so the write amplification of large entries
	// is about (3 + ratio) / ratio (raftnode/DESIGN.md).
	LogAppends, LogAppendEntries uint64
	// LogAppendBytes: bytes of entry data appended to the local log since
	// start. SnapshotsByLogBytes: snapshots this node took because the
	// log had grown past its limit since the last one (max of
	// Config.SnapshotLogBytes and twice the last snapshot's size;
	// Snapshots counts every snapshot).
	LogAppendBytes, SnapshotsByLogBytes uint64
	// PackedCommands: packed ingest commands (fsm.MarshalIngestPacked)
	// this node put into log entries of format 2 as leader. Stays 0 until
	// every server advertises that it applies format 2 (writegate.go).
	PackedCommands uint64
	// PackedConverted: packed ingest commands this node, as leader,
	// converted to the protobuf form (fsm.UnpackIngest) because its write
	// gate was closed: sent by a follower whose view of the cluster was
	// newer than the leader's, or written as the gate closed.
	PackedConverted uint64
}

type metrics struct {
	applyBatches, applyCommands, applyNanos atomic.Uint64
	entries, entryCommands                  atomic.Uint64
	commits, commitNanos                    atomic.Uint64
	forwarded, retries, creditsDropped      atomic.Uint64
	snapshots, lastSnapshotBytes            atomic.Uint64
	lastSnapshotNanos                       atomic.Uint64
	logAppends, logAppendEntries            atomic.Uint64
	packedCommands, packedConverted         atomic.Uint64
	// logAppendBytes: entry bytes appended to the local log since start;
	// snapBase: its value at the last snapshot (snapshotbytes.go).
	logAppendBytes, snapBase, snapshotsByBytes atomic.Uint64
}

// Metrics returns the counters.
func (n *Node) Metrics() Metrics {
	m := &n.metrics
	return Metrics{
		ApplyBatches: m.applyBatches.Load(), ApplyCommands: m.applyCommands.Load(),
		ApplyTime: time.Duration(m.applyNanos.Load()),
		Entries:   m.entries.Load(), EntryCommands: m.entryCommands.Load(),
		Commits: m.commits.Load(), CommitTime: time.Duration(m.commitNanos.Load()),
		Forwarded: m.forwarded.Load(), Retries: m.retries.Load(), CreditsDropped: m.creditsDropped.Load(),
		Snapshots: m.snapshots.Load(), LastSnapshotBytes: m.lastSnapshotBytes.Load(),
		LastSnapshotTime: time.Duration(m.lastSnapshotNanos.Load()),
		LogAppends:       m.logAppends.Load(), LogAppendEntries: m.logAppendEntries.Load(),
		PackedCommands: m.packedCommands.Load(), PackedConverted: m.packedConverted.Load(),
		LogAppendBytes: m.logAppendBytes.Load(), SnapshotsByLogBytes: m.snapshotsByBytes.Load(),
	}
}
