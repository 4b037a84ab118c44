package fsm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/inference-cache/inference-cache/command"
	"github.com/inference-cache/inference-cache/command/fsmpb"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/policy"
)

// Constants of the state machine. DedupWindow must be equal on every node
// of a cluster (it decides which retries are recognised), so it is not a
// setting.
const (
	// DedupWindow is how many recent request ids apply remembers. At 5 k
	// ingest calls/s it covers ~26 s, far beyond the ~5 s a client retries.
	DedupWindow = 1 << 17
)

var (
	// ErrRejected: apply refused a command (invalid policy, unknown
	// command, a panic in the index); state is unchanged by it.
	ErrRejected = errors.New("fsm: command rejected")
	// ErrRequestIDReused: a command carried a request id still in the
	// dedup window (DedupWindow ids) that was first used for a command
	// with different bytes; it is refused (and wraps ErrRejected too), so
	// a client bug reusing ids never silently drops a write.
	ErrRequestIDReused = errors.New("request id reused for a different payload")
)

// Result is the outcome of one command.
type Result struct {
	// RequestID is the command's request id.
	RequestID string
	// Index is the Raft log index at which the command took effect (for a
	// duplicate: where the original applied).
	Index uint64
	// Changed is what the index reported: events that changed state
	// (ingest), residencies dropped (expire), stats records (stats).
	Changed int
	// Duplicate is true when the request id was already applied; nothing
	// changed this time and the other fields repeat the original outcome.
	Duplicate bool
	// Policy is the committed policy (SetPolicy only).
	Policy *policy.Policy
	// Err is non-nil when apply refused the command (wraps ErrRejected,
	// command.ErrEntryFormat or command.ErrDecode); state is unchanged by
	// it.
	Err error
}

// EntryResult is what Apply/ApplyBatch return for a command log entry
// (raft's ApplyFuture.Response()): one Result per command, in order.
type EntryResult struct {
	Index   uint64
	Results []Result
}

// Hooks are optional observation callbacks (metrics). They run on the apply
// goroutine and must be fast.
type Hooks struct {
	// OnApply reports one ApplyBatch: log entries, commands and duration.
	OnApply func(entries, commands int, d time.Duration)
	// OnSnapshot reports one Persist: stream bytes and duration, or err.
	OnSnapshot func(bytes int64, d time.Duration, err error)
	// OnRestore reports one Restore.
	OnRestore func(bytes int64, d time.Duration, err error)
}

// Options configure an FSM.
type Options struct {
	// TmpDir holds temporary bbolt files of Persist and Restore ("" =
	// os.TempDir()). Put it on the data volume: files are index-sized.
	TmpDir string
	// Logger for apply errors and restores (nil = discard).
	Logger *slog.Logger
	// Hooks for metrics.
	Hooks Hooks
	// OnCorrupt is called (once, under the apply lock: do not call back
	// into the FSM) when the FSM stops applying: a log entry fails its
	// checksum (ErrCorrupt), or the apply panicked where the state left
	// depends on this node's settings (ErrApplyPanic). The FSM applies
	// nothing from then on and refuses snapshots, so the node never serves
	// or ships state built from a damaged log or a broken apply; the owner
	// should stop the node. nil = only logged.
	OnCorrupt func(index uint64, err error)
	// ApplyWorkers: goroutines the index may use to apply a large batch
	// of STORED events (index.SetApplyWorkers; ≤ 1 = the apply goroutine
	// alone). With more than one, the consecutive ingest commands of an
	// entry are applied as one batch. The state never depends on it.
	ApplyWorkers int
}

