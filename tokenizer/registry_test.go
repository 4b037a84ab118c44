package tokenizer

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/inference-cache/inference-cache/internal/fixtures"
)

// modelsDir makes a models directory holding a copy of the tiny fixture
// under each given model id.
func modelsDir(t *testing.T, ids ...string) string {
	t.Helper()
	root := t.TempDir()
	for _, id := range ids {
		dir := filepath.Join(root, id)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
			data, err := os.ReadFile(filepath.Join(tinyDir, f))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
}

// TestRegistry_NoModelsDir: an empty or missing directory is
// ErrNoModelsDir, never a panic or another error.
func TestRegistry_NoModelsDir(t *testing.T) {
	for _, dir := range []string{"", filepath.Join(t.TempDir(), "missing"), filepath.Join(tinyDir, "tokenizer.json")} {
		_, err := NewRegistry(dir, RegistryOptions{}).Encode("m", "hello")
		if !errors.Is(err, ErrNoModelsDir) {
			t.Errorf("dir %q: err = %v, want ErrNoModelsDir", dir, err)
		}
	}
}

// TestRegistry_UnknownModel covers a missing model and ids that would
// leave the directory.
func TestRegistry_UnknownModel(t *testing.T) {
	r := NewRegistry(modelsDir(t, "a"), RegistryOptions{})
	for _, id := range []string{"b", "", "../a", "/etc", "a/../a", "a/"} {
		if _, err := r.Encode(id, "hello"); !errors.Is(err, ErrUnknownModel) {
			t.Errorf("model %q: err = %v, want ErrUnknownModel", id, err)
		}
	}
	if n := r.Loads(); n != 0 {
		t.Errorf("Loads = %d after unknown models, want 0", n)
	}
}

// TestRegistry_LoadsLazilyOnceAndCaches: nothing is read before the first
// Encode, and the second Encode reuses the loaded tokenizer. Model ids with
// a slash map to nested directories.
func TestRegistry_LoadsLazilyOnceAndCaches(t *testing.T) {
	r := NewRegistry(modelsDir(t, "org/model"), RegistryOptions{})
	if r.Loads() != 0 {
		t.Fatal("loaded before first use")
	}
	for range 3 {
		got, err := r.Encode("org/model", "hello")
		if err != nil {
			t.Fatal(err)
		}
		// Completions rule: add_bos_token and add_eos_token are both set.
		if diff := cmp.Diff([]uint32{1, 14, 2}, got); diff != "" {
			t.Fatal(diff)
		}
	}
	if n := r.Loads(); n != 1 {
		t.Errorf("Loads = %d, want 1", n)
	}
}

// TestRegistry_UnsupportedIsRememberedAndReported: an unsupported file is
// reported with ErrUnsupported and not re-parsed on every request.
func TestRegistry_UnsupportedIsRememberedAndReported(t *testing.T) {
	root := t.TempDir()
	bad := writeVariant(t, func(m map[string]any) { m["model"].(map[string]any)["type"] = "WordPiece" })
	if err := os.Rename(bad, filepath.Join(root, "bert")); err != nil {
		t.Fatal(err)
	}
	r := NewRegistry(root, RegistryOptions{})
	for range 3 {
		if _, err := r.Encode("bert", "hello"); !errors.Is(err, ErrUnsupported) {
			t.Fatalf("err = %v, want ErrUnsupported", err)
		}
	}
	if n := r.Loads(); n != 1 {
		t.Errorf("Loads = %d, want 1", n)
	}
}

// TestRegistry_BoundedEvictsLeastRecentlyUsed: with MaxModels 2, a third
// model evicts the least recently used one, which is reloaded on demand.
func TestRegistry_BoundedEvictsLeastRecentlyUsed(t *testing.T) {
	r := NewRegistry(modelsDir(t, "a", "b", "c"), RegistryOptions{MaxModels: 2})
	use := func(id string) {
		t.Helper()
		if _, err := r.Encode(id, "hello"); err != nil {
			t.Fatal(err)
		}
	}
	use("a")
	use("b")
	use("a") // b is now least recently used
	use("c") // evicts b
	if n := r.Loads(); n != 3 {
		t.Fatalf("Loads = %d, want 3", n)
	}
	use("a")
	use("c")
	if n := r.Loads(); n != 3 {
		t.Fatalf("a and c should still be loaded: Loads = %d, want 3", n)
	}
	use("b")
	if n := r.Loads(); n != 4 {
		t.Fatalf("b should have been reloaded: Loads = %d, want 4", n)
	}
}

// TestRegistry_ConcurrentFirstUseLoadsOnce: many goroutines asking for the
// same models at once share one load each and all get the right ids, even
// while eviction is churning (run with -race).
func TestRegistry_ConcurrentFirstUseLoadsOnce(t *testing.T) {
	r := NewRegistry(modelsDir(t, "a", "b", "c"), RegistryOptions{MaxModels: 8})
	var wg sync.WaitGroup
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := []string{"a", "b", "c"}[w%3]
			got, err := r.Encode(id, "hello hello")
			if err != nil {
				t.Error(err)
				return
			}
			if !cmp.Equal([]uint32{1, 14, 14, 2}, got) {
				t.Errorf("%s: got %v", id, got)
			}
		}()
	}
	wg.Wait()
	if n := r.Loads(); n != 3 {
		t.Errorf("Loads = %d, want 3 (one per model)", n)
	}

	small := NewRegistry(modelsDir(t, "a", "b", "c"), RegistryOptions{MaxModels: 1})
	for w := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := small.Encode([]string{"a", "b", "c"}[w%3], "hello"); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
}

