package fsm

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/inference-cache/inference-cache/command/fsmpb"
)

// dedup is the window of the last DedupWindow request ids in log order.
// Its content depends only on the applied log, so it is identical on every
// node, and it is saved in snapshots so a restart plus replay de-duplicates
// exactly as before.
type dedup struct {
	q    []*fsmpb.DedupEntry // FIFO; q[head:] are live
	head int
	byID map[string]*fsmpb.DedupEntry
}

func newDedup() *dedup { return &dedup{byID: map[string]*fsmpb.DedupEntry{}} }

func (d *dedup) get(id string) *fsmpb.DedupEntry { return d.byID[id] }

func (d *dedup) add(e *fsmpb.DedupEntry) {
	if len(d.q)-d.head >= DedupWindow {
		old := d.q[d.head]
		d.q[d.head] = nil
		d.head++
		delete(d.byID, old.RequestId)
	}
	// compact when half the backing array is dead
	if d.head > DedupWindow/2 && d.head*2 > len(d.q) {
		d.q = append(d.q[:0:0], d.q[d.head:]...)
		d.head = 0
	}
	d.q = append(d.q, e)
	d.byID[e.RequestId] = e
}

// entries returns the live entries, oldest first (a copy of the slice; the
// entries themselves are never mutated after add).
func (d *dedup) entries() []*fsmpb.DedupEntry {
	return append([]*fsmpb.DedupEntry(nil), d.q[d.head:]...)
}

func (d *dedup) len() int { return len(d.q) - d.head }

// marshalDedup encodes the FSM's own state for a snapshot: the dedup
// window es, the stream positions ps (replica id ascending) and the
// removal records rs (server id ascending).
func marshalDedup(es []*fsmpb.DedupEntry, ps []*fsmpb.StreamPosition, rs []*fsmpb.Removal) ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(&fsmpb.Dedup{Entries: es, StreamPositions: ps, Removals: rs})
}

func unmarshalDedup(b []byte) (*dedup, positions, removals, error) {
	var w fsmpb.Dedup
	if err := proto.Unmarshal(b, &w); err != nil {
		return nil, nil, nil, fmt.Errorf("fsm: dedup window does not decode: %w", err)
	}
	pos := positions{}
	pos.record(w.StreamPositions)
	d := newDedup()
	for _, e := range w.Entries {
		if d.byID[e.RequestId] == nil {
			d.add(e)
		}
	}
	return d, pos, removalsFrom(w.Removals), nil
}
