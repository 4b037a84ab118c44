package fsm

import (
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/inference-cache/inference-cache/fsm/fsmpb"
	"github.com/inference-cache/inference-cache/index"
)

// Fast decoding of log entries. Ingest commands are by far the most
// frequent and the largest; decoding them through the generated protobuf
// code allocates a message per event and per partition and then converts
// them (about a quarter of apply's CPU). decodeEntryFast reads the wire
// format directly into []index.BlockEvent. It accepts only the canonical
// shape of what this binary writes (known fields, each singular field at
// most once where merging would matter, valid UTF-8); anything else falls
// back to proto.Unmarshal — per command, or for the whole entry when the
// entry's own framing is unusual — so every input decodes exactly as
// before, on every node.

// decodedCommand is one command of an entry: either a fast-decoded ingest
// (events) or the generic message.
type decodedCommand struct {
	requestID string
	pb        *fsmpb.Command // nil for a fast-decoded ingest
	events    []index.BlockEvent
	// raw is the command's bytes in the log entry (aliasing it; nil when
	// the entry's framing did not allow finding them), for payloadHash.
	raw []byte
	// stats is a stats command's body, converted before apply so that
	// payloadHash and apply share one conversion.
	stats []index.ReplicaStats
	// err: the command decoded but cannot apply (an inconsistent packed
	// ingest, ErrPacked); apply rejects it.
	err error
	// packed: the command is a packed ingest (it needs a format-2 entry).
	packed bool
	// inArena: events is decodeArena.evs[evOff:evEnd] (a fast-decoded
	// ingest), so consecutive such commands can be applied as one run.
	inArena      bool
	evOff, evEnd int
}

// decodeArena holds the slices fast-decoded commands live in. The FSM
// keeps one and reuses it for every entry, because decoded commands never
// outlive their entry's apply (the index copies what it keeps): an ingest
// entry then decodes without allocating, where growing fresh slices per
// command was most of decoding's cost. A nil *decodeArena allocates.
type decodeArena struct {
	cmds   []decodedCommand
	evs    []index.BlockEvent
	spans  []evSpan
	hashes []uint64
	counts []uint32
	cols   packedCols // a packed ingest's columns, one command at a time
}

// reset empties a for the next entry, dropping its string references so
// a reused arena does not keep old ids alive.
func (a *decodeArena) reset() {
	clear(a.cmds)
	clear(a.evs)
	a.cmds, a.evs, a.spans = a.cmds[:0], a.evs[:0], a.spans[:0]
	a.hashes, a.counts = a.hashes[:0], a.counts[:0]
}

// decodeEntryFast returns the entry's format and commands; ok=false means
// "use DecodeEntry" (unusual framing or a command that does not decode).
// The commands live in a (see decodeArena) until its next reset.
func decodeEntryFast(b []byte, a *decodeArena) (format uint32, cmds []decodedCommand, ok bool) {
	if a == nil {
		a = new(decodeArena)
	}
	a.reset()
	var in interner
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, nil, false
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return 0, nil, false
			}
			format = uint32(v)
			b = b[n:]
		case num == 2 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return 0, nil, false
			}
			b = b[n:]
			dc, fast := decodeIngestFast(v, &in, a)
			if !fast {
				var c fsmpb.Command
				if err := proto.Unmarshal(v, &c); err != nil {
					return 0, nil, false
				}
				dc = decodedCommand{requestID: c.RequestId, pb: &c}
			}
			dc.raw = v
			a.cmds = append(a.cmds, dc)
		default:
			return 0, nil, false
		}
	}
	return format, a.cmds, true
}

