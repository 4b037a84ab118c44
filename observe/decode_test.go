package observe

import (
	"bytes"
	"errors"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/vmihailenco/msgpack/v5"

	ot "github.com/inference-cache/inference-cache/observe/observetest"
)

func mp(t testing.TB, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decode(t *testing.T, payload []byte) Batch {
	t.Helper()
	b, err := DecodeBatch(payload)
	if err != nil {
		t.Fatalf("DecodeBatch: %v", err)
	}
	return b
}

var cmpEvent = cmpopts.IgnoreUnexported(Event{})

func TestDecode_PositionalBatchAndEvents(t *testing.T) {
	payload := ot.Batch(1700000000.25, 2,
		ot.Stored(ot.Hashes(11, 12), uint64(10), ot.Tokens(0, 8), 4, 7, "GPU", "sql-lora"),
		ot.Removed(ot.Hashes(11), "CPU"),
		ot.Cleared(),
	)
	got := decode(t, payload)
	want := Batch{TS: 1700000000.25, DPRank: 2, HasDPRank: true, Events: []Event{
		{Kind: EventBlockStored, BlockHashes: []uint64{11, 12}, Parent: 10, HasParent: true, TokenIDs: ot.Tokens(0, 8),
			BlockSize: 4, LoraID: 7, HasLoraID: true, Medium: "GPU", LoraName: "sql-lora"},
		{Kind: EventBlockRemoved, BlockHashes: []uint64{11}, Medium: "CPU", TokenIDs: []uint32{}},
		{Kind: EventAllBlocksCleared, BlockHashes: []uint64{}, TokenIDs: []uint32{}},
	}}
	if d := cmp.Diff(want, got, cmpEvent, cmpopts.EquateEmpty()); d != "" {
		t.Fatalf("decoded batch (-want +got):\n%s", d)
	}
}

func TestDecode_MapBatchAndMapEvents(t *testing.T) {
	// vLLM since mid-2026: maps with default-valued fields omitted, plus an
	// unknown key at both levels.
	payload := mp(t, map[string]any{
		"ts": 12.5, "future_batch_field": []int{1, 2},
		"events": []any{
			map[string]any{"type": "BlockStored", "block_hashes": []uint64{5}, "token_ids": ot.Tokens(0, 4), "block_size": 4, "new_field": map[string]int{"x": 1}},
			map[string]any{"block_hashes": []uint64{5}, "type": "BlockRemoved", "group_idx": 1},
			map[string]any{"type": "AllBlocksCleared"},
		},
	})
	got := decode(t, payload)
	want := Batch{TS: 12.5, Events: []Event{
		{Kind: EventBlockStored, BlockHashes: []uint64{5}, TokenIDs: ot.Tokens(0, 4), BlockSize: 4},
		{Kind: EventBlockRemoved, BlockHashes: []uint64{5}, GroupIdx: 1},
		{Kind: EventAllBlocksCleared},
	}}
	if d := cmp.Diff(want, got, cmpEvent, cmpopts.EquateEmpty()); d != "" {
		t.Fatalf("decoded batch (-want +got):\n%s", d)
	}
}

func TestDecode_MixedForms(t *testing.T) {
	// A map batch holding positional events, and a positional batch holding
	// map events.
	a := decode(t, ot.MapBatch(1, 3, ot.Cleared()))
	if a.DPRank != 3 || !a.HasDPRank || len(a.Events) != 1 || a.Events[0].Kind != EventAllBlocksCleared {
		t.Fatalf("map batch with positional event: %+v", a)
	}
	b := decode(t, ot.Batch(1, -1, map[string]any{"type": "BlockRemoved", "block_hashes": []uint64{9}}))
	if b.HasDPRank || len(b.Events) != 1 || b.Events[0].Kind != EventBlockRemoved || b.Events[0].BlockHashes[0] != 9 {
		t.Fatalf("positional batch with map event: %+v", b)
	}
}

func TestDecode_HashRepresentations(t *testing.T) {
	big := uint64(1)<<63 + 5 // above 2^63: must survive as uint64
	raw := []byte{0xAA, 0xBB, 1, 2, 3, 4, 5, 6, 7, 8}
	payload := mp(t, []any{0.0, []any{
		[]any{"BlockRemoved", []any{big, int64(-2), raw, []byte{1, 2}, uint64(0)}},
	}})
	got := decode(t, payload).Events[0].BlockHashes
	want := []uint64{
		big,
		0xFFFFFFFFFFFFFFFE, // int64 −2, two's complement
		0x0102030405060708, // last 8 bytes, big-endian
		0x0102,             // short bytes: left-padded
		0,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("hashes (-want +got):\n%s", d)
	}
	// Parent hashes take the same three forms.
	for _, tc := range []struct {
		parent any
		want   uint64
	}{{big, big}, {int64(math.MinInt64), 1 << 63}, {bytes.Repeat([]byte{0xFF}, 32), math.MaxUint64}} {
		e := decode(t, ot.Batch(0, -1, ot.Stored(ot.Hashes(1), tc.parent, ot.Tokens(0, 4), 4, nil, nil, nil))).Events[0]
		if !e.HasParent || e.Parent != tc.want {
			t.Errorf("parent %v: got %#x (has=%v), want %#x", tc.parent, e.Parent, e.HasParent, tc.want)
		}
	}
}

func TestDecode_OptionalTrailingFields(t *testing.T) {
	// Oldest form: no lora_id, medium or lora_name; no rank.
	old := decode(t, mp(t, []any{1.0, []any{[]any{"BlockStored", []uint64{1}, nil, ot.Tokens(0, 4), 4}}}))
	e := old.Events[0]
	if old.HasDPRank || e.HasParent || e.HasLoraID || e.Medium != "" || e.LoraName != "" || e.GroupIdx != 0 || e.BlockSize != 4 {
		t.Fatalf("absent trailing fields must take defaults: %+v", e)
	}
	// Newest form: every trailing field, extra_keys and spec kind included,
	// plus one more unknown trailing element.
	full := decode(t, ot.Batch(1, 0, ot.Stored(ot.Hashes(1), nil, ot.Tokens(0, 4), 4, nil, "GPU", nil,
		[]any{[]any{"mm-hash", 3}}, 2, "full_attention", nil, "future")))
	if e := full.Events[0]; e.GroupIdx != 2 || e.Medium != "GPU" || e.HasLoraID {
		t.Fatalf("full trailing fields: %+v", e)
	}
	if !full.HasDPRank || full.DPRank != 0 {
		t.Fatalf("explicit rank 0: %+v", full)
	}
	// BlockRemoved with group_idx, and a nil rank.
	r := decode(t, mp(t, []any{1.0, []any{ot.Removed(ot.Hashes(3), nil, 1)}, nil}))
	if r.HasDPRank || r.Events[0].GroupIdx != 1 {
		t.Fatalf("removed with group_idx: %+v", r)
	}
}

func TestDecode_UnknownEventTagIsSkippedNotAnError(t *testing.T) {
	b := decode(t, ot.Batch(1, -1, []any{"BlockUpdated", 1, 2}, map[string]any{"type": "Other"}))
	if b.Events[0].Kind != EventUnknown || b.Events[0].Tag != "BlockUpdated" || b.Events[1].Tag != "Other" {
		t.Fatalf("unknown tags: %+v", b.Events)
	}
}

func TestDecode_GarbageIsAnErrorNotAPanic(t *testing.T) {
	cases := map[string][]byte{
		"empty":               nil,
		"not msgpack":         []byte("hello world"),
		"scalar batch":        mp(t, 42),
		"short batch":         mp(t, []any{1.0}),
		"ts is a string":      mp(t, []any{"x", []any{}}),
		"events is a map":     mp(t, []any{1.0, map[string]int{"a": 1}}),
		"event is a number":   mp(t, []any{1.0, []any{7}}),
		"empty event":         mp(t, []any{1.0, []any{[]any{}}}),
		"tag is a number":     mp(t, []any{1.0, []any{[]any{5, 1}}}),
		"hash is a float":     mp(t, []any{1.0, []any{[]any{"BlockRemoved", []any{1.5}}}}),
		"token negative":      mp(t, []any{1.0, []any{[]any{"BlockStored", []uint64{1}, nil, []int{-1}, 1}}}),
		"token over uint32":   mp(t, []any{1.0, []any{[]any{"BlockStored", []uint64{1}, nil, []int64{1 << 33}, 1}}}),
		"map event no type":   mp(t, []any{1.0, []any{map[string]any{"block_hashes": []int{1}}}}),
		"map batch no events": mp(t, map[string]any{"ts": 1.0}),
		"negative rank":       mp(t, []any{1.0, []any{}, -1}),
		"trailing bytes":      append(mp(t, []any{1.0, []any{}}), 0xc0),
		"truncated":           mp(t, []any{1.0, []any{ot.Stored(ot.Hashes(1, 2), nil, ot.Tokens(0, 8), 4, nil, nil, nil)}})[:20],
		"huge array header":   {0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0xdd, 0xff, 0xff, 0xff, 0xff},
	}
	for name, payload := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeBatch(payload)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
		})
	}
}

