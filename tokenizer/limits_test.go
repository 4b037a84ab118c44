package tokenizer

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/text/unicode/norm"

	"github.com/inference-cache/inference-cache/internal/fixtures"
)

// Within its limits EncodeContext returns exactly Encode's ids (the golden
// ones); one token under the count it is ErrTooManyTokens.
func TestEncodeContext_SameIDsWithinLimitsAndRefusesOneTokenLess(t *testing.T) {
	g := loadGolden(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	for _, gt := range g.Tokenizers {
		t.Run(gt.Name, func(t *testing.T) {
			tok := sharedTokenizer(t, gt.Name)
			for i, c := range gt.Cases {
				got, err := tok.EncodeContext(ctx, c.Text, c.AddSpecialTokens, len(c.IDs))
				if err != nil {
					t.Fatalf("case %d: %v", i, err)
				}
				if len(got) != 0 || len(c.IDs) != 0 {
					if d := cmp.Diff(c.IDs, got); d != "" {
						t.Fatalf("case %d %q: ids differ (-want +got):\n%s", i, c.Text, d)
					}
				}
				if len(c.IDs) > 1 {
					if _, err := tok.EncodeContext(ctx, c.Text, c.AddSpecialTokens, len(c.IDs)-1); !errors.Is(err, ErrTooManyTokens) {
						t.Fatalf("case %d with maxTokens %d: err %v, want ErrTooManyTokens", i, len(c.IDs)-1, err)
					}
				}
			}
		})
	}
}

// pathological returns 1 MiB prompts that each stress one stage of
// encoding: one megabyte-long pre-token (merge loop), a million one-digit
// pieces (pre-tokenizer), decomposed text (NFC), added tokens (their
// split), and for the SentencePiece model a text without any "▁".
func pathological() map[string]string {
	rnd := rand.New(rand.NewPCG(1, 2))
	var letters strings.Builder
	for letters.Len() < 1<<20 {
		letters.WriteByte("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"[rnd.IntN(52)])
	}
	return map[string]string{
		"spaces":       strings.Repeat(" ", 1<<20),
		"digits":       strings.Repeat("1", 1<<20),
		"one word":     strings.Repeat("internationalization", 1<<20/20),
		"random word":  letters.String(),
		"decomposed":   strings.Repeat("e\u0301", 1<<20/3),
		"added tokens": strings.Repeat("<|im_start|>", 1<<20/12),
		"newlines":     strings.Repeat("\n", 1<<20),
	}
}

// EncodeContext stops once its context ends, wherever the work is: a text
// that takes from tens of milliseconds to a second to encode returns
// ErrStopped (wrapping the context's error) within a few milliseconds of
// the deadline or the cancellation.
func TestEncodeContext_StopsWhenTheContextEnds(t *testing.T) {
	if testing.Short() {
		t.Skip("loads the reference tokenizers")
	}
	// The error shows the encoding stopped on the context (run to its
	// end, it would return ids); the slack only catches a stop that waits
	// for a long stretch of work, and is wide because CI runs packages in
	// parallel on 2 cores under the race detector.
	const after = 5 * time.Millisecond
	slack := 2 * time.Second
	if raceEnabled {
		slack = 10 * time.Second
	}
	texts := pathological()
	for _, model := range []string{"qwen3", "mistral-like"} {
		tok := sharedTokenizer(t, model)
		for name, text := range texts {
			for _, how := range []string{"deadline", "cancel"} {
				t.Run(model+"/"+name+"/"+how, func(t *testing.T) {
					var ctx context.Context
					var cancel context.CancelFunc
					want := context.DeadlineExceeded
					if how == "deadline" {
						ctx, cancel = context.WithTimeout(context.Background(), after)
					} else {
						ctx, cancel = context.WithCancel(context.Background())
						time.AfterFunc(after, cancel)
						want = context.Canceled
					}
					defer cancel()
					start := time.Now()
					ids, err := tok.EncodeContext(ctx, text, true, 0)
					took := time.Since(start)
					if !errors.Is(err, ErrStopped) || !errors.Is(err, want) || ids != nil {
						t.Fatalf("%d ids, err %v after %v; want ErrStopped and %v", len(ids), err, took, want)
					}
					if took > after+slack {
						t.Errorf("stopped %v after the start, want within %v of the %v %s", took, slack, after, how)
					}
				})
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := sharedTokenizer(t, "qwen3").EncodeContext(ctx, "hello", false, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("already canceled context: err %v", err)
	}
}

// A text that tokenizes to more ids than maxTokens stops with
// ErrTooManyTokens as soon as the ids pass the cap (checked after each
// pre-token, or each part of a SentencePiece word): a million one-digit
// pieces capped at 1,000 tokens cost a small fraction of encoding them all.
func TestEncodeContext_StopsOnceOverMaxTokens(t *testing.T) {
	if testing.Short() {
		t.Skip("loads the reference tokenizers")
	}
	for _, c := range []struct{ model, text string }{
		{"qwen3", strings.Repeat("1", 1<<20)},                // a million pieces
		{"qwen3", strings.Repeat("<|im_start|>x", 1<<20/13)}, // added tokens
		{"mistral-like", strings.Repeat("▁a", 1<<20/4)},      // one word cut at every "▁"
	} {
		tok := sharedTokenizer(t, c.model)
		full := time.Now()
		all, err := tok.Encode(c.text, true)
		if err != nil || len(all) < 2000 {
			t.Fatalf("%s: %d ids, %v", c.model, len(all), err)
		}
		fullTook := time.Since(full)
		start := time.Now()
		ids, err := tok.EncodeContext(context.Background(), c.text, true, 1000)
		took := time.Since(start)
		if !errors.Is(err, ErrTooManyTokens) || ids != nil {
			t.Fatalf("%s: %d ids, err %v; want ErrTooManyTokens", c.model, len(ids), err)
		}
		if took > fullTook/2 {
			t.Errorf("%s: capped encode took %v, the whole text %v: it did not stop early", c.model, took, fullTook)
		}
	}
}

// A stopped encode leaves nothing half-done behind: the word cache holds
// only complete words, so the same text encodes to the same ids afterwards.
func TestEncodeContext_StopLeavesCacheConsistent(t *testing.T) {
	tok := sharedTokenizer(t, "qwen3")
	text := strings.Repeat("internationalization ", 200) + strings.Repeat("x", 1<<18)
	want, err := loadPrivate(t, "qwen3").Encode(text, true)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if _, err := tok.EncodeContext(ctx, text, true, 0); !errors.Is(err, ErrStopped) {
		t.Fatalf("err %v, want ErrStopped", err)
	}
	got, err := tok.Encode(text, true)
	if err != nil || !cmp.Equal(want, got) {
		t.Fatalf("ids after a stopped encode differ from a fresh tokenizer's (err %v)", err)
	}
}

// loadPrivate loads a private copy of a reference tokenizer without a word
// cache, so every word goes through the merge loop.
func loadPrivate(t testing.TB, name string) *Tokenizer {
	t.Helper()
	tok, err := LoadDir(fixtures.TokenizerDir(t, name), LoadOptions{WordCacheSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// The rankQueue (long words) and the mergeHeap (short ones) must give the
// same ids for every word: each model encodes the golden texts and long
// synthetic words once with every word through the heap and once with
// every word through the rankQueue.
func TestMerge_RankQueueGivesHeapIDs(t *testing.T) {
	if testing.Short() {
		t.Skip("loads the reference tokenizers")
	}
	g := loadGolden(t)
	rnd := rand.New(rand.NewPCG(3, 4))
	randomText := func(n int, alphabet []rune) string {
		var b strings.Builder
		for b.Len() < n {
			b.WriteRune(alphabet[rnd.IntN(len(alphabet))])
		}
		return b.String()
	}
	synthetic := []string{
		strings.Repeat(" ", 65), strings.Repeat(" ", 4097), strings.Repeat("\n", 300) + "x", strings.Repeat(" \t", 700),
		strings.Repeat("a", 1000), strings.Repeat("ab", 999), strings.Repeat("abc", 777), strings.Repeat("9", 3000),
		strings.Repeat("internationalization", 100), strings.Repeat("的是不了人", 300), strings.Repeat("▁▁a", 500),
		randomText(5000, []rune("abcdefghij")), randomText(3000, []rune("aab ")), randomText(2000, []rune("éàü中文▁ \n")),
		strings.Repeat("=", 2048) + strings.Repeat("-", 2048),
	}
	for _, name := range []string{"qwen3", "mistral-like"} {
		t.Run(name, func(t *testing.T) {
			tok := loadPrivate(t, name)
			texts := append([]string(nil), synthetic...)
			for _, gt := range g.Tokenizers {
				if gt.Name == name {
					for _, c := range gt.Cases {
						texts = append(texts, c.Text)
					}
				}
			}
			for i, text := range texts {
				tok.model.longWord = math.MaxInt
				heap, err1 := tok.Encode(text, false)
				tok.model.longWord = 0
				rq, err2 := tok.Encode(text, false)
				if err1 != nil || err2 != nil {
					t.Fatalf("text %d: %v, %v", i, err1, err2)
				}
				if d := cmp.Diff(heap, rq); d != "" {
					t.Fatalf("text %d (%.40q…): rankQueue ids differ from the heap's (-heap +rankQueue):\n%s", i, text, d)
				}
			}
		})
	}
}

// rankQueue pops in mergeHeap's order (rank, then position) for any order
// of pushes and pops, including positions pushed out of order, repeated and
// pushed to a rank while it is being popped.
func TestRankQueue_PopsInHeapOrder(t *testing.T) {
	rnd := rand.New(rand.NewPCG(5, 6))
	rule := func(rank uint32) (left, right, id uint32) { return rank * 3, rank*3 + 1, rank*3 + 2 }
	var q rankQueue
	for round := range 2000 {
		q.reset()
		var h mergeHeap
		ranks := 1 + rnd.IntN(8)
		maxPos := 1 + rnd.IntN(50)
		for step := range 200 {
			if rnd.IntN(3) > 0 || len(h) == 0 {
				r := uint32(rnd.IntN(ranks))
				pos := int32(rnd.IntN(maxPos))
				if rnd.IntN(2) == 0 {
					pos = int32(step) // mostly increasing, as in a long run
				}
				l, rt, id := rule(r)
				it := mergeItem{rank: r, pos: pos, id: id, left: l, right: rt}
				h.push(it)
				q.push(it)
				continue
			}
			want := h.pop()
			got := q.pop()
			if got != (mergeTop{pos: want.pos, id: want.id, left: want.left, right: want.right}) {
				t.Fatalf("round %d step %d: popped %+v, the heap %+v", round, step, got, want)
			}
			if (len(h) == 0) != (len(q.ranks) == 0) {
				t.Fatalf("round %d step %d: heap has %d left, rankQueue %d ranks", round, step, len(h), len(q.ranks))
			}
		}
	}
}

// Long segments are normalized chunk by chunk (to look at the limits
// between chunks) with exactly the result of one call, including
// combining sequences, Hangul and runs of non-starters across chunks.
func TestUnicodeForm_ChunkedEqualsWhole(t *testing.T) {
	rnd := rand.New(rand.NewPCG(7, 8))
	alphabet := []rune("ae \u0301\u0300\u0327\u0308\u1100\u1161\u11a8가ﬁ①Å\u212b\u0345\u0323\u05b0한")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, f := range []norm.Form{norm.NFC, norm.NFD, norm.NFKC, norm.NFKD} {
		for i := range 20 {
			var b strings.Builder
			b.WriteString(strings.Repeat("x", rnd.IntN(normChunk+10))) // an already normal prefix
			for b.Len() < 3*normChunk {
				if rnd.IntN(50) == 0 {
					b.WriteString(strings.Repeat("\u0301", rnd.IntN(40))) // a long non-starter run
				}
				b.WriteRune(alphabet[rnd.IntN(len(alphabet))])
			}
			s := b.String()
			lim := newLimits(ctx, 0)
			if got, want := (unicodeForm{f}).normalize(s, &lim), f.String(s); got != want {
				t.Fatalf("form %v text %d: chunked normalization differs from one call", f, i)
			}
		}
	}
}

// A first use loads the tokenizer (a parse of tens of MB); EncodeContext
// waits for it only until its context ends, and the load completes for the
// callers after it.
func TestRegistry_EncodeContextDoesNotWaitPastItsContextForALoad(t *testing.T) {
	if testing.Short() {
		t.Skip("loads the reference tokenizers")
	}
	reg := NewRegistry(fixtures.ModelsDir(t), RegistryOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := reg.EncodeContext(ctx, "qwen3", "hello", 0)
	if !errors.Is(err, ErrStopped) || !errors.Is(err, ErrLoading) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want ErrStopped and ErrLoading while loading", err)
	}
	if took := time.Since(start); took > 200*time.Millisecond {
		t.Errorf("returned after %v", took)
	}
	ids, err := reg.EncodeContext(context.Background(), "qwen3", "hello", 0)
	if err != nil || len(ids) == 0 || reg.Loads() != 1 {
		t.Fatalf("after the load: %v, %v, %d loads", ids, err, reg.Loads())
	}
	if _, err := reg.EncodeContext(ctx, "qwen3", "bad \xff", 0); !errors.Is(err, ErrInvalidUTF8) {
		t.Errorf("invalid UTF-8: %v", err)
	}
}

// A load that panics (a parser bug meeting an operator's tokenizer.json)
// runs on its own goroutine when the caller has a deadline: it must
// become the model's error, not end the process.
func TestRegistry_LoadPanicIsAnError(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "m"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "m", "tokenizer.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := loadDir
	loadDir = func(string, LoadOptions) (*Tokenizer, error) { panic("parser bug") }
	defer func() { loadDir = old }()
	reg := NewRegistry(dir, RegistryOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := reg.EncodeContext(ctx, "m", "hello", 0)
	if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "parser bug") {
		t.Fatalf("err %v, want ErrMalformed naming the panic", err)
	}
}

// EncodePrefix stops at a word longer than its bound and returns the ids
// of the text before it, which are Encode's leading ids; a word at the
// bound is merged as Encode merges it.
func TestEncodePrefix_StopsBeforeAWordOverTheBound(t *testing.T) {
	if testing.Short() {
		t.Skip("loads the reference tokenizers")
	}
	const bound = 4096
	for _, c := range []struct{ model, before, word string }{
		// Qwen's pattern: " aaa…" is one pre-token, "hello" the one before.
		{"qwen3", "hello", " " + strings.Repeat("a", bound)},
		// SentencePiece: "▁hello" is one part, "▁aaa…" the next.
		{"mistral-like", "hello", " " + strings.Repeat("a", bound)},
	} {
		tok := sharedTokenizer(t, c.model)
		want, err := tok.Encode(c.before, true)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := tok.EncodePrefix(context.Background(), c.before+c.word, true, 0, bound)
		if !errors.Is(err, ErrWordTooLong) {
			t.Fatalf("%s: err %v, want ErrWordTooLong", c.model, err)
		}
		_, suffix := tok.AddedSpecialTokens()
		if !slices.Equal(ids, want[:len(want)-len(suffix)]) {
			t.Errorf("%s: prefix ids %v, want Encode(%q)'s %v", c.model, ids, c.before, want)
		}
		atBound := c.before + c.word[:bound-2] // "▁" is 3 bytes
		full, err := tok.Encode(atBound, true)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := tok.EncodePrefix(context.Background(), atBound, true, 0, bound); err != nil || !slices.Equal(got, full) {
			t.Errorf("%s: a word at the bound: %d ids, err %v; want Encode's %d ids", c.model, len(got), err, len(full))
		}
	}
}