// TestRegistry_EncodesSharedReferenceModel serves the reference mistral-like
// tokenizer through a models directory (a symlink, not a copy) and checks
// the completions rule against the golden ids with special tokens.
func TestRegistry_EncodesSharedReferenceModel(t *testing.T) {
	src := fixtures.TokenizerDir(t, "mistral-like")
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "mistralai"), 0o755)
	if err := os.Symlink(src, filepath.Join(root, "mistralai", "Mistral-7B")); err != nil {
		t.Fatal(err)
	}
	r := NewRegistry(root, RegistryOptions{})
	g := loadGolden(t)
	checked := 0
	for _, gt := range g.Tokenizers {
		if gt.Name != "mistral-like" {
			continue
		}
		for _, c := range gt.Cases {
			if !c.AddSpecialTokens {
				continue
			}
			got, err := r.Encode("mistralai/Mistral-7B", c.Text)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(c.IDs, got); diff != "" {
				t.Errorf("%q (-want +got):\n%s", c.Text, diff)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no golden case with special tokens")
	}
}

// TestRegistry_RetriesFailedLoadAfterTimeout: a failed load is remembered
// until RetryFailedAfter has passed, then a fixed file is picked up
// without a restart.
func TestRegistry_RetriesFailedLoadAfterTimeout(t *testing.T) {
	root := modelsDir(t, "m")
	path := filepath.Join(root, "m", "tokenizer.json")
	good, _ := os.ReadFile(path)
	os.WriteFile(path, []byte("{broken"), 0o644)
	var mu sync.Mutex
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	r := NewRegistry(root, RegistryOptions{RetryFailedAfter: time.Minute, Now: clock})
	if _, err := r.Encode("m", "hello"); !errors.Is(err, ErrMalformed) {
		t.Fatalf("err = %v, want ErrMalformed", err)
	}
	os.WriteFile(path, good, 0o644)
	mu.Lock()
	now = now.Add(time.Minute - time.Nanosecond)
	mu.Unlock()
	if _, err := r.Encode("m", "hello"); !errors.Is(err, ErrMalformed) || r.Loads() != 1 {
		t.Fatalf("within RetryFailedAfter: err = %v, loads %d; want the remembered ErrMalformed, 1 load", err, r.Loads())
	}
	mu.Lock()
	now = now.Add(time.Nanosecond)
	mu.Unlock()
	if _, err := r.Encode("m", "hello"); err != nil {
		t.Fatalf("after fixing the file: %v", err)
	}
	if n := r.Loads(); n != 2 {
		t.Errorf("Loads = %d, want 2", n)
	}
}
