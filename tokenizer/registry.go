package tokenizer

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Registry defaults.
const (
	// DefaultMaxModels is how many models' tokenizers a Registry keeps
	// loaded. A byte-level tokenizer with a 150k vocabulary takes a few
	// tens of MB once loaded; a fleet routes for a handful of models.
	DefaultMaxModels = 8
	// DefaultRetryFailedAfter is how long a Registry remembers that a
	// model's tokenizer failed to load (unsupported or malformed) before it
	// tries again, so that a bad 10 MB file is not re-parsed on every
	// request yet a fixed file is picked up without a restart.
	DefaultRetryFailedAfter = 30 * time.Second
)

// RegistryOptions tune a Registry. The zero value means the defaults.
type RegistryOptions struct {
	// MaxModels bounds the loaded tokenizers (successful and failed loads
	// alike); when a new model is needed beyond it, the least recently used
	// one is dropped. 0 means DefaultMaxModels.
	MaxModels int
	// RetryFailedAfter is how long a failed load (ErrUnsupported,
	// ErrMalformed) is remembered; 0 means DefaultRetryFailedAfter. A
	// missing model (ErrUnknownModel) is never remembered: the directory
	// is checked again on the next request.
	RetryFailedAfter time.Duration
	// Load is passed to LoadDir for every model.
	Load LoadOptions
	// Loader loads one model directory (<dir>/<model_id>) with Load; nil
	// means LoadDir. Its errors are classified as LoadDir's are. Tests
	// inject one to control when a load finishes.
	Loader func(dir string, opts LoadOptions) (*Tokenizer, error)
	// Now is the clock RetryFailedAfter is measured on; nil means
	// time.Now. Tests inject one to step past the retry period instead of
	// sleeping through it.
	Now func() time.Time
}

// Registry maps model ids to tokenizers found in a models directory laid
// out as <dir>/<model_id>/tokenizer.json (plus tokenizer_config.json when
// present). Model ids may contain slashes ("Qwen/Qwen3-8B" is
// <dir>/Qwen/Qwen3-8B/). Tokenizers are loaded by Preload or on first
// use, shared by concurrent callers (one load per model at a time), and
// kept up to MaxModels. A Registry is safe for concurrent use.
type Registry struct {
	dir  string
	opts RegistryOptions

	clock   atomic.Uint64 // logical time for LRU
	loads   atomic.Int64  // completed LoadDir calls, for tests and metrics
	mu      sync.RWMutex
	entries map[string]*entry
}

// entry is one model's slot; ready is closed once tok/err are set.
type entry struct {
	ready    chan struct{}
	tok      *Tokenizer
	err      error
	loadedAt time.Time
	lastUsed atomic.Uint64
}

