package command

import (
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/inference-cache/inference-cache/command/fsmpb"
	"github.com/inference-cache/inference-cache/index"
)

// Entries of format 1 carry ingest commands as fsmpb.Ingest: a protobuf
// message per event, each repeating its replica id and partition. This
// package no longer writes them; it reads them so that a log holding
// them still loads, and decodeLegacyIngest is the only way in.

// decodeLegacyIngest returns the events of a format-1 ingest command:
// from its generated message m when the command was decoded by
// proto.Unmarshal, else from its wire bytes b on the fast path (into a,
// with in). ok is false when b is not in the canonical shape; the caller
// then decodes the command with proto.Unmarshal and calls again with m.
func decodeLegacyIngest(b []byte, m *fsmpb.Ingest, in *interner, a *Decoder) (evs []index.BlockEvent, ok bool) {
	if m != nil {
		return fsmpb.EventsFromPB(m.GetEvents()), true
	}
	return legacyWire(b, in, a)
}

type evSpan struct{ h0, h1, t0, t1 int }

// legacyWire appends the events of a format-1 Ingest body to a and
// returns them (a slice of a.evs whose block slices alias a.hashes and
// a.counts). On failure a's contents past what earlier commands hold are
// garbage, and the caller falls back to proto.Unmarshal.
func legacyWire(b []byte, in *interner, a *Decoder) ([]index.BlockEvent, bool) {
	e0 := len(a.evs)
	evs, spans, hashes, counts := a.evs, a.spans[:0], a.hashes, a.counts
	// The slices are put back on every return so growth is kept.
	defer func() { a.evs, a.spans, a.hashes, a.counts = evs, spans, hashes, counts }()
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num != 1 || typ != protowire.BytesType {
			return nil, false
		}
		b = b[n:]
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil, false
		}
		b = b[n:]
		sp := evSpan{h0: len(hashes), t0: len(counts)}
		var e index.BlockEvent
		var ok bool
		if e, hashes, counts, ok = legacyEvent(v, in, hashes, counts); !ok {
			return nil, false
		}
		sp.h1, sp.t1 = len(hashes), len(counts)
		evs = append(evs, e)
		spans = append(spans, sp)
	}
	out := evs[e0:len(evs):len(evs)]
	for i, sp := range spans {
		if sp.h1 > sp.h0 {
			out[i].BlockHashes = hashes[sp.h0:sp.h1:sp.h1]
		}
		if sp.t1 > sp.t0 {
			out[i].BlockTokenCounts = counts[sp.t0:sp.t1:sp.t1]
		}
	}
	return out, true
}

// legacyEvent decodes one fsmpb.BlockEvent message v, appending its block
// hashes and token counts to hashes and counts. ok is false when v is not
// in the canonical shape (an unknown field or wire type, a repeated
// partition).
func legacyEvent(v []byte, in *interner, hashes []uint64, counts []uint32) (_ index.BlockEvent, _ []uint64, _ []uint32, ok bool) {
	var e index.BlockEvent
	seenPart := false
	for len(v) > 0 {
		num, typ, n := protowire.ConsumeTag(v)
		if n < 0 {
			return e, hashes, counts, false
		}
		v = v[n:]
		switch typ {
		case protowire.VarintType:
			x, n := protowire.ConsumeVarint(v)
			if n < 0 {
				return e, hashes, counts, false
			}
			v = v[n:]
			hashes, counts, ok = legacyVarint(&e, num, x, hashes, counts)
		case protowire.BytesType:
			x, n := protowire.ConsumeBytes(v)
			if n < 0 {
				return e, hashes, counts, false
			}
			v = v[n:]
			if num == 3 {
				if seenPart { // a repeated message field merges
					return e, hashes, counts, false
				}
				seenPart = true
			}
			hashes, counts, ok = legacyBytes(&e, num, x, in, hashes, counts)
		default:
			ok = false
		}
		if !ok {
			return e, hashes, counts, false
		}
	}
	return e, hashes, counts, true
}

// legacyVarint sets the varint field num of e to x (a block hash or token
// count is appended to hashes or counts); ok is false for a field that is
// not a varint field of BlockEvent.
func legacyVarint(e *index.BlockEvent, num protowire.Number, x uint64, hashes []uint64, counts []uint32) ([]uint64, []uint32, bool) {
	switch num {
	case 1:
		e.Kind = index.EventKind(uint32(x))
	case 4:
		hashes = append(hashes, x)
	case 5:
		counts = append(counts, uint32(x))
	case 6:
		e.PrefixTokensBefore = uint32(x)
	case 7:
		e.ObservedAtMs = int64(x)
	default:
		return hashes, counts, false
	}
	return hashes, counts, true
}

// legacyBytes sets the length-delimited field num of e from x: the
// replica id, the partition, or packed block hashes or token counts
// (appended to hashes or counts). ok is false for a field that is not one
// of these or does not decode.
func legacyBytes(e *index.BlockEvent, num protowire.Number, x []byte, in *interner, hashes []uint64, counts []uint32) ([]uint64, []uint32, bool) {
	switch num {
	case 2:
		s, ok := in.str(0, x)
		if !ok {
			return hashes, counts, false
		}
		e.ReplicaID = s
	case 3:
		p, ok := decodePartitionFast(x, in)
		if !ok {
			return hashes, counts, false
		}
		e.Partition = p
	case 4: // packed
		for len(x) > 0 {
			h, n := protowire.ConsumeVarint(x)
			if n < 0 {
				return hashes, counts, false
			}
			hashes = append(hashes, h)
			x = x[n:]
		}
	case 5:
		for len(x) > 0 {
			c, n := protowire.ConsumeVarint(x)
			if n < 0 {
				return hashes, counts, false
			}
			counts = append(counts, uint32(c))
			x = x[n:]
		}
	default:
		return hashes, counts, false
	}
	return hashes, counts, true
}
