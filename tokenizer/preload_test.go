package tokenizer

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Models finds nested ids ("org/name"), follows symlinks, skips hidden
// directories and directories without a tokenizer.json.
func TestRegistry_ModelsFindsEveryTokenizer(t *testing.T) {
	dir := modelsDir(t, "a", "org/b", ".hidden/c")
	if err := os.MkdirAll(filepath.Join(dir, "empty", "deeper"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "a"), filepath.Join(dir, "linked")); err != nil {
		t.Fatal(err)
	}
	got, err := NewRegistry(dir, RegistryOptions{}).Models()
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"a", "linked", "org/b"}, got); d != "" {
		t.Fatalf("models (-want +got):\n%s", d)
	}
	if _, err := NewRegistry("", RegistryOptions{}).Models(); !errors.Is(err, ErrNoModelsDir) {
		t.Fatalf("no dir: err %v, want ErrNoModelsDir", err)
	}
}

// Preload loads every model once, reports a broken file without
// stopping, and leaves nothing to load for the first Encode.
func TestRegistry_PreloadLoadsEveryModelAndReportsBrokenOnes(t *testing.T) {
	dir := modelsDir(t, "a", "org/b")
	if err := os.MkdirAll(filepath.Join(dir, "broken"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "broken", "tokenizer.json"), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := NewRegistry(dir, RegistryOptions{})
	res, err := r.Preload(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 3 || res[0].Model != "a" || res[1].Model != "broken" || res[2].Model != "org/b" {
		t.Fatalf("preload results %+v", res)
	}
	if res[0].Err != nil || res[2].Err != nil || !errors.Is(res[1].Err, ErrMalformed) {
		t.Fatalf("errors: a %v, broken %v, org/b %v; want nil, ErrMalformed, nil", res[0].Err, res[1].Err, res[2].Err)
	}
	if n := r.Loads(); n != 3 {
		t.Fatalf("Loads = %d after preload, want 3", n)
	}
	for _, id := range []string{"a", "org/b"} {
		if _, err := r.Encode(id, "hello"); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
	if n := r.Loads(); n != 3 {
		t.Fatalf("Loads = %d after encoding with preloaded models, want still 3", n)
	}
}

// Preload stops waiting when its context ends (the load in progress goes
// on for later callers) and never preloads more than MaxModels.
func TestRegistry_PreloadBoundedByContextAndMaxModels(t *testing.T) {
	release := make(chan struct{})
	r := NewRegistry(modelsDir(t, "a", "b"), RegistryOptions{Loader: func(dir string, o LoadOptions) (*Tokenizer, error) {
		<-release
		return LoadDir(dir, o)
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	res, err := r.Preload(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range res {
		if !errors.Is(m.Err, ErrLoading) {
			t.Fatalf("%s: err %v, want ErrLoading", m.Model, m.Err)
		}
	}
	close(release)
	if _, err := r.Encode("a", "hello"); err != nil { // the started load finishes
		t.Fatal(err)
	}

	r = NewRegistry(modelsDir(t, "a", "b", "c"), RegistryOptions{MaxModels: 2})
	res, err = r.Preload(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 3 || res[0].Err != nil || res[1].Err != nil || !errors.Is(res[2].Err, ErrSkipped) {
		t.Fatalf("results %+v, want a and b loaded, c ErrSkipped", res)
	}
}
