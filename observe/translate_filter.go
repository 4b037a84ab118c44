package observe

import (
	"log/slog"
	"time"
)

// fullAttentionKinds are the kv_cache_spec_kind values (vLLM
// vllm/v1/kv_cache_interface.py KVCacheSpecKind) whose blocks hold the KV
// of every token of their prefix, so a block's residency means the prefix
// up to it is cached. Sliding-window, chunked-local, Mamba, encoder-only
// and cross-attention groups keep only part of it (or state of another
// shape) and are not indexed.
var fullAttentionKinds = map[string]bool{"full_attention": true, "mla_attention": true, "sink_full_attention": true}

// knownMedia are the medium values engines publish: vLLM's MEDIUM_GPU,
// MEDIUM_CPU, MEDIUM_STORAGE (vllm/distributed/kv_events.py) and SGLang's
// StorageMedium GPU, CPU_PINNED, DISK, EXTERNAL
// (python/sglang/srt/disaggregation/kv_events.py). A configured medium
// outside this list is still honoured; an event of a medium neither known
// nor configured is logged as unexpected.
var knownMedia = map[string]bool{"GPU": true, "CPU": true, "STORAGE": true, "CPU_PINNED": true, "DISK": true, "EXTERNAL": true}

// groupIndexed reports whether e's KV-cache group is the one indexed. With
// kv_cache_spec_kind (vLLM hybrid models) it is the first full-attention
// group the stream's stores name: every group carries the same block
// hashes, so indexing one keeps a removal in another group (a sliding
// window dropping old blocks) from removing the prefix, and indexing two
// would let either group's removal remove it while the other still holds
// it. Removals carry only group_idx and are matched against that group.
// Without the kind (older engines), group_idx 0 (or absent) is the main
// attention group.
func (t *translator) groupIndexed(e *Event) bool {
	if e.Kind == EventBlockStored && e.SpecKind != "" {
		if !fullAttentionKinds[e.SpecKind] {
			return false
		}
		if t.fullGroup < 0 {
			t.fullGroup = e.GroupIdx
		}
		return e.GroupIdx == t.fullGroup
	}
	if t.fullGroup >= 0 {
		return e.GroupIdx == t.fullGroup
	}
	return e.GroupIdx == 0
}

// indexed reports whether an event's KV group, locality and medium are
// indexed: the full-attention group (groupIndexed), not REMOTE (vLLM's
// locality: the blocks live in a tier another instance owns, so this
// replica would have to fetch them — not a local prefix hit), and the
// configured media (nil or empty medium means GPU). Every ignored event is
// counted and logged (rate-limited); the unexpected ones — a medium
// neither known nor configured — at WARN.
func (t *translator) indexed(e *Event, rep string, now time.Time) bool {
	if !t.groupIndexed(e) {
		t.m.ignoredGroup.Inc()
		t.drops.log(t, now, slog.LevelInfo, "group", "events of a KV-cache group that is not the indexed full-attention group are ignored (by design: hybrid models' sliding-window or Mamba groups)",
			"replica", rep, "event", e.Kind.String(), "group_idx", e.GroupIdx, "kv_cache_spec_kind", e.SpecKind, "blocks_lost", len(e.BlockHashes))
		return false
	}
	if upper(e.Locality) == "REMOTE" {
		t.m.ignoredLocality.Inc()
		t.drops.log(t, now, slog.LevelInfo, "locality", "events of REMOTE blocks are ignored (by design: not resident on this replica)",
			"replica", rep, "event", e.Kind.String(), "medium", e.Medium, "blocks_lost", len(e.BlockHashes))
		return false
	}
	md := upper(e.Medium)
	if md == "" {
		md = "GPU"
	}
	if !t.media[md] {
		t.m.ignoredMedium.Inc()
		if knownMedia[md] {
			t.drops.log(t, now, slog.LevelInfo, "medium", "events of a storage medium not in the engine's media are ignored",
				"replica", rep, "event", e.Kind.String(), "medium", e.Medium, "media", t.cfg.Media, "blocks_lost", len(e.BlockHashes))
		} else {
			t.drops.log(t, now, slog.LevelWarn, "unknown_medium", "events of an unknown storage medium are dropped (counted in ignored_medium_total); add it to the engine's media to index it",
				"replica", rep, "event", e.Kind.String(), "medium", e.Medium, "media", t.cfg.Media, "blocks_lost", len(e.BlockHashes))
		}
		return false
	}
	return true
}

func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 32
		}
	}
	return string(b)
}
