package fsm

import (
	"slices"
	"strings"

	"github.com/inference-cache/inference-cache/command/fsmpb"
	"github.com/inference-cache/inference-cache/index"
)

// MaxStreamPositions bounds the engine stream positions the FSM holds
// (contract §6.11): one per engine socket of the fleet. A position of a
// replica not yet held is not recorded past it (on every node alike); its
// subscriber then resumes as if it had none, from empty.
const MaxStreamPositions = 1 << 16

// positions are the engine stream positions by replica id (contract
// §6.11): where each replica's event stream stood when the cluster
// applied its last recorded batch. Apply changes them; they are part of
// every snapshot (in the FSM's own state, beside the dedup window).
type positions map[string]*fsmpb.StreamPosition

// record sets ps in order and returns how many were recorded.
func (p positions) record(ps []*fsmpb.StreamPosition) int {
	n := 0
	for _, sp := range ps {
		id := sp.GetReplicaId()
		if id == "" || sp.GetSeq() < 0 {
			continue
		}
		if _, ok := p[id]; !ok && len(p) >= MaxStreamPositions {
			continue
		}
		p[id] = &fsmpb.StreamPosition{ReplicaId: id, Seq: sp.GetSeq(), BatchHash: sp.GetBatchHash()}
		n++
	}
	return n
}

// forgetCleared drops the position of every replica a CLEARED event of
// evs names: the claims a position vouched for are gone, so a subscriber
// must not resume from it.
func (p positions) forgetCleared(evs []index.BlockEvent) {
	if len(p) == 0 {
		return
	}
	for i := range evs {
		if evs[i].Kind == index.Cleared {
			delete(p, evs[i].ReplicaID)
		}
	}
}

// sorted returns the positions by replica id ascending (deterministic
// snapshot bytes); the messages are never mutated after record.
func (p positions) sorted() []*fsmpb.StreamPosition {
	out := make([]*fsmpb.StreamPosition, 0, len(p))
	for _, sp := range p {
		out = append(out, sp)
	}
	slices.SortFunc(out, func(a, b *fsmpb.StreamPosition) int { return strings.Compare(a.ReplicaId, b.ReplicaId) })
	return out
}

// StreamPositions returns the positions held for ids, in the order asked;
// an id without one is left out (contract §6.11).
func (f *FSM) StreamPositions(ids []string) []*fsmpb.StreamPosition {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*fsmpb.StreamPosition
	for _, id := range ids {
		if sp, ok := f.pos[id]; ok {
			out = append(out, sp)
		}
	}
	return out
}
