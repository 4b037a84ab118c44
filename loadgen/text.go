package loadgen

import (
	"math/rand/v2"
	"strings"

	"github.com/inference-cache/inference-cache/bench"
)

// words is the vocabulary of the synthesised prompt text: 128 common
// English words, each of which Qwen3's tokenizer encodes, with its leading
// space, as exactly one token (text_test.go checks every one). A byte-level
// BPE pre-tokenizer splits text before " word", so no merge crosses a word
// boundary and n such words are n tokens wherever they stand.
var words = [128]string{
	"the", "of", "and", "to", "in", "is", "was", "for", "on", "with", "as", "by", "at", "from", "that", "this",
	"it", "be", "are", "or", "an", "not", "have", "has", "had", "but", "which", "were", "their", "one", "all", "can",
	"more", "other", "its", "also", "new", "time", "first", "been", "would", "about", "out", "into", "only", "some",
	"such", "two", "when", "made", "may", "these", "after", "people", "used", "over", "most", "state", "part", "city",
	"world", "up", "many", "there", "between", "year", "work", "school", "three", "where", "known", "under", "through",
	"during", "before", "while", "since", "however", "both", "later", "each", "form", "well", "because", "then", "life",
	"group", "same", "day", "major", "including", "family", "early", "several", "system", "number", "found", "four",
	"against", "area", "government", "end", "around", "long", "best", "small", "high", "name", "house", "water", "five",
	"left", "public", "set", "large", "without", "place", "being", "south", "north", "west", "east", "church", "among",
	"old", "team", "land", "war",
}

// BlockTokens is the number of words (tokens, with Qwen3's tokenizer) of
// one trace block: a Mooncake hash id stands for 512 prompt tokens.
const BlockTokens = bench.TraceBlockTokens

// appendBlock appends the first n words (n ≤ BlockTokens) of hash id's
// block to b, each with its leading space. The words are drawn by a PCG
// generator seeded with the id and salt, so a block's text is a function
// of the two and its first n words are the same whatever n; salt 0 is the
// default text, another salt gives every id other words.
func appendBlock(b *strings.Builder, id, salt uint64, n int) {
	r := rand.New(rand.NewPCG(id, 0x6c6f616467656e^salt)) // "loadgen"
	for range n {
		b.WriteByte(' ')
		b.WriteString(words[r.Uint64()&127])
	}
}

// BlockText is the text of hash id's block cut to its first n words
// (0 ≤ n ≤ BlockTokens; out-of-range n is clamped).
func BlockText(id uint64, n int) string {
	var b strings.Builder
	appendBlock(&b, id, 0, min(max(n, 0), BlockTokens))
	return b.String()
}

// PromptText is the user message that stands for trace request r: the
// texts of its hash ids in order, every block whole except the last,
// which is cut so that the message has r.InputLength words in all (one
// block of BlockTokens words per id when the record's hash ids cover more
// than its input length). Requests that share a run of leading hash ids
// share that many leading blocks of text, so their rendered prompts share
// a prefix of BlockTokens tokens per shared id, plus the template's head.
func PromptText(r *bench.Request) string { return SaltedPromptText(r, 0) }

// SaltedPromptText is PromptText with every block's words drawn under
// salt: two runs of the same records under different salts have the same
// shape (lengths, shared prefixes within the run) and no common prefix
// beyond the chat template's head, so one run's cached blocks never serve
// the other's (Config.TextSalt; loadgen --compare, contract §12.8).
func SaltedPromptText(r *bench.Request, salt uint64) string {
	var b strings.Builder
	left := r.InputLength
	b.Grow(left * 7)
	for _, id := range r.HashIDs {
		if left <= 0 {
			break
		}
		n := min(left, BlockTokens)
		appendBlock(&b, id, salt, n)
		left -= n
	}
	return b.String()
}
