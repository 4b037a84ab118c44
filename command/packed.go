package command

import (
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/inference-cache/inference-cache/command/fsmpb"
	"github.com/inference-cache/inference-cache/index"
)

// Decoding of packed ingest commands (fsmpb.IngestPacked), on the fast
// path (decodePackedFast, straight from the wire) and the generic one
// (packedColsFromPB, from the generated message).

// packedCols are a packed command's columns, decoded: from the wire by
// decodePackedFast, or from the generated message by packedColsFromPB. Both
// paths expand them with expandPacked, so they decode alike.
type packedCols struct {
	parts                                                   []index.Partition
	replicas                                                []string
	kinds, replicaRefs, partRefs, hashLens, countLens, pref []uint32
	deltas                                                  []int64
	hashes                                                  []uint64
	counts                                                  []uint32
}

// expandPacked appends c's events to a (block slices aliasing c.hashes and
// c.counts) and returns them; an error wraps ErrPacked.
func expandPacked(c *packedCols, a *Decoder) ([]index.BlockEvent, error) {
	n := len(c.kinds)
	for _, col := range [...]struct {
		name string
		l    int
	}{{"replica_refs", len(c.replicaRefs)}, {"partition_refs", len(c.partRefs)}, {"hash_lens", len(c.hashLens)},
		{"count_lens", len(c.countLens)}, {"prefix_tokens_before", len(c.pref)}, {"observed_at_deltas", len(c.deltas)}} {
		if col.l != n {
			return nil, fmt.Errorf("%w: %s has %d values for %d events", ErrPacked, col.name, col.l, n)
		}
	}
	e0 := len(a.evs)
	var obs int64
	h, t := 0, 0
	for i := 0; i < n; i++ {
		if int(c.replicaRefs[i]) >= len(c.replicas) || int(c.partRefs[i]) >= len(c.parts) {
			return nil, fmt.Errorf("%w: event %d names replica %d of %d or partition %d of %d",
				ErrPacked, i, c.replicaRefs[i], len(c.replicas), c.partRefs[i], len(c.parts))
		}
		hl, cl := int(c.hashLens[i]), int(c.countLens[i])
		if hl > len(c.hashes)-h || cl > len(c.counts)-t {
			return nil, fmt.Errorf("%w: event %d runs past the block columns", ErrPacked, i)
		}
		obs += c.deltas[i]
		e := index.BlockEvent{Kind: index.EventKind(c.kinds[i]), ReplicaID: c.replicas[c.replicaRefs[i]],
			Partition: c.parts[c.partRefs[i]], PrefixTokensBefore: c.pref[i], ObservedAtMs: obs}
		if hl > 0 {
			e.BlockHashes = c.hashes[h : h+hl : h+hl]
		}
		if cl > 0 {
			e.BlockTokenCounts = c.counts[t : t+cl : t+cl]
		}
		h, t = h+hl, t+cl
		a.evs = append(a.evs, e)
	}
	if h != len(c.hashes) || t != len(c.counts) {
		return nil, fmt.Errorf("%w: %d block hashes and %d token counts, the events use %d and %d",
			ErrPacked, len(c.hashes), len(c.counts), h, t)
	}
	return a.evs[e0:len(a.evs):len(a.evs)], nil
}

// packedColsFromPB takes the generated message's columns (the generic
// decoding path).
func packedColsFromPB(m *fsmpb.IngestPacked) *packedCols {
	c := &packedCols{replicas: m.GetReplicas(), kinds: m.GetKinds(), replicaRefs: m.GetReplicaRefs(),
		partRefs: m.GetPartitionRefs(), hashLens: m.GetHashLens(), countLens: m.GetCountLens(),
		pref: m.GetPrefixTokensBefore(), deltas: m.GetObservedAtDeltas(), hashes: m.GetBlockHashes(),
		counts: m.GetBlockTokenCounts()}
	for _, p := range m.GetPartitions() {
		c.parts = append(c.parts, fsmpb.PartitionFromPB(p))
	}
	return c
}

// decodePackedFast decodes an IngestPacked body written by
// MarshalIngest (every column packed, nothing unknown) into a; ok
// is false for any other shape, which the generic path then decodes.
func decodePackedFast(b []byte, in *interner, a *Decoder) (evs []index.BlockEvent, err error, ok bool) {
	c := &a.cols
	c.reset()
	h0, t0 := len(a.hashes), len(a.counts)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType {
			return nil, nil, false
		}
		b = b[n:]
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil, nil, false
		}
		b = b[n:]
		switch num {
		case pkPartitions:
			p, ok := decodePartitionFast(v, in)
			if !ok {
				return nil, nil, false
			}
			c.parts = append(c.parts, p)
		case pkReplicas:
			if !utf8.Valid(v) {
				return nil, nil, false
			}
			c.replicas = append(c.replicas, string(v))
		case pkKinds, pkReplicaRefs, pkPartitionRefs, pkHashLens, pkCountLens, pkPrefixTokens, pkCounts:
			// A column split over several fields concatenates, as
			// repeated fields do in protobuf.
			col := c.col32(num, a)
			for len(v) > 0 {
				x, n := protowire.ConsumeVarint(v)
				if n < 0 {
					return nil, nil, false
				}
				*col = append(*col, uint32(x))
				v = v[n:]
			}
		case pkObservedDelta:
			for len(v) > 0 {
				x, n := protowire.ConsumeVarint(v)
				if n < 0 {
					return nil, nil, false
				}
				c.deltas = append(c.deltas, protowire.DecodeZigZag(x))
				v = v[n:]
			}
		case pkHashes:
			if len(v)%8 != 0 {
				return nil, nil, false
			}
			for ; len(v) > 0; v = v[8:] {
				x, _ := protowire.ConsumeFixed64(v)
				a.hashes = append(a.hashes, x)
			}
		default:
			return nil, nil, false
		}
	}
	c.hashes = a.hashes[h0:]
	c.counts = a.counts[t0:]
	evs, err = expandPacked(c, a)
	return evs, err, true
}

// col32 is the uint32 column of field num; token counts go straight into
// the arena's block slice, like hashes.
func (c *packedCols) col32(num protowire.Number, a *Decoder) *[]uint32 {
	switch num {
	case pkKinds:
		return &c.kinds
	case pkReplicaRefs:
		return &c.replicaRefs
	case pkPartitionRefs:
		return &c.partRefs
	case pkHashLens:
		return &c.hashLens
	case pkCountLens:
		return &c.countLens
	case pkPrefixTokens:
		return &c.pref
	}
	return &a.counts
}

// reset empties c, keeping its slices' storage for the next command.
func (c *packedCols) reset() {
	clear(c.replicas)
	*c = packedCols{parts: c.parts[:0], replicas: c.replicas[:0], kinds: c.kinds[:0], replicaRefs: c.replicaRefs[:0],
		partRefs: c.partRefs[:0], hashLens: c.hashLens[:0], countLens: c.countLens[:0], pref: c.pref[:0],
		deltas: c.deltas[:0]}
}