// NewRegistry returns a registry over dir. An empty dir gives a registry
// whose Encode always fails with ErrNoModelsDir, so a server can hold one
// unconditionally. Nothing is read until the first Encode or Preload.
func NewRegistry(dir string, opts RegistryOptions) *Registry {
	if opts.MaxModels <= 0 {
		opts.MaxModels = DefaultMaxModels
	}
	if opts.RetryFailedAfter <= 0 {
		opts.RetryFailedAfter = DefaultRetryFailedAfter
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Registry{dir: dir, opts: opts, entries: make(map[string]*entry)}
}

// Dir returns the models directory the registry was built with.
func (r *Registry) Dir() string { return r.dir }

// Loads returns how many times a tokenizer has been loaded from disk.
func (r *Registry) Loads() int64 { return r.loads.Load() }

// Encode tokenizes text with modelID's tokenizer the way vLLM's
// OpenAI-compatible completions endpoint does: add_special_tokens=True,
// with the special tokens decided by the model's files (see the package
// documentation). Errors wrap ErrNoModelsDir, ErrUnknownModel,
// ErrUnsupported, ErrMalformed or ErrInvalidUTF8.
func (r *Registry) Encode(modelID, text string) ([]uint32, error) {
	tok, err := r.Tokenizer(modelID)
	if err != nil {
		return nil, err
	}
	ids, err := tok.Encode(text, true)
	if err != nil {
		return nil, fmt.Errorf("model %q: %w", modelID, err)
	}
	return ids, nil
}

// EncodeContext is Encode bounded as Tokenizer.EncodeContext is: it stops
// with an error wrapping ErrStopped once ctx ends, and with
// ErrTooManyTokens once the ids exceed maxTokens (0: no cap). When the
// model's tokenizer is still loading (a first use takes a parse of a file
// of tens of MB), it waits for the load only until ctx ends; the load
// itself goes on for the callers after it.
func (r *Registry) EncodeContext(ctx context.Context, modelID, text string, maxTokens int) ([]uint32, error) {
	if !utf8.ValidString(text) {
		return nil, fmt.Errorf("model %q: %w", modelID, ErrInvalidUTF8) // no need to wait for a load
	}
	tok, err := r.tokenizer(ctx, modelID)
	if err != nil {
		return nil, err
	}
	ids, err := tok.EncodeContext(ctx, text, true, maxTokens)
	if err != nil {
		return nil, fmt.Errorf("model %q: %w", modelID, err)
	}
	return ids, nil
}

// Tokenizer returns modelID's tokenizer, loading it on first use.
func (r *Registry) Tokenizer(modelID string) (*Tokenizer, error) {
	return r.tokenizer(context.Background(), modelID)
}

// tokenizer is Tokenizer waiting for a load only until ctx ends.
func (r *Registry) tokenizer(ctx context.Context, modelID string) (*Tokenizer, error) {
	if r.dir == "" {
		return nil, ErrNoModelsDir
	}
	if modelID == "" || !filepath.IsLocal(modelID) || filepath.Clean(modelID) != modelID {
		return nil, fmt.Errorf("%w: model id %q is not a plain relative path", ErrUnknownModel, modelID)
	}
	now := r.clock.Add(1)
	r.mu.RLock()
	e, ok := r.entries[modelID]
	r.mu.RUnlock()
	if ok {
		e.lastUsed.Store(now)
		if err := wait(ctx, e, modelID); err != nil {
			return nil, err
		}
		if e.err == nil || r.opts.Now().Sub(e.loadedAt) < r.opts.RetryFailedAfter {
			return e.tok, e.err
		}
	}

	r.mu.Lock()
	if cur, ok := r.entries[modelID]; ok && cur != e {
		// Another caller started (or finished) a load meanwhile.
		r.mu.Unlock()
		cur.lastUsed.Store(now)
		if err := wait(ctx, cur, modelID); err != nil {
			return nil, err
		}
		return cur.tok, cur.err
	}
	e = &entry{ready: make(chan struct{})}
	e.lastUsed.Store(now)
	r.evictLocked()
	r.entries[modelID] = e
	r.mu.Unlock()

	if ctx.Done() == nil {
		r.fill(modelID, e)
	} else {
		go r.fill(modelID, e)
		if err := wait(ctx, e, modelID); err != nil {
			return nil, err
		}
	}
	return e.tok, e.err
}

// loadDir is LoadDir; tests replace it to make a load panic.
var loadDir = LoadDir

// fill loads modelID into its new entry e and publishes the result. A
// panic while parsing an operator's tokenizer.json becomes e's error
// (ErrMalformed): fill may run on its own goroutine, where a panic would
// end the process instead of one lookup.
func (r *Registry) fill(modelID string, e *entry) {
	func() {
		defer func() {
			if p := recover(); p != nil {
				e.tok, e.err = nil, fmt.Errorf("%w: model %q: loading panicked: %v", ErrMalformed, modelID, p)
			}
		}()
		e.tok, e.err = r.load(modelID)
	}()
	e.loadedAt = r.opts.Now()
	close(e.ready)
	if errors.Is(e.err, ErrUnknownModel) || errors.Is(e.err, ErrNoModelsDir) {
		r.mu.Lock()
		if r.entries[modelID] == e {
			delete(r.entries, modelID)
		}
		r.mu.Unlock()
	}
}

// wait blocks until e is loaded or ctx ends, whichever is first.
func wait(ctx context.Context, e *entry, modelID string) error {
	select {
	case <-e.ready:
		return nil
	default:
	}
	select {
	case <-e.ready:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("model %q: %w (%w): %w", modelID, ErrStopped, ErrLoading, ctx.Err())
	}
}

// load reads one model directory, classifying a missing file.
func (r *Registry) load(modelID string) (*Tokenizer, error) {
	if fi, err := os.Stat(r.dir); err != nil || !fi.IsDir() {
		if err == nil {
			err = errors.New("not a directory")
		}
		return nil, fmt.Errorf("%w: %s: %v", ErrNoModelsDir, r.dir, err)
	}
	dir := filepath.Join(r.dir, modelID)
	if _, err := os.Stat(filepath.Join(dir, tokenizerFile)); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: model %q: no %s in %s", ErrUnknownModel, modelID, tokenizerFile, dir)
	}
	r.loads.Add(1)
	ld := loadDir
	if r.opts.Loader != nil {
		ld = r.opts.Loader
	}
	tok, err := ld(dir, r.opts.Load)
	if err != nil {
		return nil, fmt.Errorf("model %q: %w", modelID, err)
	}
	return tok, nil
}

// evictLocked drops least recently used finished entries until there is
// room for one more. Entries still loading are never dropped (their
// callers are waiting on them), so the bound can be exceeded briefly by
// concurrent first loads. r.mu must be held.
func (r *Registry) evictLocked() {
	for len(r.entries) >= r.opts.MaxModels {
		var victim string
		var oldest uint64
		found := false
		for id, e := range r.entries {
			select {
			case <-e.ready:
			default:
				continue
			}
			if u := e.lastUsed.Load(); !found || u < oldest {
				victim, oldest, found = id, u, true
			}
		}
		if !found {
			return
		}
		delete(r.entries, victim)
	}
}
