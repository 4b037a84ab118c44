package observe

import (
	"bytes"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/vmihailenco/msgpack/v5"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/fingerprint"
	ot "github.com/inference-cache/inference-cache/observe/observetest"
)

// Publisher wire fixtures. Each is built as the named publisher encodes it
// with msgspec's msgpack encoder: a Struct without array_like is a map whose
// keys follow the field declaration order (a tagged Struct starts with
// "type"), omit_defaults drops fields equal to their default (fields
// without a default are always written, None as nil), array_like Structs are
// positional arrays; ints are written in their smallest form.
//
// Sources:
//   - vllmUntyped: vllm-project/vllm vllm/distributed/kv_events.py at
//     0181ea31 (EventBatch and KVCacheEvent maps, omit_defaults; BlockStored
//     … lora_name, extra_keys, group_idx, kv_cache_spec_kind,
//     kv_cache_spec_sliding_window) with extra_keys as
//     vllm/v1/core/kv_cache_utils.py at 001cabc1 builds them:
//     generate_block_hash_extra_keys = LoRA name + (mm identifier, offset)
//     pairs + cache_salt (first block only) + prompt-embeds sha256 bytes.
//   - vllmTyped: vllm/distributed/kv_events.py of the vLLM tree with
//     event_version 1 (EventBatch array_like [ts, events, rank]; typed
//     ExtraKey maps tagged "lora" {name}, "cache_salt" {salt}, "mm"
//     {modality, hash, block_offset}, "prompt_embeds" {hash}, "legacy"
//     {value}; BlockStored/BlockRemoved locality "LOCAL"|"REMOTE" and
//     ownership; MEDIUM_GPU/CPU/STORAGE), its KVCacheSpecKind values from
//     vllm/v1/kv_cache_interface.py.
//   - sglang: sgl-project/sglang python/sglang/srt/mem_cache/radix_cache.py
//     at 006b0e3d (_record_store_event: one BlockStored per page,
//     block_hashes=[hash_str_to_int64(sha256 chain)], block_size =
//     len(page_tokens), lora_id None, medium "GPU"; _record_remove_event:
//     one BlockRemoved per page) and python/sglang/srt/disaggregation/
//     kv_events.py of the release with BlockStoredWithMetadata (EventBatch
//     and KVCacheEvent array_like without omit_defaults: [ts, events,
//     attn_dp_rank], ["BlockStored", block_hashes, parent_block_hash,
//     token_ids, block_size, lora_id, medium, metadata?] with metadata
//     BlockStoredMetadata {"cache_salt"}; StorageMedium GPU, CPU_PINNED,
//     DISK, EXTERNAL).

// kv is a msgpack map written in the given key order (alternating keys and
// values), as msgspec writes a Struct.
type kv []any

// EncodeMsgpack implements msgpack.CustomEncoder.
func (m kv) EncodeMsgpack(enc *msgpack.Encoder) error {
	if err := enc.EncodeMapLen(len(m) / 2); err != nil {
		return err
	}
	for i := 0; i+1 < len(m); i += 2 {
		if err := enc.Encode(m[i]); err != nil {
			return err
		}
		if err := enc.Encode(m[i+1]); err != nil {
			return err
		}
	}
	return nil
}

// pyenc encodes v with compact ints, as msgspec does.
func pyenc(t testing.TB, v any) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := msgpack.NewEncoder(&b)
	enc.UseCompactInts(true)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// vllmBatch is vllmUntyped's EventBatch map (data_parallel_rank always
// set by ZmqEventPublisher.publish).
func vllmBatch(t testing.TB, events ...any) []byte {
	return pyenc(t, kv{"ts", tTS, "events", events, "data_parallel_rank", 0})
}

// vllmTypedBatch is vllmTyped's positional EventBatch.
func vllmTypedBatch(t testing.TB, events ...any) []byte {
	return pyenc(t, []any{tTS, events, 0})
}

// vllmStored is a BlockStored map; extra are the trailing fields with
// defaults, in declaration order, given only when not at their default.
func vllmStored(hashes []uint64, parent any, tokens []uint32, loraID, medium, loraName any, extra ...any) kv {
	m := kv{"type", "BlockStored", "block_hashes", hashes, "parent_block_hash", parent, "token_ids", tokens, "block_size", 4,
		"lora_id", loraID, "medium", medium, "lora_name", loraName}
	return append(m, extra...)
}

