package loadgen

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/bench"
	"github.com/inference-cache/inference-cache/chattemplate"
	"github.com/inference-cache/inference-cache/internal/fixtures"
	"github.com/inference-cache/inference-cache/openai"
	"github.com/inference-cache/inference-cache/tokenizer"
)

func qwen3(t *testing.T) (*tokenizer.Tokenizer, *chattemplate.Template) {
	t.Helper()
	dir := fixtures.TokenizerDir(t, "qwen3")
	tok, err := tokenizer.LoadDir(dir, tokenizer.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := chattemplate.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return tok, tpl
}

// The token counts of the package doc rest on this: each word of the
// vocabulary, with its leading space, is one Qwen3 token, and no two
// words are the same.
func TestWords_AreDistinctSingleQwen3Tokens(t *testing.T) {
	tok, _ := qwen3(t)
	seen := map[string]bool{}
	for _, w := range words {
		if seen[w] {
			t.Errorf("word %q twice in the vocabulary", w)
		}
		seen[w] = true
		ids, err := tok.Encode(" "+w, false)
		if err != nil || len(ids) != 1 {
			t.Errorf("%q encodes to %v (%v), want one token", " "+w, ids, err)
		}
	}
}

// The text of a block is fixed for good: a replay against a recorded
// run, or the EVALUATION.md figures, depend on it. The first words of two
// blocks as an independent implementation of math/rand/v2's PCG (128-bit
// LCG, DXSM output; a few lines of Python) draws them from the vocabulary.
func TestBlockText_IsStable(t *testing.T) {
	for _, c := range []struct {
		id   uint64
		want string
	}{
		{0, " including their school with without five three during"},
		{12345, " is this through life other but has into"},
	} {
		if got := BlockText(c.id, 8); got != c.want {
			t.Errorf("BlockText(%d, 8) = %q, want %q", c.id, got, c.want)
		}
		if full := BlockText(c.id, BlockTokens); !strings.HasPrefix(full, c.want) || len(strings.Fields(full)) != BlockTokens {
			t.Errorf("BlockText(%d, %d) does not start with its first 8 words or has %d words", c.id, BlockTokens, len(strings.Fields(full)))
		}
	}
	if BlockText(1, BlockTokens) == BlockText(2, BlockTokens) {
		t.Fatal("blocks 1 and 2 have the same text")
	}
}

// render is the Qwen3 prompt vLLM would prefill for a loadgen request of
// r: the chat template over the one user message, tokenized without added
// special tokens (the template has them).
func render(t *testing.T, tok *tokenizer.Tokenizer, tpl *chattemplate.Template, r *bench.Request) []uint32 {
	t.Helper()
	body, err := json.Marshal(chatBody{Model: "qwen3", Messages: []chatMessage{{Role: "user", Content: PromptText(r)}}, MaxTokens: 1, Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	req, err := openai.DecodeChat(body)
	if err != nil {
		t.Fatal(err)
	}
	text, err := tpl.Render(req, time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	ids, err := tok.Encode(text, false)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// With Qwen3, a record's user message is exactly input_length tokens, and
// two records that share k leading hash ids render prompts that share
// exactly the template's head and k × 512 tokens, however their last
// blocks are cut.
func TestPromptText_Qwen3TokensMatchTheTrace(t *testing.T) {
	tok, tpl := qwen3(t)
	a := bench.Request{InputLength: 1300, HashIDs: []uint64{0, 1, 2}}
	b := bench.Request{InputLength: 2000, HashIDs: []uint64{0, 1, 3, 4}}
	for _, r := range []*bench.Request{&a, &b} {
		ids, err := tok.Encode(PromptText(r), false)
		if err != nil || len(ids) != r.InputLength {
			t.Fatalf("message of %v: %d tokens (%v), want input_length %d", r.HashIDs, len(ids), err, r.InputLength)
		}
	}
	head, err := tok.Encode("<|im_start|>user\n", false)
	if err != nil {
		t.Fatal(err)
	}
	pa, pb := render(t, tok, tpl, &a), render(t, tok, tpl, &b)
	common := 0
	for common < min(len(pa), len(pb)) && pa[common] == pb[common] {
		common++
	}
	if want := len(head) + 2*BlockTokens; common != want {
		t.Fatalf("prompts share %d leading tokens, want the head's %d + 2 blocks = %d", common, len(head), want)
	}
	// A record whose hash ids cover more than its input length (the
	// last block partial) is cut to input_length words.
	if n := len(strings.Fields(PromptText(&bench.Request{InputLength: 600, HashIDs: []uint64{7, 8}}))); n != 600 {
		t.Fatalf("600-token record: %d words", n)
	}
}

// Under another salt the same records keep their shape (input_length
// words, prefixes shared within the run) but share no word-for-word
// prefix with the unsalted run: the second replay of --compare finds
// nothing of the first's in the engines' caches.
func TestSaltedPromptText_SameShapeNoCommonPrefix(t *testing.T) {
	a := bench.Request{InputLength: 1300, HashIDs: []uint64{0, 1, 2}}
	b := bench.Request{InputLength: 2000, HashIDs: []uint64{0, 1, 3, 4}}
	const salt = 1
	sa, sb := SaltedPromptText(&a, salt), SaltedPromptText(&b, salt)
	if SaltedPromptText(&a, 0) != PromptText(&a) {
		t.Fatal("salt 0 is not PromptText's text")
	}
	if n := len(strings.Fields(sa)); n != a.InputLength {
		t.Fatalf("salted message: %d words, want %d", n, a.InputLength)
	}
	wa, wb, plain := strings.Fields(sa), strings.Fields(sb), strings.Fields(PromptText(&a))
	for i := range 2 * BlockTokens {
		if wa[i] != wb[i] {
			t.Fatalf("salted records sharing 2 hash ids differ at word %d", i)
		}
	}
	if wa[2*BlockTokens] == wb[2*BlockTokens] && wa[2*BlockTokens+1] == wb[2*BlockTokens+1] {
		t.Error("salted records still agree past their shared hash ids")
	}
	same := 0
	for same < len(wa) && wa[same] == plain[same] {
		same++
	}
	if same > 3 { // 128 words: a few equal by chance at most
		t.Errorf("salted and unsalted texts share their first %d words", same)
	}
}
