package fsm

import (
	"fmt"
	"maps"
	"slices"

	"github.com/inference-cache/inference-cache/command/fsmpb"
)

// MaxRemovals bounds the removal records the FSM holds (contract §8.3):
// one per server id an operator removed while its process ran. A record
// for an id not yet held is refused past it, on every node alike.
const MaxRemovals = 1024

// removals are the removal records, server id → the gossip nonce of the
// process removed while it ran (contract §8.3). The map is never changed
// once published: apply replaces it, so readers take it without the
// writer lock.
type removals map[string]string

// with returns the records after r: r's nonce for its server id, or the
// id forgotten when the nonce is empty. An empty id, or an id past
// MaxRemovals, is an error naming the field and the limit; the records
// are then unchanged.
func (rs removals) with(r *fsmpb.Removal) (removals, error) {
	id := r.GetServerId()
	if id == "" {
		return rs, fmt.Errorf("%w: removal: server_id is required", ErrRejected)
	}
	if r.GetNonce() == "" {
		if _, ok := rs[id]; !ok {
			return rs, nil
		}
		next := maps.Clone(rs)
		delete(next, id)
		return next, nil
	}
	if _, ok := rs[id]; !ok && len(rs) >= MaxRemovals {
		return rs, fmt.Errorf("%w: removal of %q: at most %d removal records", ErrRejected, id, MaxRemovals)
	}
	next := maps.Clone(rs)
	if next == nil {
		next = removals{}
	}
	next[id] = r.GetNonce()
	return next, nil
}

// sorted returns the records by server id ascending (deterministic
// snapshot bytes).
func (rs removals) sorted() []*fsmpb.Removal {
	out := make([]*fsmpb.Removal, 0, len(rs))
	for _, id := range slices.Sorted(maps.Keys(rs)) {
		out = append(out, &fsmpb.Removal{ServerId: id, Nonce: rs[id]})
	}
	return out
}

// removalsFrom is the records a snapshot held; an entry without an id or
// nonce, or one past MaxRemovals, is left out.
func removalsFrom(rs []*fsmpb.Removal) removals {
	out := removals{}
	for _, r := range rs {
		if r.GetServerId() == "" || r.GetNonce() == "" {
			continue
		}
		if _, ok := out[r.GetServerId()]; !ok && len(out) >= MaxRemovals {
			continue
		}
		out[r.GetServerId()] = r.GetNonce()
	}
	return out
}

// Removals returns the removal records this node has applied, server id
// → the nonce of the process an operator removed while it ran (contract
// §8.3); nil when there are none. The map is shared: callers must not
// change it. A local read, without the writer lock: a follower may be
// behind the leader.
func (f *FSM) Removals() map[string]string {
	if p := f.rem.Load(); p != nil {
		return *p
	}
	return nil
}