// vllmRemoved is a BlockRemoved map.
func vllmRemoved(hashes []uint64, medium any, extra ...any) kv {
	return append(kv{"type", "BlockRemoved", "block_hashes", hashes, "medium", medium}, extra...)
}

// sglangStored is radix_cache.py's one-page BlockStored, positional;
// metadata (BlockStoredWithMetadata) is appended when non-nil.
func sglangStored(hash int64, parent any, page []uint32, metadata any) []any {
	ev := []any{"BlockStored", []int64{hash}, parent, page, len(page), nil, "GPU"}
	if metadata != nil {
		ev = append(ev, metadata)
	}
	return ev
}

// sglangBatch is SGLang's positional EventBatch with attn_dp_rank.
func sglangBatch(t testing.TB, rank int, events ...any) []byte {
	return pyenc(t, []any{tTS, events, rank})
}

// feed starts h (its first batch clears) and returns what each later
// payload emits.
func feed(h *harness, payloads ...[]byte) [][]*pb.BlockEvent {
	h.liveNoReplay(0, ot.Batch(tTS, -1))
	out := make([][]*pb.BlockEvent, len(payloads))
	for i, p := range payloads {
		out[i] = h.liveNoReplay(int64(i+1), p)
	}
	return out
}

func saltedFPs(t *testing.T, prompt []uint32, salt string) []uint64 {
	t.Helper()
	hs, err := fingerprint.AppendSaltedBlockHashes(nil, prompt, 4, salt)
	if err != nil {
		t.Fatal(err)
	}
	return hs
}

// Blocks whose hash mixes in multimodal content (or prompt embeddings) are
// never indexed on their token ids, nor are blocks chained after them; the
// blocks before them are. Their removals emit nothing.
func TestFixture_VLLMMultimodalBlocksAreNotIndexed(t *testing.T) {
	p := ot.Tokens(10, 16)
	for _, tc := range []struct {
		name   string
		extra  []any // extra_keys of the 3-block store
		encode func(testing.TB, ...any) []byte
	}{
		{"untyped (identifier, offset) pair", []any{nil, []any{[]any{"img-sha", 2}}, nil}, vllmBatch},
		{"untyped prompt-embeds bytes", []any{nil, []any{[]byte{0xab, 0xcd}}, nil}, vllmBatch},
		{"typed mm key", []any{nil, []any{kv{"type", "mm", "modality", "image", "hash", "img-sha", "block_offset", 2}}, nil}, vllmTypedBatch},
		{"typed legacy key", []any{nil, []any{kv{"type", "legacy", "value", []any{"future", "key"}}}, nil}, vllmTypedBatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, false)
			out := feed(h,
				tc.encode(t, vllmStored([]uint64{1, 2, 3}, nil, p[:12], nil, "GPU", nil, "extra_keys", tc.extra)),
				tc.encode(t, vllmStored([]uint64{4}, uint64(3), p[12:], nil, "GPU", nil)),
				tc.encode(t, vllmRemoved([]uint64{2, 4}, "GPU")),
				tc.encode(t, vllmRemoved([]uint64{1}, "GPU")))
			wantEvents(t, out[0], stored(tReplica, "", fps(t, p, 0)[:1], 0))
			wantEvents(t, out[1])
			wantEvents(t, out[2])
			wantEvents(t, out[3], removed(tReplica, "", fps(t, p, 0)[0]))
			if got := testutil.ToFloat64(h.m.NotIndexedContent.WithLabelValues(tReplica)); got != 3 {
				t.Fatalf("not indexed = %v, want 3 (blocks 2, 3 and the child 4)", got)
			}
			if got := testutil.ToFloat64(h.m.UnknownParent.WithLabelValues(tReplica)); got != 0 {
				t.Fatalf("unknown parent = %v: a child of an unindexed block is not a lost parent", got)
			}
		})
	}
}

