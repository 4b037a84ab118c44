package policy

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParse_FullFileSetsEveryKnob(t *testing.T) {
	src := `apiVersion: inferencecache.io/v1
kind: CachePolicy
metadata:
  name: prod
spec:
  chainMatching: false
  minimumMatchedTokens: 32
  routingFloorScore: "0.5"
  lookupTimeoutMs: 25
  evictionTTL: 10m
  evictionPolicy: LFU
  maxResidencies: 1_000_000
  pressureWeight: 0.75
  sloTightThresholdMs: 150
  sloTightBias: 0.5
  strategy:
    enableTenantHot: false
  tenantHotMinHitRate: 0.3
  statsFreshness: 45
  affinityRouting: Disabled
  maxReplicas: 8
  rankingVersion: v1
  blockSize:
    qwen3-8b: 32
    llama-3-70b: 64
  maxStaleness: 2s
  evictionBatch: 16
`
	got, err := Parse("prod.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := Policy{
		ChainMatching: false, MinimumMatchedTokens: 32, RoutingFloorScore: "0.5",
		LookupTimeout: 25 * time.Millisecond, EvictionTTL: 10 * time.Minute, EvictionPolicy: LFU,
		MaxResidencies: 1_000_000, PressureWeight: 0.75, SLOTightThreshold: 150 * time.Millisecond,
		SLOTightBias: 0.5, EnableTenantHot: false, TenantHotMinHitRate: 0.3,
		StatsFreshness: 45 * time.Second, AffinityRouting: false, MaxReplicas: 8,
		RankingVersion: RankingV1, BlockSize: map[string]uint32{"qwen3-8b": 32, "llama-3-70b": 64},
		MaxStaleness: 2 * time.Second, EvictionBatch: 16,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("(-want +got):\n%s", d)
	}
}

func TestParse_AbsentKnobsKeepDefaults(t *testing.T) {
	got, err := Parse("p.yaml", []byte("kind: CachePolicy\nspec:\n  maxReplicas: 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.MaxReplicas = 2
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("(-want +got):\n%s", d)
	}
}

func TestMarshalYAML_RoundTrips(t *testing.T) {
	p := Default()
	p.BlockSize = map[string]uint32{"m": 8, "a b": 16}
	p.EvictionPolicy = LFU
	p.AffinityRouting = false
	p.EvictionBatch = 32
	got, err := Parse("x", MarshalYAML(p))
	if err != nil {
		t.Fatalf("%v\n%s", err, MarshalYAML(p))
	}
	if d := cmp.Diff(p, got); d != "" {
		t.Fatalf("(-want +got):\n%s", d)
	}
}

// Every error names the file, the line, the field and the reason.
func TestParse_ErrorsNameFileLineFieldReason(t *testing.T) {
	cases := []struct {
		name, src string
		line      int
		field     string
		reason    string
	}{
		{"wrong kind", "kind: Policy\nspec: {}\n", 1, "kind", `"Policy", must be CachePolicy`},
		{"missing kind", "spec: {}\n", 1, "kind", "missing"},
		{"missing spec", "kind: CachePolicy\n", 1, "spec", "missing"},
		{"unknown knob", "kind: CachePolicy\nspec:\n  maxReplica: 3\n", 3, "spec.maxReplica", "unknown field"},
		{"unknown top", "kind: CachePolicy\nspecs: {}\n", 2, "specs", "unknown top-level field"},
		{"bad enum", "kind: CachePolicy\nspec:\n  evictionPolicy: MRU\n", 3, "spec.evictionPolicy", "must be LRU or LFU"},
		{"bad affinity", "kind: CachePolicy\nspec:\n  affinityRouting: yes\n", 3, "spec.affinityRouting", "Enabled or Disabled"},
		{"negative", "kind: CachePolicy\nspec:\n  maxReplicas: -1\n", 3, "spec.maxReplicas", "non-negative integer"},
		{"huge", "kind: CachePolicy\nspec:\n  minimumMatchedTokens: 99999999999\n", 3, "spec.minimumMatchedTokens", "over the maximum"},
		{"out of range", "kind: CachePolicy\nspec:\n\n  maxReplicas: 65\n", 4, "spec.maxReplicas", "between 1 and 64"},
		{"zero timeout", "kind: CachePolicy\nspec:\n  lookupTimeoutMs: 0\n", 3, "spec.lookupTimeoutMs", `"0" must be between 1ms and 10s`},
		{"bad duration", "kind: CachePolicy\nspec:\n  evictionTTL: ten minutes\n", 3, "spec.evictionTTL", "duration"},
		{"staleness", "kind: CachePolicy\nspec:\n  maxStaleness: 1ms\n", 3, "spec.maxStaleness", "between 100ms and 1h"},
		{"eviction batch", "kind: CachePolicy\nspec:\n  evictionBatch: 2\n", 3, "spec.evictionBatch", "must be 0 (= 64) or between 4 and 1024"},
		{"block size zero", "kind: CachePolicy\nspec:\n  blockSize:\n    m: 0\n", 3, "spec.blockSize.m", "between 1 and 4096"},
		{"not a bool", "kind: CachePolicy\nspec:\n  chainMatching: maybe\n", 3, "spec.chainMatching", "true or false"},
		{"strategy knob", "kind: CachePolicy\nspec:\n  strategy:\n    hot: true\n", 4, "spec.strategy.hot", "unknown field"},
		{"floor", "kind: CachePolicy\nspec:\n  routingFloorScore: abc\n", 3, "spec.routingFloorScore", "non-negative decimal"},
		{"floor Inf", "kind: CachePolicy\nspec:\n  routingFloorScore: \"Inf\"\n", 3, "spec.routingFloorScore", "non-negative decimal"},
		{"floor hex", "kind: CachePolicy\nspec:\n  routingFloorScore: \"0x1p-3\"\n", 3, "spec.routingFloorScore", "non-negative decimal"},
		{"floor exponent", "kind: CachePolicy\nspec:\n  routingFloorScore: \"1e9\"\n", 3, "spec.routingFloorScore", "non-negative decimal"},
		{"block size key", "kind: CachePolicy\nspec:\n  blockSize:\n    \"m\\0\": 16\n", 3, "spec.blockSize", "holds control character U+0000 at byte 1"},
		{"twice", "kind: CachePolicy\nspec:\n  maxReplicas: 2\n  maxReplicas: 3\n", 4, "spec.maxReplicas", "twice"},
		{"bad yaml", "kind: CachePolicy\nspec:\n  a: [\n", 0, "", "not valid YAML"},
		{"two documents", "kind: CachePolicy\nspec:\n  maxReplicas: 2\n---\nkind: CachePolicy\nspec:\n  maxReplicas: 3\n", 4, "", "more than one YAML document"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("cfg/policy.yaml", []byte(c.src))
			var fe *FileError
			if !errors.As(err, &fe) {
				t.Fatalf("err = %v, want *FileError", err)
			}
			if fe.File != "cfg/policy.yaml" || fe.Field != c.field || !strings.Contains(fe.Reason, c.reason) {
				t.Fatalf("got file=%q field=%q reason=%q, want field %q reason containing %q", fe.File, fe.Field, fe.Reason, c.field, c.reason)
			}
			if c.line > 0 && fe.Line != c.line {
				t.Errorf("line = %d, want %d", fe.Line, c.line)
			}
			if !strings.Contains(err.Error(), "cfg/policy.yaml") {
				t.Errorf("message %q lacks the file name", err)
			}
		})
	}
}