// decodeIngestFast decodes a Command that is exactly {request_id?, ingest}
// or {request_id?, ingest_packed}.
func decodeIngestFast(b []byte, in *interner, a *decodeArena) (decodedCommand, bool) {
	var dc decodedCommand
	var ingest []byte
	seenID, seenIngest, packed := false, false, false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType {
			return dc, false
		}
		b = b[n:]
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return dc, false
		}
		b = b[n:]
		switch {
		case num == 1 && !seenID:
			if !utf8.Valid(v) {
				return dc, false
			}
			dc.requestID = string(v)
			seenID = true
		case (num == 2 || num == cmdIngestPacked) && !seenIngest:
			ingest = v
			seenIngest = true
			packed = num == cmdIngestPacked
		default:
			return dc, false
		}
	}
	if !seenIngest {
		return dc, false
	}
	off := len(a.evs)
	if packed {
		evs, err, ok := decodePackedFast(ingest, in, a)
		if !ok {
			return dc, false
		}
		dc.events, dc.err, dc.packed = evs, err, true
		dc.inArena, dc.evOff, dc.evEnd = err == nil, off, len(a.evs)
		return dc, true
	}
	evs, ok := decodeEventsFast(ingest, in, a)
	if !ok {
		return dc, false
	}
	dc.events = evs
	dc.inArena, dc.evOff, dc.evEnd = true, off, len(a.evs)
	return dc, true
}

type evSpan struct{ h0, h1, t0, t1 int }

// decodeEventsFast appends the events of an IngestCommand body to a and
// returns them (a slice of a.evs whose block slices alias a.hashes and
// a.counts). On failure a's contents past what earlier commands hold are
// garbage, and the caller falls back to proto.Unmarshal.
func decodeEventsFast(b []byte, in *interner, a *decodeArena) ([]index.BlockEvent, bool) {
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
		var e index.BlockEvent
		sp := evSpan{h0: len(hashes), t0: len(counts)}
		seenPart := false
		for len(v) > 0 {
			num, typ, n := protowire.ConsumeTag(v)
			if n < 0 {
				return nil, false
			}
			v = v[n:]
			switch typ {
			case protowire.VarintType:
				x, n := protowire.ConsumeVarint(v)
				if n < 0 {
					return nil, false
				}
				v = v[n:]
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
					return nil, false
				}
			case protowire.BytesType:
				x, n := protowire.ConsumeBytes(v)
				if n < 0 {
					return nil, false
				}
				v = v[n:]
				switch num {
				case 2:
					s, ok := in.str(0, x)
					if !ok {
						return nil, false
					}
					e.ReplicaID = s
				case 3:
					if seenPart { // a repeated message field merges
						return nil, false
					}
					seenPart = true
					p, ok := decodePartitionFast(x, in)
					if !ok {
						return nil, false
					}
					e.Partition = p
				case 4: // packed
					for len(x) > 0 {
						h, n := protowire.ConsumeVarint(x)
						if n < 0 {
							return nil, false
						}
						hashes = append(hashes, h)
						x = x[n:]
					}
				case 5:
					for len(x) > 0 {
						c, n := protowire.ConsumeVarint(x)
						if n < 0 {
							return nil, false
						}
						counts = append(counts, uint32(c))
						x = x[n:]
					}
				default:
					return nil, false
				}
			default:
				return nil, false
			}
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

func decodePartitionFast(b []byte, in *interner) (index.Partition, bool) {
	var f [4]string
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType || num < 1 || num > 4 {
			return index.Partition{}, false
		}
		b = b[n:]
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return index.Partition{}, false
		}
		b = b[n:]
		s, ok := in.str(int(num), v)
		if !ok {
			return index.Partition{}, false
		}
		f[num-1] = s
	}
	return index.Partition{Scheme: f[0], Model: f[1], Tenant: f[2], Adapter: f[3]}, true
}

// interner reuses the previous string of a field when the bytes repeat
// (replica id and partition strings repeat across an entry's events), and
// validates UTF-8 as proto3 does.
type interner struct{ last [5]string }

func (in *interner) str(slot int, b []byte) (string, bool) {
	if s := in.last[slot]; s == string(b) {
		return s, true
	}
	if !utf8.Valid(b) {
		return "", false
	}
	s := string(b)
	in.last[slot] = s
	return s, true
}

// entryCommandBytes returns the raw bytes of each command (field 2) of an
// entry in order, or nil when the framing does not parse: for the
// generic decoding path, which proto.Unmarshal gives no raw bytes for.
func entryCommandBytes(b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil
		}
		b = b[n:]
		if num == 2 && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil
			}
			out = append(out, v)
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return nil
		}
		b = b[n:]
	}
	return out
}