// cache_salt (on a request's first block) is the root of the chain's hash
// domain; a child chains from the salted parent; the LoRA name is read
// from extra_keys when the event carries none.
func TestFixture_VLLMCacheSaltAndLoraFromExtraKeys(t *testing.T) {
	p := ot.Tokens(40, 8)
	for _, tc := range []struct {
		name       string
		encode     func(testing.TB, ...any) []byte
		first      kv
		adapter    string
		wantSalted bool
	}{
		{"untyped salt", vllmBatch, vllmStored([]uint64{1}, nil, p[:4], nil, "GPU", nil, "extra_keys", []any{[]any{"salt-a"}}), "", true},
		{"untyped lora and salt", vllmBatch, vllmStored([]uint64{1}, nil, p[:4], 1, "GPU", "sql", "extra_keys", []any{[]any{"sql", "salt-a"}}), "sql", true},
		{"untyped lora name without lora_name field", vllmBatch, vllmStored([]uint64{1}, nil, p[:4], 3, "GPU", nil, "extra_keys", []any{[]any{"sql"}}), "sql", false},
		{"typed salt", vllmTypedBatch, vllmStored([]uint64{1}, nil, p[:4], nil, "GPU", nil, "extra_keys", []any{[]any{kv{"type", "cache_salt", "salt", "salt-a"}}}), "", true},
		{"typed lora and salt", vllmTypedBatch, vllmStored([]uint64{1}, nil, p[:4], nil, "GPU", nil, "extra_keys",
			[]any{[]any{kv{"type", "lora", "name", "sql"}, kv{"type", "cache_salt", "salt", "salt-a"}}}), "sql", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, false)
			out := feed(h, tc.encode(t, tc.first), tc.encode(t, vllmStored([]uint64{2}, uint64(1), p[4:], nil, "GPU", nil)))
			want := fps(t, p, 0)
			if tc.wantSalted {
				want = saltedFPs(t, p, "salt-a")
				if want[0] == fps(t, p, 0)[0] {
					t.Fatal("salted and unsalted keys coincide")
				}
			}
			wantEvents(t, out[0], stored(tReplica, tc.adapter, want[:1], 0))
			// The child names no adapter itself; it is in its own event's
			// partition (the event's lora fields), chained from the salted
			// parent's fingerprint.
			wantEvents(t, out[1], stored(tReplica, "", want[1:], 4))
		})
	}
}

// Hybrid models: only the first full-attention group is indexed; a
// sliding-window group's stores and removals of the same hashes are
// ignored, and removals are matched by group_idx.
func TestFixture_VLLMHybridGroups(t *testing.T) {
	p := ot.Tokens(0, 4)
	h := newHarness(t, false)
	out := feed(h,
		vllmBatch(t, vllmStored([]uint64{1}, nil, p, nil, "GPU", nil, "group_idx", 0, "kv_cache_spec_kind", "sliding_window", "kv_cache_spec_sliding_window", 128),
			vllmStored([]uint64{1}, nil, p, nil, "GPU", nil, "group_idx", 1, "kv_cache_spec_kind", "full_attention"),
			vllmStored([]uint64{1}, nil, p, nil, "GPU", nil, "group_idx", 2, "kv_cache_spec_kind", "mamba")),
		vllmBatch(t, vllmRemoved([]uint64{1}, "GPU", "group_idx", 0)),
		vllmBatch(t, vllmRemoved([]uint64{1}, "GPU", "group_idx", 1)))
	wantEvents(t, out[0], stored(tReplica, "", fps(t, p, 0), 0))
	wantEvents(t, out[1])
	wantEvents(t, out[2], removed(tReplica, "", fps(t, p, 0)...))
	if got := testutil.ToFloat64(h.m.IgnoredGroup.WithLabelValues(tReplica)); got != 3 {
		t.Fatalf("ignored group = %v, want 3", got)
	}
}

// REMOTE blocks are not this replica's residency; LOCAL and unspecified
// ones are, and a REMOTE removal never removes a local block.
func TestFixture_VLLMLocality(t *testing.T) {
	p := ot.Tokens(0, 4)
	h := newHarness(t, false)
	out := feed(h,
		vllmTypedBatch(t, vllmStored([]uint64{1}, nil, p, nil, "GPU", nil, "locality", "REMOTE")),
		vllmTypedBatch(t, vllmStored([]uint64{2}, nil, p, nil, "GPU", nil, "locality", "LOCAL")),
		vllmTypedBatch(t, vllmRemoved([]uint64{2}, "GPU", "locality", "REMOTE")),
		vllmTypedBatch(t, vllmRemoved([]uint64{2}, "GPU", "locality", "LOCAL")))
	wantEvents(t, out[0])
	wantEvents(t, out[1], stored(tReplica, "", fps(t, p, 0), 0))
	wantEvents(t, out[2])
	wantEvents(t, out[3], removed(tReplica, "", fps(t, p, 0)...))
	if got := testutil.ToFloat64(h.m.IgnoredLocality.WithLabelValues(tReplica)); got != 2 {
		t.Fatalf("ignored locality = %v, want 2", got)
	}
}