func TestLoadFile_MissingFileNamesIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.yaml")
	_, err := LoadFile(path)
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("err = %v, want one naming %s", err, path)
	}
	if err := os.WriteFile(path, []byte("kind: CachePolicy\nspec:\n  maxReplicas: 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := LoadFile(path)
	if err != nil || p.MaxReplicas != 3 {
		t.Fatalf("LoadFile = %+v, %v", p.MaxReplicas, err)
	}
}

// A missing file names its path once and still matches fs.ErrNotExist.
func TestLoadFile_MissingFileNamesPathOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.yaml")
	_, err := LoadFile(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err = %v, want fs.ErrNotExist", err)
	}
	if n := strings.Count(err.Error(), path); n != 1 {
		t.Fatalf("error names the path %d times: %v", n, err)
	}
}

func TestBaseVersion_ReadsTheHeadCommentOfPolicyGet(t *testing.T) {
	p := Default()
	p.Version = 7
	if v, ok := BaseVersion(MarshalYAML(p)); !ok || v != 7 {
		t.Fatalf("BaseVersion of a marshalled version-7 policy = %d, %v; want 7, true", v, ok)
	}
	for _, in := range []string{"kind: CachePolicy\nspec: {}\n", "", "# version x\nkind: CachePolicy\n", "kind: CachePolicy\n# version 3\n"} {
		if v, ok := BaseVersion([]byte(in)); ok {
			t.Errorf("BaseVersion(%q) = %d, true; want no version (only a first-line comment counts)", in, v)
		}
	}
}

// Every knob the unknown-field message lists has a setter and every setter
// is listed: a knob added to one and not the other would be refused as
// unknown or missing from the message.
func TestSpecFieldsMatchSetters(t *testing.T) {
	listed := map[string]bool{}
	for _, f := range specFields {
		if listed[f] {
			t.Errorf("specFields lists %q twice", f)
		}
		listed[f] = true
		if specSetters[f] == nil {
			t.Errorf("specFields lists %q, which has no setter", f)
		}
	}
	for f := range specSetters {
		if !listed[f] {
			t.Errorf("setter for %q missing from specFields", f)
		}
	}
}