// FSM holds the index and applies the Raft log to it. Apply, Snapshot,
// Restore and Digest serialise on one mutex; lookups read Index() without
// it.
type FSM struct {
	mu          sync.Mutex // the writer lock: apply, snapshot view, restore swap, digest
	ix          atomic.Pointer[index.Index]
	applied     atomic.Uint64
	appliedTerm atomic.Uint64
	dd          *dedup
	pos         positions
	rem         atomic.Pointer[removals] // removals.go: replaced, never changed
	hashBuf     []byte                   // PayloadHash scratch (apply is single-threaded)
	dec         command.Decoder          // reused for every entry (ditto)
	run         ingestRun                // applyIngestRun's scratch (ditto)
	broken      error                    // set by a corrupt entry; apply and snapshot stop
	opts        Options
	log         *slog.Logger
	// abort is done once AbortSnapshots was called: snapshot writes stop.
	abort       context.Context
	abortCancel context.CancelFunc
}

var _ raft.BatchingFSM = (*FSM)(nil)

// New returns an FSM with an empty index under policy p.
func New(p policy.Policy, opts Options) *FSM {
	f := &FSM{dd: newDedup(), pos: positions{}, opts: opts, log: opts.Logger}
	f.abort, f.abortCancel = context.WithCancel(context.Background())
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	ix := index.New(p)
	ix.SetApplyWorkers(opts.ApplyWorkers)
	f.ix.Store(ix)
	return f
}

// Index returns the current index for lookups. The pointer changes on
// Restore: fetch it per lookup, never cache it.
func (f *FSM) Index() *index.Index { return f.ix.Load() }

// AppliedIndex is the last Raft log index this FSM finished applying (contract
// §13: not raft.AppliedIndex, which counts what was handed over).
func (f *FSM) AppliedIndex() uint64 { return f.applied.Load() }

// Policy returns the policy in force.
func (f *FSM) Policy() policy.Policy { return f.ix.Load().Policy() }

// Digest returns the applied index and the index digest as one consistent
// pair (it waits for an in-flight apply batch).
func (f *FSM) Digest() (appliedIndex, digest uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.applied.Load(), f.ix.Load().Digest()
}

// DedupLen is the number of request ids in the window (diagnostics).
func (f *FSM) DedupLen() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dd.len()
}

// Apply implements raft.FSM for a single log.
func (f *FSM) Apply(l *raft.Log) interface{} {
	return f.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch implements raft.BatchingFSM. Command entries return an
// *EntryResult; configuration entries only advance the applied index and
// return nil.
func (f *FSM) ApplyBatch(logs []*raft.Log) []interface{} {
	start := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]interface{}, len(logs))
	cmds := 0
	for i, l := range logs {
		var data []byte
		if f.broken == nil && l.Type == raft.LogCommand {
			var err error
			if data, err = command.VerifyEntry(l.Data); err != nil {
				f.broken = fmt.Errorf("log entry %d (term %d): %w", l.Index, l.Term, err)
				f.log.Error("fsm: log entry fails its checksum; applying nothing more (this node's log is damaged: replace its data)",
					"index", l.Index, "err", err)
				if h := f.opts.OnCorrupt; h != nil {
					h(l.Index, f.broken)
				}
			}
		}
		if f.broken != nil {
			// Nothing applies and the applied index stays put, so a
			// snapshot or digest never claims state past the damage.
			out[i] = &EntryResult{Index: l.Index, Results: []Result{{Index: l.Index, Err: f.broken}}}
			continue
		}
		if l.Type == raft.LogCommand {
			r := f.applyEntry(l, data)
			cmds += len(r.Results)
			out[i] = r
			if f.broken != nil { // the entry's apply stopped the FSM (halt)
				out[i] = &EntryResult{Index: l.Index, Results: []Result{{Index: l.Index, Err: f.broken}}}
				continue
			}
		}
		f.applied.Store(l.Index)
		f.appliedTerm.Store(l.Term)
	}
	if h := f.opts.Hooks.OnApply; h != nil {
		h(len(logs), cmds, time.Since(start))
	}
	return out
}

