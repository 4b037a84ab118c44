package fingerprint

import (
	"encoding/binary"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/zeebo/xxh3"
)

// goldenPath is the golden file computed by the reference C XXH3
// (testdata/PROVENANCE.md).
var goldenPath = filepath.Join("testdata", "fingerprint_vectors.json")

type goldenVector struct {
	Name             string   `json:"name"`
	BlockSize        int      `json:"block_size"`
	TokenIDs         []uint32 `json:"token_ids"`
	BlockHashes      []string `json:"block_hashes"`
	LocalBlockHashes []string `json:"local_block_hashes"`
	BlockTokenCounts []uint32 `json:"block_token_counts"`
	PrefixHash       *string  `json:"prefix_hash"`
}

func loadGolden(t testing.TB) []goldenVector {
	t.Helper()
	raw, err := os.ReadFile(goldenPath)
	if err != nil {
		t.Fatalf("golden vectors: %v", err)
	}
	var f struct {
		Seed    int            `json:"seed"`
		Vectors []goldenVector `json:"vectors"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatalf("parse %s: %v", goldenPath, err)
	}
	if f.Seed != Seed {
		t.Fatalf("golden seed %d, package seed %d", f.Seed, Seed)
	}
	if len(f.Vectors) == 0 {
		t.Fatal("golden file holds no vectors")
	}
	return f.Vectors
}

func parseU64s(t *testing.T, ss []string) []uint64 {
	t.Helper()
	out := make([]uint64, 0, len(ss))
	for _, s := range ss {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("golden hash %q: %v", s, err)
		}
		out = append(out, v)
	}
	return out
}

func TestCompute_MatchesGoldenVectors(t *testing.T) {
	for _, v := range loadGolden(t) {
		t.Run(v.Name, func(t *testing.T) {
			k, err := Compute(v.TokenIDs, v.BlockSize)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(parseU64s(t, v.BlockHashes), k.BlockHashes); d != "" {
				t.Errorf("block hashes (-golden +got):\n%s", d)
			}
			locals, _ := AppendLocalHashes(nil, v.TokenIDs, v.BlockSize)
			if d := cmp.Diff(parseU64s(t, v.LocalBlockHashes), append([]uint64{}, locals...)); d != "" {
				t.Errorf("local hashes (-golden +got):\n%s", d)
			}
			if d := cmp.Diff(append([]uint32{}, v.BlockTokenCounts...), k.BlockTokenCounts); d != "" {
				t.Errorf("token counts (-golden +got):\n%s", d)
			}
			switch {
			case v.PrefixHash == nil && k.HasPrefix:
				t.Errorf("prefix hash %d, golden has none", k.PrefixHash)
			case v.PrefixHash != nil && (!k.HasPrefix || strconv.FormatUint(k.PrefixHash, 10) != *v.PrefixHash):
				t.Errorf("prefix hash %d (has=%v), golden %s", k.PrefixHash, k.HasPrefix, *v.PrefixHash)
			}
		})
	}
}

// A prefix of the tokens (whole blocks) must hash to a prefix of the chain:
// this is what makes longest-prefix matching possible.
func TestAppendBlockHashes_PrefixOfTokensIsPrefixOfChain(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 200; trial++ {
		bs := 1 + r.IntN(64)
		n := r.IntN(40 * bs)
		toks := make([]uint32, n)
		for i := range toks {
			toks[i] = r.Uint32()
		}
		whole, err := AppendBlockHashes(nil, toks, bs)
		if err != nil {
			t.Fatal(err)
		}
		cut := r.IntN(n + 1)
		part, _ := AppendBlockHashes(nil, toks[:cut], bs)
		if len(part) != cut/bs {
			t.Fatalf("bs=%d cut=%d: %d blocks, want %d", bs, cut, len(part), cut/bs)
		}
		if d := cmp.Diff(whole[:len(part)], part, cmpopts.EquateEmpty()); d != "" {
			t.Fatalf("bs=%d n=%d cut=%d: prefix chain differs:\n%s", bs, n, cut, d)
		}
	}
}

func TestAppendBlockHashes_ChangingOneTokenChangesItsBlockAndAllLater(t *testing.T) {
	toks := make([]uint32, 64)
	for i := range toks {
		toks[i] = uint32(i)
	}
	a, _ := AppendBlockHashes(nil, toks, 16)
	toks[20]++ // block 1
	b, _ := AppendBlockHashes(nil, toks, 16)
	if a[0] != b[0] {
		t.Error("block 0 must not change")
	}
	for i := 1; i < 4; i++ {
		if a[i] == b[i] {
			t.Errorf("block %d must change when block 1 changes", i)
		}
	}
}

func TestAppendBlockHashes_RejectsBadBlockSize(t *testing.T) {
	for _, bs := range []int{0, -1, MaxBlockSize + 1} {
		if _, err := AppendBlockHashes(nil, []uint32{1, 2}, bs); err != ErrBlockSize {
			t.Errorf("block size %d: err %v, want ErrBlockSize", bs, err)
		}
	}
}

func TestAppendBlockHashes_NoAllocWithCapacity(t *testing.T) {
	toks := make([]uint32, 24*16)
	dst := make([]uint64, 0, 32)
	allocs := testing.AllocsPerRun(100, func() {
		dst, _ = AppendBlockHashes(dst[:0], toks, 16)
	})
	if allocs != 0 {
		t.Errorf("%v allocs per call, want 0", allocs)
	}
}

// BenchmarkFingerprint reports MB/s of token bytes through the whole chain,
// next to raw xxh3.HashSeed over the same bytes (the baseline).
func BenchmarkFingerprint(b *testing.B) {
	for _, bs := range []int{16, 512} {
		toks := make([]uint32, 8192)
		r := rand.New(rand.NewPCG(3, 4))
		for i := range toks {
			toks[i] = r.Uint32()
		}
		raw := make([]byte, len(toks)*4)
		for i, t := range toks {
			binary.LittleEndian.PutUint32(raw[i*4:], t)
		}
		b.Run("chain/bs="+strconv.Itoa(bs), func(b *testing.B) {
			dst := make([]uint64, 0, len(toks)/bs)
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			for b.Loop() {
				dst, _ = AppendBlockHashes(dst[:0], toks, bs)
			}
		})
		b.Run("raw-xxh3-per-block/bs="+strconv.Itoa(bs), func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			var sink uint64
			for b.Loop() {
				for i := 0; i+bs*4 <= len(raw); i += bs * 4 {
					sink ^= xxh3.HashSeed(raw[i:i+bs*4], Seed)
				}
			}
			_ = sink
		})
	}
	b.Run("raw-xxh3-whole", func(b *testing.B) {
		raw := make([]byte, 8192*4)
		b.SetBytes(int64(len(raw)))
		var sink uint64
		for b.Loop() {
			sink ^= xxh3.HashSeed(raw, Seed)
		}
		_ = sink
	})
}

// TestSalted_FromFirstPrinciples recomputes the salted chain with xxh3 and
// encoding/binary only, per AppendSaltedBlockHashes' formula: the salt's
// bytes hashed with seed 1337 stand in for the missing parent of block 0.
func TestSalted_FromFirstPrinciples(t *testing.T) {
	tokens := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	const bs, salt = 4, "tenant-a-salt"
	le32 := func(ts []uint32) []byte {
		b := make([]byte, 4*len(ts))
		for i, v := range ts {
			binary.LittleEndian.PutUint32(b[4*i:], v)
		}
		return b
	}
	pair := func(a, b uint64) []byte {
		var buf [16]byte
		binary.LittleEndian.PutUint64(buf[:8], a)
		binary.LittleEndian.PutUint64(buf[8:], b)
		return buf[:]
	}
	s := xxh3.HashSeed([]byte(salt), 1337)
	h0 := xxh3.HashSeed(pair(s, xxh3.HashSeed(le32(tokens[0:4]), 1337)), 1337)
	h1 := xxh3.HashSeed(pair(h0, xxh3.HashSeed(le32(tokens[4:8]), 1337)), 1337)
	got, err := AppendSaltedBlockHashes(nil, tokens, bs, salt)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]uint64{h0, h1}, got); d != "" {
		t.Fatalf("salted chain (-want +got):\n%s", d)
	}
	k, err := ComputeSalted(tokens, bs, salt)
	if err != nil || !k.HasPrefix || k.PrefixHash != h1 {
		t.Fatalf("ComputeSalted = %+v, %v; want prefix %x", k, err, h1)
	}
	// Another salt, and no salt, are other hash domains.
	other, _ := AppendSaltedBlockHashes(nil, tokens, bs, "tenant-b-salt")
	plain, _ := AppendBlockHashes(nil, tokens, bs)
	for i := range got {
		if other[i] == got[i] || plain[i] == got[i] {
			t.Fatalf("block %d: salted key equals another domain's", i)
		}
	}
	if _, err := AppendSaltedBlockHashes(nil, tokens, 0, salt); err != ErrBlockSize {
		t.Fatalf("block size 0: err %v, want ErrBlockSize", err)
	}
}

// TestSalted_EmptySaltIsTheGoldenChain: no salt must leave contract §3.5's keys
// exactly as the reference vectors.
func TestSalted_EmptySaltIsTheGoldenChain(t *testing.T) {
	for _, v := range loadGolden(t) {
		if v.BlockSize < 1 || v.BlockSize > MaxBlockSize {
			continue
		}
		got, err := AppendSaltedBlockHashes(nil, v.TokenIDs, v.BlockSize, "")
		if err != nil {
			t.Fatalf("%s: %v", v.Name, err)
		}
		want := make([]uint64, len(v.BlockHashes))
		for i, h := range v.BlockHashes {
			if want[i], err = strconv.ParseUint(h, 10, 64); err != nil {
				t.Fatalf("%s: golden hash %q: %v", v.Name, h, err)
			}
		}
		if d := cmp.Diff(want, got, cmpopts.EquateEmpty()); d != "" {
			t.Fatalf("%s (-golden +got):\n%s", v.Name, d)
		}
	}
}
