package fsm

import (
	"fmt"

	"github.com/inference-cache/inference-cache/command"
	"github.com/inference-cache/inference-cache/index"
)

// Runs of ingest commands. An entry holds one ingest command per
// group-committed caller (tens of them, a few hundred blocks each); the
// index applies a batch in parallel only when it is large
// (index.ApplyEventSegments, parallel.go there). applyIngestRun therefore
// hands consecutive ingest commands to the index in one call, cut into one
// segment per command so each still gets its own changed count. The state
// is the same as applying them one by one: ApplyEvents does not depend on
// how events are batched, and the run stops before any command whose
// outcome depends on an earlier one's (a request id already in the dedup
// window, or repeated within the run).

// minRunCommands: fewer consecutive ingest commands are applied one by one.
const minRunCommands = 2

// applyIngestRun applies the run of mergeable ingest commands starting at
// cmds[i], writing their results to out, and returns the index after the
// run; it returns i (nothing done) when no run of at least minRunCommands
// starts there or the FSM applies with one worker.
func (f *FSM) applyIngestRun(idx uint64, cmds []command.Decoded, i int, out []Result) int {
	if f.opts.ApplyWorkers < 2 {
		return i
	}
	k := i
	clear(f.run.ids)
	for ; k < len(cmds); k++ {
		dc := &cmds[k]
		off, _, ok := dc.ArenaSpan()
		if !ok {
			break
		}
		if k > i {
			if _, prevEnd, _ := cmds[k-1].ArenaSpan(); off != prevEnd {
				break // not adjacent in the arena (a command between them fell back)
			}
		}
		if id := dc.RequestID; id != "" {
			if f.dd.get(id) != nil {
				break
			}
			if _, seen := f.run.ids[id]; seen {
				break
			}
			if f.run.ids == nil {
				f.run.ids = map[string]struct{}{}
			}
			f.run.ids[id] = struct{}{}
		}
	}
	if k-i < minRunCommands {
		return i
	}
	run := cmds[i:k]
	base, _, _ := run[0].ArenaSpan()
	f.run.ends = f.run.ends[:0]
	f.run.hashes = f.run.hashes[:0]
	end := base
	for m := range run {
		_, end, _ = run[m].ArenaSpan()
		f.run.ends = append(f.run.ends, end-base)
		var h uint64
		if run[m].RequestID != "" {
			h, f.hashBuf = command.PayloadHash(&run[m], f.hashBuf)
		}
		f.run.hashes = append(f.run.hashes, h)
	}
	f.run.changed = append(f.run.changed[:0], make([]int, len(run))...)
	evs := f.dec.Events(base, end)
	if err := f.applySegments(evs); err != nil {
		// Runs exist only on nodes with ApplyWorkers > 1; one applying
		// the commands one by one would reject just the one that
		// panicked. Stop rather than go on with state that differs.
		f.halt(idx, fmt.Errorf("%w: log entry %d: %w", ErrApplyPanic, idx, err))
		for m := range run {
			out[i+m] = Result{RequestID: run[m].RequestID, Index: idx, Err: f.broken}
		}
		return len(cmds)
	}
	f.pos.forgetCleared(evs)
	for m := range run {
		r := Result{RequestID: run[m].RequestID, Index: idx, Changed: f.run.changed[m]}
		f.remember(r, f.run.hashes[m])
		out[i+m] = r
	}
	return k
}

// applySegments applies a run, turning a panic into an error.
func (f *FSM) applySegments(evs []index.BlockEvent) (err error) {
	defer func() {
		if p := recover(); p != nil {
			if pp, ok := p.(index.ParallelPanic); ok {
				p = pp.Value
			}
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	if testRunHook != nil {
		testRunHook()
	}
	f.ix.Load().ApplyEventSegments(evs, f.run.ends, f.run.changed)
	return nil
}

// testRunHook, when set (tests only), runs before each run is applied.
var testRunHook func()

// ingestRun is applyIngestRun's scratch, reused across entries.
type ingestRun struct {
	ids     map[string]struct{}
	ends    []int
	changed []int
	hashes  []uint64
}
