package command

import (
	"fmt"
	"reflect"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/inference-cache/inference-cache/command/fsmpb"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/policy"
)

// slowDecode is the reference: the generated protobuf decoder.
func slowDecode(t *testing.T, b []byte) (uint32, []Decoded, error) {
	t.Helper()
	e, err := DecodeEntry(b)
	if err != nil {
		return 0, nil, err
	}
	out := make([]Decoded, len(e.Commands))
	for i, c := range e.Commands {
		out[i] = Decoded{RequestID: c.RequestId, Msg: c}
		switch b := c.Body.(type) {
		case *fsmpb.Command_Ingest:
			out[i] = Decoded{RequestID: c.RequestId, Events: fsmpb.EventsFromPB(b.Ingest.GetEvents())}
		case *fsmpb.Command_IngestPacked:
			evs, err := expandPacked(packedColsFromPB(b.IngestPacked), new(Decoder))
			if err != nil {
				t.Fatal(err)
			}
			out[i] = Decoded{RequestID: c.RequestId, Events: evs}
		}
	}
	return e.Format, out, nil
}

// fastDecode is the fast path alone.
func fastDecode(b []byte, a *Decoder) (uint32, []Decoded, bool) {
	if a == nil {
		a = new(Decoder)
	}
	return a.decodeFast(b)
}

func normEvents(evs []index.BlockEvent) []index.BlockEvent {
	if len(evs) == 0 {
		return nil
	}
	out := make([]index.BlockEvent, len(evs))
	for i, e := range evs {
		if len(e.BlockHashes) == 0 {
			e.BlockHashes = nil
		}
		if len(e.BlockTokenCounts) == 0 {
			e.BlockTokenCounts = nil
		}
		out[i] = e
	}
	return out
}

