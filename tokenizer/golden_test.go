package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/inference-cache/inference-cache/internal/fixtures"
)

// goldenFile is the file of ids produced by the reference implementation
// (testdata/PROVENANCE.md) for the repository's reference tokenizers.
type goldenFile struct {
	Tokenizers []struct {
		Name          string `json:"name"`
		TokenizerJSON string `json:"tokenizer_json"`
		Cases         []struct {
			Text             string   `json:"text"`
			AddSpecialTokens bool     `json:"add_special_tokens"`
			IDs              []uint32 `json:"ids"`
		} `json:"cases"`
	} `json:"tokenizers"`
}

func loadGolden(t testing.TB) goldenFile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "tokenizer_vectors.json"))
	if err != nil {
		t.Fatalf("golden vectors: %v", err)
	}
	var g goldenFile
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	return g
}

// sharedTokenizers caches the loaded reference tokenizers across tests.
var sharedTokenizers sync.Map // name → *Tokenizer

// sharedTokenizer loads the reference tokenizer name (fixtures.Tokenizers)
// once per test process.
func sharedTokenizer(t testing.TB, name string) *Tokenizer {
	t.Helper()
	if tok, ok := sharedTokenizers.Load(name); ok {
		return tok.(*Tokenizer)
	}
	tok, err := LoadDir(fixtures.TokenizerDir(t, name), LoadOptions{})
	if err != nil {
		t.Fatalf("load %s: %v", name, err)
	}
	sharedTokenizers.Store(name, tok)
	return tok
}

// TestEncode_MatchesReferenceGolden checks every golden case of every
// reference tokenizer, with and without special tokens, and then again with
// a warm word cache.
func TestEncode_MatchesReferenceGolden(t *testing.T) {
	g := loadGolden(t)
	if len(g.Tokenizers) == 0 {
		t.Fatal("no tokenizers in the golden file")
	}
	for _, gt := range g.Tokenizers {
		t.Run(gt.Name, func(t *testing.T) {
			tok := sharedTokenizer(t, gt.Name)
			for pass := range 2 { // cold, then cached
				failed := 0
				for i, c := range gt.Cases {
					got, err := tok.Encode(c.Text, c.AddSpecialTokens)
					if err != nil {
						t.Fatalf("case %d: %v", i, err)
					}
					if got == nil {
						got = []uint32{}
					}
					want := c.IDs
					if want == nil {
						want = []uint32{}
					}
					if diff := cmp.Diff(want, got); diff != "" {
						failed++
						if failed <= 5 {
							t.Errorf("pass %d case %d %q (special=%v): ids differ (-want +got):\n%s", pass, i, c.Text, c.AddSpecialTokens, diff)
						}
					}
				}
				if failed > 0 {
					t.Fatalf("pass %d: %d of %d cases differ", pass, failed, len(gt.Cases))
				}
			}
			t.Logf("%d of %d cases match", len(gt.Cases), len(gt.Cases))
		})
	}
}