func TestDecode_ReusedDecoderDoesNotLeakPreviousBatch(t *testing.T) {
	d := NewDecoder()
	if _, err := d.Decode(ot.Batch(1, 1, ot.Stored(ot.Hashes(1, 2), nil, ot.Tokens(0, 8), 4, nil, nil, nil))); err != nil {
		t.Fatal(err)
	}
	b, err := d.Decode(ot.Batch(2, -1, ot.Removed(ot.Hashes(9), nil)))
	if err != nil {
		t.Fatal(err)
	}
	if b.HasDPRank || len(b.Events) != 1 || !cmp.Equal(b.Events[0].BlockHashes, []uint64{9}) || len(b.Events[0].TokenIDs) != 0 {
		t.Fatalf("second batch: %+v", b)
	}
}

func FuzzDecodeBatch(f *testing.F) {
	f.Add(ot.Batch(1.5, 1, ot.Stored(ot.Hashes(1, 2), uint64(1)<<63, ot.Tokens(0, 8), 4, 3, "GPU", "a"), ot.Removed(ot.Hashes(1), nil, 0), ot.Cleared()))
	f.Add(ot.MapBatch(2, -1, map[string]any{"type": "BlockStored", "block_hashes": [][]byte{{1, 2, 3}}, "token_ids": []int{1}, "block_size": 1}))
	f.Add([]byte{0x93, 0xcb})
	d := NewDecoder()
	f.Fuzz(func(t *testing.T, payload []byte) {
		b, err := d.Decode(payload)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		for _, e := range b.Events {
			_ = len(e.BlockHashes) + len(e.TokenIDs)
		}
	})
}