// applyEntry applies command entry l; data is its verified body
// (command.VerifyEntry).
func (f *FSM) applyEntry(l *raft.Log, data []byte) *EntryResult {
	res := &EntryResult{Index: l.Index}
	format, cmds, err := f.dec.Decode(data)
	if err != nil {
		f.log.Error("fsm: log entry does not decode", "index", l.Index, "err", err)
		res.Results = []Result{{Index: l.Index, Err: err}}
		return res
	}
	res.Results = make([]Result, len(cmds))
	if format > command.EntryFormat {
		for i, c := range cmds {
			res.Results[i] = Result{RequestID: c.RequestID, Index: l.Index,
				Err: fmt.Errorf("%w: entry %d has format %d, this binary applies ≤ %d", command.ErrEntryFormat, l.Index, format, command.EntryFormat)}
		}
		return res
	}
	for i := 0; i < len(cmds) && f.broken == nil; i++ {
		if j := f.applyIngestRun(l.Index, cmds, i, res.Results); j > i {
			i = j - 1
			continue
		}
		res.Results[i] = f.applyCommand(l.Index, &cmds[i])
	}
	return res
}

func (f *FSM) applyCommand(idx uint64, dc *command.Decoded) (r Result) {
	r = Result{RequestID: dc.RequestID, Index: idx}
	var hash uint64
	if dc.RequestID != "" {
		hash, f.hashBuf = command.PayloadHash(dc, f.hashBuf)
		if d := f.dd.get(dc.RequestID); d != nil {
			return f.repeated(idx, dc, d, hash)
		}
	}
	defer func() {
		if p := recover(); p != nil {
			if pp, ok := p.(index.ParallelPanic); ok {
				f.halt(idx, fmt.Errorf("%w: log entry %d, request %q: %v", ErrApplyPanic, idx, dc.RequestID, pp.Value))
				r.Err = f.broken
				return
			}
			// Deterministic: every node panics on the same command. The
			// index may be partly updated, identically everywhere.
			f.log.Error("fsm: apply panicked", "index", idx, "request_id", dc.RequestID, "panic", p)
			r.Err = fmt.Errorf("%w: apply panicked: %v", ErrRejected, p)
			f.remember(r, hash)
		}
	}()
	if errors.Is(dc.Err, command.ErrUnknownBody) {
		// What a binary that predates the body says (its default case
		// in applyBody), so both record the same in the dedup window.
		r.Err = fmt.Errorf("%w: unknown command at index %d (written by a newer binary?)", ErrRejected, idx)
		f.remember(r, hash)
		return r
	}
	if dc.Err != nil {
		r.Err = fmt.Errorf("%w: %w", ErrRejected, dc.Err)
		f.remember(r, hash)
		return r
	}
	ix := f.ix.Load()
	if dc.Msg == nil { // ingest
		r.Changed = ix.ApplyEvents(dc.Events)
		f.pos.forgetCleared(dc.Events)
	} else {
		f.applyBody(idx, ix, dc, &r)
	}
	f.remember(r, hash)
	return r
}

// repeated is the result of command dc at log index idx whose request id
// already applied (dedup entry d): the first application's result, marked
// Duplicate, or a rejection when the id was reused for another payload
// (different hash).
func (f *FSM) repeated(idx uint64, dc *command.Decoded, d *fsmpb.DedupEntry, hash uint64) Result {
	if d.PayloadHash != 0 && hash != 0 && d.PayloadHash != hash {
		// Not a retry: the client reused the id for another
		// write. Taking it for one would silently drop this
		// write; applying it would break "a request id applies
		// once". Refuse it, on every node alike.
		return Result{RequestID: dc.RequestID, Index: idx, Err: fmt.Errorf("%w: %w: request_id %q was first used at log index %d",
			ErrRejected, ErrRequestIDReused, dc.RequestID, d.Index)}
	}
	r := Result{RequestID: dc.RequestID, Index: d.Index, Changed: int(d.Changed), Duplicate: true}
	if d.Error != "" {
		r.Err = fmt.Errorf("%w: %s", ErrRejected, d.Error)
	}
	if dc.Msg != nil {
		if _, ok := dc.Msg.Body.(*fsmpb.Command_SetPolicy); ok {
			p := f.ix.Load().Policy()
			r.Policy = &p
		}
	}
	return r
}