// TestDecodeEntryFast_MatchesProto: the fast ingest decoder gives exactly
// what the generated decoder gives, for canonical entries and for unusual
// encodings (unpacked repeated fields, repeated scalars, unknown fields,
// bad UTF-8, truncation), falling back where it must.
func TestDecodeEntryFast_MatchesProto(t *testing.T) {
	p := index.Partition{Scheme: "xxh3-64", Model: "m", Tenant: "t", Adapter: "a"}
	evs := []index.BlockEvent{
		{Kind: index.Stored, ReplicaID: "r1", Partition: p, BlockHashes: []uint64{1, 1 << 63, 3}, BlockTokenCounts: []uint32{16, 16, 7}, PrefixTokensBefore: 5, ObservedAtMs: 1700000000000},
		{Kind: index.Removed, ReplicaID: "r2", Partition: p, BlockHashes: []uint64{9}, BlockTokenCounts: []uint32{16}, ObservedAtMs: -1},
		{Kind: index.Cleared, ReplicaID: "r1", Partition: index.Partition{Scheme: "s", Model: "m2"}},
		{},
	}
	var entries [][]byte
	good, _ := EncodeEntry(IngestCommand("a", evs), ExpireCommand("b", 7), IngestCommand("", nil),
		SetPolicyCommand("c", policy.Default()), IngestCommand("d", evs[:1]))
	legacy := legacyEntry(t, legacyIngestCommand("a", evs), ExpireCommand("b", 7), legacyIngestCommand("", nil),
		SetPolicyCommand("c", policy.Default()), legacyIngestCommand("d", evs[:1]))
	entries = append(entries, good, legacy)

	// hand-made unusual encodings of one event inside one command
	ev := func(fields ...[]byte) []byte {
		var b []byte
		for _, f := range fields {
			b = append(b, f...)
		}
		return b
	}
	varint := func(n protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(protowire.AppendTag(nil, n, protowire.VarintType), v)
	}
	bytesF := func(n protowire.Number, v []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, n, protowire.BytesType), v)
	}
	wrap := func(reqID string, event []byte) []byte {
		ing := bytesF(1, event)
		cmd := append(bytesF(1, []byte(reqID)), bytesF(2, ing)...)
		return append(newEntryFormat(nil, 1), bytesF(2, cmd)...)
	}
	part := bytesF(3, append(bytesF(1, []byte("s")), bytesF(2, []byte("m"))...))
	entries = append(entries,
		wrap("u1", ev(varint(1, 1), bytesF(2, []byte("r")), part, varint(4, 5), varint(4, 6), varint(5, 16), varint(5, 16))), // unpacked
		wrap("u2", ev(varint(1, 1), varint(1, 2), varint(7, 3), varint(7, 4), part)),                                         // repeated scalars: last wins
		wrap("u3", ev(varint(1, 1<<40), part, varint(6, 1<<33))),                                                             // uint32 truncation
		wrap("u4", ev(part, part)),                          // partition twice: merge
		wrap("u5", ev(part, varint(99, 1))),                 // unknown field
		wrap("u6", ev(bytesF(2, []byte{0xff, 0xfe}), part)), // bad UTF-8: error
		wrap("\xff", ev(part)),                              // bad UTF-8 request id
		append(wrap("u7", ev(part)), varint(1, 9)...),       // format repeated: last wins
		append(wrap("u8", ev(part)), varint(3, 1)...),       // unknown entry field
		wrap("u9", ev(part))[:len(wrap("u9", ev(part)))-2],  // truncated
	)
	for i, b := range entries {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			wf, wc, werr := slowDecode(t, b)
			gf, gc, ok := fastDecode(b, nil)
			if i <= 1 && (!ok || gc[0].Msg != nil || gc[1].Msg == nil || gc[4].Msg != nil) {
				t.Fatalf("canonical entry did not take the fast path (ok=%v)", ok)
			}
			if !ok {
				return // Decode falls back to DecodeEntry: identical by construction
			}
			if werr != nil {
				t.Fatalf("fast path accepted an entry proto refuses: %v", werr)
			}
			if gf != wf || len(gc) != len(wc) {
				t.Fatalf("format/commands: fast %d/%d, proto %d/%d", gf, len(gc), wf, len(wc))
			}
			for j := range gc {
				if gc[j].RequestID != wc[j].RequestID {
					t.Fatalf("cmd %d request id %q vs %q", j, gc[j].RequestID, wc[j].RequestID)
				}
				if (gc[j].Msg == nil) != (wc[j].Msg == nil) {
					// fast path fell back to proto for an ingest: compare events
					if gc[j].Msg != nil {
						prepare(&gc[j])
					} else {
						t.Fatalf("cmd %d: fast path decoded a non-ingest as ingest", j)
					}
				}
				if !reflect.DeepEqual(normEvents(gc[j].Events), normEvents(wc[j].Events)) {
					t.Fatalf("cmd %d events differ:\nfast  %+v\nproto %+v", j, gc[j].Events, wc[j].Events)
				}
			}
		})
	} // The FSM reuses one arena for every entry: each entry must decode
	// exactly as with a fresh arena, whatever was decoded (or half
	// decoded, for the entries that fall back) before it.
	t.Run("reused-arena", func(t *testing.T) {
		var a Decoder
		for round := 0; round < 2; round++ {
			for i, b := range entries {
				wf, wc, wok := fastDecode(b, nil)
				gf, gc, gok := fastDecode(b, &a)
				if wok != gok || wf != gf || len(wc) != len(gc) {
					t.Fatalf("entry %d: reused arena ok/format/commands %v/%d/%d, fresh %v/%d/%d", i, gok, gf, len(gc), wok, wf, len(wc))
				}
				for j := range wc {
					if gc[j].RequestID != wc[j].RequestID || (gc[j].Msg == nil) != (wc[j].Msg == nil) ||
						!reflect.DeepEqual(gc[j].Events, wc[j].Events) || !reflect.DeepEqual(gc[j].Raw, wc[j].Raw) {
						t.Fatalf("entry %d cmd %d: reused arena decoded %+v, fresh %+v", i, j, gc[j], wc[j])
					}
				}
			}
		}
	})
}
