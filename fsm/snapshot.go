package fsm

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/hashicorp/raft"
	"github.com/inference-cache/inference-cache/command/fsmpb"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/policy"
	"github.com/inference-cache/inference-cache/snapshot"
)

// Snapshot implements raft.FSM. It takes the index's immutable View and a
// copy of the dedup window under the writer lock (cheap); Persist does the
// slow work.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.broken != nil {
		return nil, fmt.Errorf("fsm: no snapshot of a state that stopped at a damaged log: %w", f.broken)
	}
	return &fsmSnapshot{
		view:    f.ix.Load().View(),
		index:   f.applied.Load(),
		term:    f.appliedTerm.Load(),
		dedup:   f.dd.entries(),
		pos:     f.pos.sorted(),
		rem:     removals(f.Removals()).sorted(),
		tmpDir:  f.opts.TmpDir,
		onDone:  f.opts.Hooks.OnSnapshot,
		started: time.Now(),
		abort:   f.abort,
		log:     f.log,
	}, nil
}

type fsmSnapshot struct {
	view        *index.View
	index, term uint64
	dedup       []*fsmpb.DedupEntry
	pos         []*fsmpb.StreamPosition
	rem         []*fsmpb.Removal
	tmpDir      string
	onDone      func(int64, time.Duration, error)
	started     time.Time
	abort       context.Context // FSM.AbortSnapshots
	log         *slog.Logger
}

// Persist writes the snapshot stream to the sink.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	start := time.Now()
	// A large snapshot takes minutes on a busy node: say when it starts,
	// not only when it ends.
	s.log.Info("fsm: writing snapshot", "applied_index", s.index, "residencies", s.view.Sizes().Residencies)
	n, err := s.write(sink)
	if err != nil {
		sink.Cancel()
	} else {
		err = sink.Close()
	}
	if err == nil {
		s.log.Info("fsm: snapshot written", "applied_index", s.index, "bytes", n, "took", time.Since(start).Round(time.Millisecond))
	}
	if s.onDone != nil {
		s.onDone(n, time.Since(start), err)
	}
	return err
}

func (s *fsmSnapshot) write(w io.Writer) (int64, error) {
	dd, err := marshalDedup(s.dedup, s.pos, s.rem)
	if err != nil {
		return 0, fmt.Errorf("fsm: encode dedup window: %w", err)
	}
	return snapshot.WriteContext(s.abort, w, s.tmpDir, s.index, s.term, s.view, dd)
}

// Release implements raft.FSMSnapshot.
func (s *fsmSnapshot) Release() { s.view.Release() }

// Restore implements raft.FSM: it verifies the snapshot stream completely
// and builds a fresh index with index.NewBuilder, then swaps in the index,
// the dedup window and the applied index together — nothing of the
// previous state survives. On error the previous state is kept and the
// error wraps snapshot.ErrCorrupt / ErrTruncated / ErrVersion.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	start := time.Now()
	var b *index.Builder
	m, dd, err := snapshot.Read(rc, f.opts.TmpDir, func(p policy.Policy) snapshot.Builder {
		b = index.NewBuilder(p)
		return b
	})
	var d *dedup
	var pos positions
	var rem removals
	if err == nil {
		d, pos, rem, err = unmarshalDedup(dd)
	}
	if err != nil {
		if h := f.opts.Hooks.OnRestore; h != nil {
			h(0, time.Since(start), err)
		}
		return fmt.Errorf("fsm: restore: %w", err)
	}
	ix := b.Build()
	ix.SetApplyWorkers(f.opts.ApplyWorkers)
	f.mu.Lock()
	f.ix.Store(ix)
	f.dd = d
	f.pos = pos
	f.rem.Store(&rem)
	f.applied.Store(m.AppliedIndex)
	f.appliedTerm.Store(m.AppliedTerm)
	f.mu.Unlock()
	f.log.Info("fsm: restored snapshot", "applied_index", m.AppliedIndex, "residencies", m.Sizes.Residencies, "bytes", m.StreamBytes, "took", time.Since(start))
	if h := f.opts.Hooks.OnRestore; h != nil {
		h(m.StreamBytes, time.Since(start), nil)
	}
	return nil
}

// AbortSnapshots stops the snapshot writes in progress (Persist,
// WriteSnapshot) and every later one: they return an error wrapping
// context.Canceled, and Persist cancels its sink, so no snapshot is
// recorded. For a node that shuts down: writing a large snapshot takes
// minutes on a busy node, and raft's Shutdown waits for it. Idempotent.
func (f *FSM) AbortSnapshots() { f.abortCancel() }

// WriteSnapshot writes the current state as a snapshot stream to w (a
// backup taken outside Raft, e.g. in tests); it holds the writer lock only
// to take the view.
func (f *FSM) WriteSnapshot(w io.Writer) (int64, error) {
	s, err := f.Snapshot()
	if err != nil {
		return 0, err
	}
	defer s.Release()
	return s.(*fsmSnapshot).write(w)
}