// applyBody applies a decoded non-ingest command at log index idx to ix,
// setting r's Changed, Err and (for SetPolicy) Policy.
func (f *FSM) applyBody(idx uint64, ix *index.Index, dc *command.Decoded, r *Result) {
	switch b := dc.Msg.Body.(type) {
	case *fsmpb.Command_Stats:
		ix.ApplyStats(dc.Stats)
		r.Changed = len(dc.Stats)
	case *fsmpb.Command_SetPolicy:
		p := fsmpb.PolicyFromPB(b.SetPolicy.GetPolicy())
		p.Version = ix.Policy().Version + 1
		if err := p.Validate(); err != nil {
			r.Err = fmt.Errorf("%w: %w", ErrRejected, err)
		} else {
			ix.SetPolicy(p)
			r.Changed = 1
		}
		cur := ix.Policy()
		r.Policy = &cur
	case *fsmpb.Command_Expire:
		r.Changed = ix.Expire(b.Expire.GetNowMs())
	case *fsmpb.Command_Credit:
		ix.Credit(fsmpb.PartitionFromPB(b.Credit.GetPartition()), b.Credit.GetHashes())
		r.Changed = len(b.Credit.GetHashes())
	case *fsmpb.Command_StreamPositions:
		r.Changed = f.pos.record(b.StreamPositions.GetPositions())
	case *fsmpb.Command_Removal:
		cur := f.Removals()
		if next, err := removals(cur).with(b.Removal); err != nil {
			r.Err = err
		} else {
			f.rem.Store(&next)
			r.Changed = 1
		}
	case *fsmpb.Command_RestoreMark:
		if d := ix.Digest(); d != b.RestoreMark.GetBackupDigest() {
			// Writes may have landed between the restore and this mark,
			// so a mismatch is reported, not fatal.
			r.Err = fmt.Errorf("%w: restore mark: digest %016x differs from backup %016x (backup index %d)",
				ErrRejected, d, b.RestoreMark.GetBackupDigest(), b.RestoreMark.GetBackupAppliedIndex())
		}
	default:
		r.Err = fmt.Errorf("%w: unknown command at index %d (written by a newer binary?)", ErrRejected, idx)
	}
}

// ErrApplyPanic: the apply panicked in a parallel batch or a run of
// ingest commands, where what the index holds after the panic depends on
// this node's ApplyWorkers; the FSM stops (OnCorrupt) instead of going on
// with state other nodes may not share.
var ErrApplyPanic = errors.New("fsm: apply panicked in a parallel batch")

// halt stops the FSM for good at log index idx (apply lock held): nothing
// more applies, snapshots are refused, OnCorrupt tells the owner.
func (f *FSM) halt(idx uint64, err error) {
	if f.broken != nil {
		return
	}
	f.broken = err
	f.log.Error("fsm: applying nothing more: this node's state can no longer be trusted (replace its data)", "index", idx, "err", err)
	if h := f.opts.OnCorrupt; h != nil {
		h(idx, err)
	}
}

func (f *FSM) remember(r Result, payloadHash uint64) {
	if r.RequestID == "" || f.dd.get(r.RequestID) != nil {
		return
	}
	e := &fsmpb.DedupEntry{RequestId: r.RequestID, Index: r.Index, Changed: uint32(r.Changed), PayloadHash: payloadHash}
	if r.Err != nil {
		e.Error = r.Err.Error()
	}
	if r.Policy != nil {
		e.PolicyVersion = r.Policy.Version
	}
	f.dd.add(e)
}

// IsRejected reports whether err is an apply-time refusal.
func IsRejected(err error) bool { return errors.Is(err, ErrRejected) }
