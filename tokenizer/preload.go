package tokenizer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// maxModelDepth bounds how deep Models looks for <model_id>/tokenizer.json:
// model ids have at most an organisation prefix ("Qwen/Qwen3-8B"), and the
// bound also stops a symlink loop.
const maxModelDepth = 3

// Models lists the model ids of the models directory: every directory
// (symlinks followed) below it, at most three levels deep, holding a
// tokenizer.json, as slash-separated paths relative to the directory,
// sorted. Hidden entries (".git") are skipped, and a model's own
// directory is not searched further. Errors wrap ErrNoModelsDir when the
// directory is unset or unreadable; an unreadable subdirectory is skipped.
func (r *Registry) Models() ([]string, error) {
	if r.dir == "" {
		return nil, ErrNoModelsDir
	}
	if fi, err := os.Stat(r.dir); err != nil || !fi.IsDir() {
		if err == nil {
			err = errors.New("not a directory")
		}
		return nil, fmt.Errorf("%w: %s: %v", ErrNoModelsDir, r.dir, err)
	}
	var out []string
	var walk func(rel string, depth int)
	walk = func(rel string, depth int) {
		ents, err := os.ReadDir(filepath.Join(r.dir, rel))
		if err != nil {
			return
		}
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".") {
				continue
			}
			sub := filepath.Join(rel, e.Name())
			fi, err := os.Stat(filepath.Join(r.dir, sub)) // follows symlinks
			if err != nil || !fi.IsDir() {
				continue
			}
			if st, err := os.Stat(filepath.Join(r.dir, sub, tokenizerFile)); err == nil && !st.IsDir() {
				out = append(out, filepath.ToSlash(sub))
				continue
			}
			if depth < maxModelDepth {
				walk(sub, depth+1)
			}
		}
	}
	walk("", 1)
	slices.Sort(out)
	return out, nil
}

// ModelLoad is the outcome of preloading one model's tokenizer.
type ModelLoad struct {
	// Model is the model id.
	Model string
	// Err is nil when the tokenizer is loaded. Otherwise it wraps what a
	// lookup would get: ErrUnsupported or ErrMalformed for a broken file
	// (remembered for RetryFailedAfter, like any failed load), ErrLoading
	// when ctx ended first (the load goes on in the background), or
	// ErrSkipped when MaxModels tokenizers were already preloaded.
	Err error
	// Took is how long the load (or the wait for it) took.
	Took time.Duration
}

// Preload loads the tokenizer of every model Models finds, one after the
// other, so the first prompt_text lookups do not wait for a parse of a
// file of tens of MB. It stops waiting once ctx ends: the model being
// loaded finishes in the background, the ones after it report ErrLoading
// without being started. It returns one ModelLoad per model found (in
// Models order) and Models' error, if any; a broken tokenizer is only
// reported, never fatal.
func (r *Registry) Preload(ctx context.Context) ([]ModelLoad, error) {
	ids, err := r.Models()
	if err != nil {
		return nil, err
	}
	out := make([]ModelLoad, 0, len(ids))
	for i, id := range ids {
		ml := ModelLoad{Model: id}
		start := time.Now()
		switch {
		case i >= r.opts.MaxModels:
			ml.Err = fmt.Errorf("model %q: %w (%d)", id, ErrSkipped, r.opts.MaxModels)
		case ctx.Err() != nil:
			ml.Err = fmt.Errorf("model %q: %w (%w): %w", id, ErrStopped, ErrLoading, ctx.Err())
		default:
			_, ml.Err = r.tokenizer(ctx, id)
		}
		ml.Took = time.Since(start)
		out = append(out, ml)
	}
	return out, nil
}