// Every medium engines publish: GPU (and nil) indexed by default, the
// others only when configured; an unknown one is dropped with a WARN.
func TestFixture_Media(t *testing.T) {
	p := ot.Tokens(0, 4)
	for _, tc := range []struct {
		medium  any
		media   []string
		indexed bool
		warn    bool
	}{
		{"GPU", nil, true, false},
		{nil, nil, true, false},
		{"CPU", nil, false, false},
		{"STORAGE", nil, false, false},
		{"CPU_PINNED", nil, false, false},
		{"DISK", nil, false, false},
		{"EXTERNAL", nil, false, false},
		{"CPU", []string{"GPU", "CPU"}, true, false},
		{"STORAGE", []string{"storage"}, true, false},
		{"LMCACHE", nil, false, true},
		{"LMCACHE", []string{"LMCACHE"}, true, false},
	} {
		name, _ := tc.medium.(string)
		t.Run(name+"/"+strings.Join(tc.media, ","), func(t *testing.T) {
			var logs bytes.Buffer
			h := newHarnessLog(t, &logs, func(e *EngineConfig) { e.Media = tc.media })
			out := feed(h, vllmBatch(t, vllmStored([]uint64{1}, nil, p, nil, tc.medium, nil)))
			if tc.indexed {
				wantEvents(t, out[0], stored(tReplica, "", fps(t, p, 0), 0))
			} else {
				wantEvents(t, out[0])
			}
			if warned := strings.Contains(logs.String(), "level=WARN"); warned != tc.warn {
				t.Fatalf("warned %v, want %v: %s", warned, tc.warn, logs.String())
			}
		})
	}
}

// SGLang with its default 1-token pages indexed with 4-token blocks: the
// pages are concatenated along the chain, the batch's attn_dp_rank names
// the replica, and removing any page of a block removes the block.
func TestFixture_SGLangPagesReblocked(t *testing.T) {
	h := newHarness(t, false, func(e *EngineConfig) { e.HashScheme = "sglang"; e.PageSize = 1 })
	p := ot.Tokens(200, 9) // 9 pages: 2 blocks and a tail page
	var evs []any
	var parent any
	for i, tok := range p {
		h := int64(-5000 - i) // hash_str_to_int64 gives signed 64-bit values
		evs = append(evs, sglangStored(h, parent, []uint32{tok}, nil))
		parent = h
	}
	out := feed(h, sglangBatch(t, 2, evs...),
		sglangBatch(t, 2, []any{"BlockRemoved", []int64{-5008}, "GPU"}), // the tail page: no block
		sglangBatch(t, 2, []any{"BlockRemoved", []int64{-5006}, "GPU"}), // page 6 of block 1
		sglangBatch(t, 2, []any{"BlockRemoved", []int64{-5007, -5005, -5004}, "GPU"}),
		sglangBatch(t, 2, []any{"BlockRemoved", []int64{-5001}, "GPU"})) // page 1 of block 0
	rep := tReplica + "-dp2"
	all := fps(t, p, 0)
	s0, s1 := sglangEv(stored(rep, "", all[:1], 0)), sglangEv(stored(rep, "", all[1:2], 4))
	wantEvents(t, out[0], s0, s1)
	wantEvents(t, out[1])
	wantEvents(t, out[2], sglangEv(removed(rep, "", all[1])))
	wantEvents(t, out[3])
	wantEvents(t, out[4], sglangEv(removed(rep, "", all[0])))
}

