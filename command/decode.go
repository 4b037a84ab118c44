package command

import (
	"errors"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/inference-cache/inference-cache/command/fsmpb"
	"github.com/inference-cache/inference-cache/index"
)

// Decoding of log entries. Ingest commands are by far the most frequent
// and the largest; decoding them through the generated protobuf code
// allocates a message per event and per partition and then converts them
// (about a quarter of apply's CPU). The fast path reads the wire format
// directly into []index.BlockEvent. It accepts only the canonical shape
// of what this package writes (known fields, each singular field at most
// once where merging would matter, valid UTF-8); anything else falls back
// to proto.Unmarshal — per command, or for the whole entry when the
// entry's own framing is unusual — so every input decodes exactly as the
// generated code decodes it, on every node.

// ErrUnknownBody marks a command whose body its entry's format does not
// allow: a packed ingest in a format-1 entry, which only a faulty writer
// makes. Apply rejects it as a binary that predates the packed body
// rejects an unknown body, so both record the same.
var ErrUnknownBody = errors.New("command body not allowed in its entry's format")

// Decoded is one command of a decoded entry, prepared for apply: an ingest
// carries its events, a stats command its converted stats, every other
// command its generated message.
type Decoded struct {
	// RequestID is the command's de-duplication id ("" = none).
	RequestID string
	// Msg is the generated message of a command that is not an ingest;
	// nil for an ingest (whose events are in Events).
	Msg *fsmpb.Command
	// Events are an ingest command's events. A fast-decoded ingest's
	// alias the Decoder's arena and are valid until its next Decode.
	Events []index.BlockEvent
	// Stats is a stats command's body, converted once for PayloadHash and
	// apply alike.
	Stats []index.ReplicaStats
	// Raw is the command's bytes in the log entry (aliasing it; nil when
	// the entry's framing did not allow finding them), for PayloadHash.
	Raw []byte
	// Err is set when the command decoded but cannot apply: ErrPacked (an
	// inconsistent packed ingest) or ErrUnknownBody.
	Err error
	// packed: the command is a packed ingest (it needs a format-2 entry).
	packed bool
	// inArena: Events is the arena's evs[evOff:evEnd] (a fast-decoded
	// ingest), so consecutive such commands can be applied as one run.
	inArena      bool
	evOff, evEnd int
}

// ArenaSpan says where a fast-decoded ingest's events lie among the
// Decoder's events (Decoder.Events): consecutive commands whose spans
// touch can be handed to the index as one batch. ok is false for any
// other command.
func (d *Decoded) ArenaSpan() (off, end int, ok bool) {
	return d.evOff, d.evEnd, d.inArena && d.Err == nil
}

// Decoder decodes log entries into slices it reuses for every entry:
// decoded commands never outlive their entry's apply (the index copies
// what it keeps), so an ingest entry then decodes without allocating,
// where growing fresh slices per command was most of decoding's cost. A
// Decoder is not safe for concurrent use; the zero value is ready.
type Decoder struct {
	cmds   []Decoded
	evs    []index.BlockEvent
	spans  []evSpan
	hashes []uint64
	counts []uint32
	cols   packedCols // a packed ingest's columns, one command at a time
}

// reset empties a for the next entry, dropping its string references so
// a reused arena does not keep old ids alive.
func (a *Decoder) reset() {
	clear(a.cmds)
	clear(a.evs)
	a.cmds, a.evs, a.spans = a.cmds[:0], a.evs[:0], a.spans[:0]
	a.hashes, a.counts = a.hashes[:0], a.counts[:0]
}

// Events returns the decoded events from off to end (see
// Decoded.ArenaSpan), valid until the next Decode.
func (a *Decoder) Events(off, end int) []index.BlockEvent { return a.evs[off:end] }

// Decode decodes a log entry (its body: VerifyEntry strips the checksum)
// into its format and prepared commands. The commands live in the
// Decoder until its next Decode. An error wraps ErrDecode; whether the
// format is one this binary applies is the caller's to check
// (EntryFormat).
func (a *Decoder) Decode(b []byte) (format uint32, cmds []Decoded, err error) {
	format, cmds, ok := a.decodeFast(b)
	if !ok {
		e, err := DecodeEntry(b)
		if err != nil {
			return 0, nil, err
		}
		format = e.Format
		raws := entryCommandBytes(b)
		if len(raws) != len(e.Commands) {
			raws = nil // no payload check for this entry's commands
		}
		cmds = make([]Decoded, len(e.Commands))
		for i, c := range e.Commands {
			cmds[i] = Decoded{RequestID: c.GetRequestId(), Msg: c}
			if raws != nil {
				cmds[i].Raw = raws[i]
			}
		}
	}
	for i := range cmds {
		prepare(&cmds[i])
		if format < EntryFormat && cmds[i].packed {
			cmds[i].Err = ErrUnknownBody
		}
	}
	return format, cmds, nil
}

// prepare converts a generic ingest command into events and a stats
// command into index stats, once, for both PayloadHash and apply.
func prepare(dc *Decoded) {
	if dc.Msg == nil {
		return
	}
	switch b := dc.Msg.Body.(type) {
	case *fsmpb.Command_Ingest:
		dc.Events, _ = decodeLegacyIngest(nil, b.Ingest, nil, nil)
		dc.Msg = nil
	case *fsmpb.Command_IngestPacked:
		dc.Events, dc.Err = expandPacked(packedColsFromPB(b.IngestPacked), new(Decoder))
		dc.Msg, dc.packed = nil, true
	case *fsmpb.Command_Stats:
		dc.Stats = make([]index.ReplicaStats, len(b.Stats.GetStats()))
		for i, s := range b.Stats.GetStats() {
			dc.Stats[i] = fsmpb.StatsFromPB(s)
		}
	}
}

// decodeFast is the fast path of Decode; ok=false means "use
// DecodeEntry" (unusual framing or a command that does not decode).
func (a *Decoder) decodeFast(b []byte) (format uint32, cmds []Decoded, ok bool) {
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
				dc = Decoded{RequestID: c.RequestId, Msg: &c}
			}
			dc.Raw = v
			a.cmds = append(a.cmds, dc)
		default:
			return 0, nil, false
		}
	}
	return format, a.cmds, true
}

// decodeIngestFast decodes a Command that is exactly {request_id?,
// ingest_packed} or, from a format-1 entry, {request_id?, ingest}.
func decodeIngestFast(b []byte, in *interner, a *Decoder) (Decoded, bool) {
	var dc Decoded
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
			dc.RequestID = string(v)
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
		dc.Events, dc.Err, dc.packed = evs, err, true
		dc.inArena, dc.evOff, dc.evEnd = err == nil, off, len(a.evs)
		return dc, true
	}
	evs, ok := decodeLegacyIngest(ingest, nil, in, a)
	if !ok {
		return dc, false
	}
	dc.Events = evs
	dc.inArena, dc.evOff, dc.evEnd = true, off, len(a.evs)
	return dc, true
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