// SGLang's map-form batch key attn_dp_rank and its BlockStoredMetadata
// cache_salt (the chain's salt).
func TestFixture_SGLangMapRankAndSalt(t *testing.T) {
	h := newHarness(t, false, func(e *EngineConfig) { e.HashScheme = "sglang"; e.PageSize = 2 })
	p := ot.Tokens(7, 4)
	out := feed(h, pyenc(t, kv{"ts", tTS, "events", []any{
		sglangStored(11, nil, p[:2], kv{"cache_salt", "salt-a"}),
		sglangStored(12, int64(11), p[2:], nil),
	}, "attn_dp_rank", 1}))
	wantEvents(t, out[0], sglangEv(stored(tReplica+"-dp1", "", saltedFPs(t, p, "salt-a"), 0)))
}

// SGLang pages equal to the block size need no page_size; its positional
// metadata slot is not mistaken for vLLM's lora_name.
func TestFixture_SGLangFullPages(t *testing.T) {
	h := newHarness(t, false, func(e *EngineConfig) { e.HashScheme = "sglang" })
	p := ot.Tokens(3, 4)
	out := feed(h, sglangBatch(t, 0, sglangStored(9, nil, p, kv{"cache_salt", "salt-b"})))
	wantEvents(t, out[0], sglangEv(stored(tReplica, "", saltedFPs(t, p, "salt-b"), 0)))
}

func sglangEv(e *pb.BlockEvent) *pb.BlockEvent { e.HashScheme = "sglang"; return e }

// newHarnessLog is newHarness with its logs written to w.
func newHarnessLog(t *testing.T, w io.Writer, mod ...func(*EngineConfig)) *harness {
	t.Helper()
	c := &Config{Engines: []EngineConfig{{Endpoint: "tcp://127.0.0.1:5557", ReplicaID: tReplica, ModelID: "m", TenantID: "t", HashScheme: "vllm", BlockSize: 4}}}
	for _, f := range mod {
		f(&c.Engines[0])
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(nil)
	log := slog.New(slog.NewTextHandler(w, nil))
	em := m.forEngine(tReplica)
	return &harness{t: t, m: m, cfg: &c.Engines[0], s: newSequencer(newTranslator(&c.Engines[0], 0, em, log), em, log, false)}
}

// Every dropped event kind is logged, naming the engine and what was lost,
// at most once per kind every 10 s per stream; another kind has its own
// limit, and the limit elapses.
func TestDropLog_RateLimitedPerKind(t *testing.T) {
	var logs bytes.Buffer
	h := newHarnessLog(t, &logs)
	p := ot.Tokens(0, 4)
	h.liveNoReplay(0, ot.Batch(tTS, -1))
	lostMedium := vllmBatch(t, vllmStored([]uint64{1, 2}, nil, ot.Tokens(0, 8), nil, "FOO", nil))
	lostTokens := vllmBatch(t, vllmStored([]uint64{3}, nil, p[:3], nil, "GPU", nil))
	at := func(seq int64, d time.Duration, payload []byte) {
		if _, req := h.s.live(nil, seq, payload, tNow.Add(d)); req != nil {
			t.Fatalf("replay request %+v", req)
		}
	}
	at(1, 0, lostMedium)
	at(2, time.Second, lostMedium)
	at(3, 2*time.Second, lostTokens)
	at(4, 3*time.Second, []byte("garbage"))
	at(5, 11*time.Second, lostMedium)
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	count := func(kind string) int {
		n := 0
		for _, l := range lines {
			if strings.Contains(l, "drop="+kind) {
				if !strings.Contains(l, "level=WARN") || !strings.Contains(l, "engine="+tReplica) {
					t.Errorf("%s line %q: want WARN naming the engine", kind, l)
				}
				n++
			}
		}
		return n
	}
	if n := count("unknown_medium"); n != 2 {
		t.Fatalf("unknown_medium lines %d, want 2 (t=0 and t=11s): %s", n, logs.String())
	}
	if n := count("token_length"); n != 1 {
		t.Fatalf("token_length lines %d, want 1: %s", n, logs.String())
	}
	if n := count("decode_error"); n != 1 {
		t.Fatalf("decode_error lines %d, want 1: %s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "medium=FOO") || !strings.Contains(logs.String(), "blocks_lost=2") {
		t.Fatalf("lines do not say what was lost: %s", logs.String())
	}
	if got := testutil.ToFloat64(h.m.IgnoredMedium.WithLabelValues(tReplica)); got != 3 {
		t.Fatalf("ignored medium counter %v, want 3: the counter counts every drop", got)
	}
}
