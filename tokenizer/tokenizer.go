package tokenizer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"unicode/utf8"
)

// Defaults for loading.
const (
	// DefaultMaxFileBytes bounds tokenizer.json and tokenizer_config.json:
	// the largest common tokenizer.json files (Gemma, 256k vocab) are
	// about 35 MB; anything far beyond is not a tokenizer.
	DefaultMaxFileBytes = 64 << 20
	// DefaultWordCacheSize is the number of pre-token → ids entries each
	// tokenizer keeps (at most twice that during a generation swap).
	DefaultWordCacheSize = 16384
)

// File names inside a model directory.
const (
	tokenizerFile = "tokenizer.json"
	configFile    = "tokenizer_config.json"
)

// Tokenizer encodes text into token ids exactly as the Hugging Face
// tokenizers library does for the tokenizer.json it was loaded from.
// It is immutable after loading and safe for concurrent use.
type Tokenizer struct {
	raw        *addedMatcher // added tokens matched on the raw text
	normalized *addedMatcher // added tokens matched on normalized text
	norm       normalizer
	pre        preTokenizer
	model      *bpe
	rawBytes   bool // pieces are raw bytes still to be byte-level mapped
	// stream, when set, produces pre's pieces one at a time (see streamer).
	stream  scanner
	special frame // added around the ids when special tokens are requested
}

// LoadOptions tune Load. The zero value means the defaults.
type LoadOptions struct {
	// MaxFileBytes refuses larger files with ErrMalformed; 0 means
	// DefaultMaxFileBytes.
	MaxFileBytes int64
	// WordCacheSize is the capacity of the pre-token cache, in entries
	// (at most 16,777,216: a larger value is taken as that); 0 means
	// DefaultWordCacheSize, negative disables it.
	WordCacheSize int
}

// tokenizerJSON is the part of tokenizer.json that determines ids.
// truncation and padding are ignored on purpose: transformers switches both
// off for a plain encode call, and vLLM never asks for them.
type tokenizerJSON struct {
	AddedTokens   []*addedToken   `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Model         json.RawMessage `json:"model"`
}

// tokenizerConfig is the part of tokenizer_config.json that decides which
// special tokens frame the ids.
type tokenizerConfig struct {
	AddBOS *bool           `json:"add_bos_token"`
	AddEOS *bool           `json:"add_eos_token"`
	BOS    json.RawMessage `json:"bos_token"`
	EOS    json.RawMessage `json:"eos_token"`
}

// LoadDir loads dir/tokenizer.json and, when present,
// dir/tokenizer_config.json.
func LoadDir(dir string, opts LoadOptions) (*Tokenizer, error) {
	cfg := filepath.Join(dir, configFile)
	if _, err := os.Stat(cfg); errors.Is(err, fs.ErrNotExist) {
		cfg = ""
	}
	return Load(filepath.Join(dir, tokenizerFile), cfg, opts)
}

// Load loads a tokenizer.json and an optional tokenizer_config.json (empty
// configPath: none). It refuses, with ErrUnsupported naming the type and
// the file, any component it does not reproduce exactly.
func Load(tokenizerPath, configPath string, opts LoadOptions) (*Tokenizer, error) {
	if opts.MaxFileBytes == 0 {
		opts.MaxFileBytes = DefaultMaxFileBytes
	}
	if opts.WordCacheSize == 0 {
		opts.WordCacheSize = DefaultWordCacheSize
	}
	data, err := readLimited(tokenizerPath, opts.MaxFileBytes)
	if err != nil {
		return nil, err
	}
	var tj tokenizerJSON
	if err := json.Unmarshal(data, &tj); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrMalformed, tokenizerPath, err)
	}
	t := &Tokenizer{}
	if t.model, err = buildBPE(tj.Model, tokenizerPath, opts.WordCacheSize); err != nil {
		return nil, err
	}
	if t.norm, err = buildNormalizer(tj.Normalizer, tokenizerPath); err != nil {
		return nil, err
	}
	var byteLevelSeen bool
	if t.pre, err = buildPreTokenizer(tj.PreTokenizer, tokenizerPath, &byteLevelSeen); err != nil {
		return nil, err
	}
	t.pre, t.rawBytes = lazyByteLevel(t.pre)
	if st, ok := t.pre.(streamer); ok {
		if sc, ok := st.streamScanner(); ok {
			t.stream = sc
		}
	}
	if t.special, err = buildPostProcessor(tj.PostProcessor, tokenizerPath); err != nil {
		return nil, err
	}
	var raw, normalized []*addedToken
	for _, a := range tj.AddedTokens {
		if a.Normalized && t.norm != nil {
			// The reference matches a normalized token by its normalized
			// content (so a Prepend normalizer prepends to it too).
			c := *a
			c.Content = t.norm.normalize(a.Content, nil)
			normalized = append(normalized, &c)
		} else {
			raw = append(raw, a)
		}
	}
	t.raw, t.normalized = newAddedMatcher(raw), newAddedMatcher(normalized)
	if configPath != "" {
		if err := t.applyConfig(configPath, tj.AddedTokens, opts.MaxFileBytes); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// applyConfig lets add_bos_token / add_eos_token in tokenizer_config.json
// override the post-processor, as transformers' Llama-family fast
// tokenizers do by rebuilding their post-processor from these flags.
func (t *Tokenizer) applyConfig(path string, added []*addedToken, limit int64) error {
	data, err := readLimited(path, limit)
	if err != nil {
		return err
	}
	var c tokenizerConfig
	if err := json.Unmarshal(data, &c); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrMalformed, path, err)
	}
	if c.AddBOS == nil && c.AddEOS == nil {
		return nil
	}
	lookup := func(name string, raw json.RawMessage) ([]uint32, error) {
		tok, err := tokenName(raw)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %s: %v", ErrMalformed, path, name, err)
		}
		if tok == "" {
			return nil, fmt.Errorf("%w: %s: add_%s is true but %s is not set", ErrMalformed, path, name, name)
		}
		for _, a := range added {
			if a.Content == tok {
				return []uint32{a.ID}, nil
			}
		}
		if id, ok := t.model.vocab[tok]; ok {
			return []uint32{id}, nil
		}
		return nil, fmt.Errorf("%w: %s: %s %q is not a token", ErrMalformed, path, name, tok)
	}
	var f frame
	if c.AddBOS != nil && *c.AddBOS {
		if f.prefix, err = lookup("bos_token", c.BOS); err != nil {
			return err
		}
	}
	if c.AddEOS != nil && *c.AddEOS {
		if f.suffix, err = lookup("eos_token", c.EOS); err != nil {
			return err
		}
	}
	t.special = f
	return nil
}

// tokenName reads a special-token entry of tokenizer_config.json: a
// string, an AddedToken object with "content", or null ("").
func tokenName(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", err
	}
	return obj.Content, nil
}

// readLimited reads a whole file of at most limit bytes.
func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%w: read %s: %v", ErrMalformed, path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrMalformed, path, limit)
	}
	return data, nil
}

// Encode returns the ids of text. With addSpecialTokens the special tokens
// of the post-processor (or of tokenizer_config.json's add_bos_token /
// add_eos_token, see the package documentation) frame the ids, as
// encode(text, add_special_tokens=True) does in transformers. Added tokens
// written in the text (such as "<|im_start|>") are always recognised.
// Text that is not valid UTF-8 is refused with ErrInvalidUTF8.
func (t *Tokenizer) Encode(text string, addSpecialTokens bool) ([]uint32, error) {
	return t.encode(text, addSpecialTokens, limits{})
}

// EncodeContext is Encode with bounds on the work: it stops with an error
// wrapping ErrStopped (and ctx's error) once ctx ends or its deadline
// passes, and with ErrTooManyTokens as soon as the ids exceed maxTokens
// (0: no cap), rather than encoding the rest of a text whose ids the
// caller cannot use. A stop is noticed within about a millisecond of work,
// even inside one megabyte-long pre-token (see the package documentation
// for the exception), and a context that has ended by the time the ids
// are ready still gives ErrStopped. When it returns ids, they are exactly
// Encode's.
func (t *Tokenizer) EncodeContext(ctx context.Context, text string, addSpecialTokens bool, maxTokens int) ([]uint32, error) {
	lim := newLimits(ctx, maxTokens)
	if lim.check() {
		return nil, lim.err
	}
	return t.encode(text, addSpecialTokens, lim)
}

// EncodePrefix is EncodeContext that also bounds one word's cost: when
// the text holds a BPE word (a pre-token, or a SentencePiece word's part)
// longer than maxWordBytes (0: no bound), it stops there and returns the
// ids of the text before that word, without the closing special tokens,
// together with an error wrapping ErrWordTooLong. Those ids are exactly
// the leading ids of Encode's, so a caller may key a prefix on them. The
// merge loop's memory is about 32 bytes per byte of its word, which is
// what the bound limits; every other error is EncodeContext's, with no
// ids.
func (t *Tokenizer) EncodePrefix(ctx context.Context, text string, addSpecialTokens bool, maxTokens, maxWordBytes int) ([]uint32, error) {
	lim := newLimits(ctx, maxTokens)
	lim.maxWord = maxWordBytes
	if lim.check() {
		return nil, lim.err
	}
	return t.encode(text, addSpecialTokens, lim)
}

// encode is Encode within the limits l (kept in the pooled scratch, so
// that a call does not allocate them).
func (t *Tokenizer) encode(text string, addSpecialTokens bool, l limits) ([]uint32, error) {
	if !utf8.ValidString(text) {
		return nil, ErrInvalidUTF8
	}
	sc := scratchPool.Get().(*scratch)
	sc.limits = l
	lim := &sc.limits
	sc.lim = lim
	defer func() { sc.lim, sc.limits = nil, limits{}; scratchPool.Put(sc) }()
	capacity := len(text)/3 + len(t.special.prefix) + len(t.special.suffix) + 1
	if lim.maxTokens > 0 {
		capacity = min(capacity, lim.maxTokens+1)
	}
	ids := make([]uint32, 0, capacity)
	if addSpecialTokens {
		ids = append(ids, t.special.prefix...)
	}
	var segBuf, subBuf [16]segment
	segs := t.raw.split(segBuf[:0], text, 0, lim)
	if lim.stopped() {
		return lim.fail(ids)
	}
	for _, seg := range segs {
		if seg.tok != nil {
			ids = append(ids, seg.tok.ID)
			continue
		}
		var ok bool
		if ids, ok = t.encodeSegment(ids, seg, subBuf[:0], sc); !ok || lim.check() {
			return lim.fail(ids)
		}
	}
	if addSpecialTokens {
		ids = append(ids, t.special.suffix...)
	}
	// A context that ended during the last stretch of work still ends the
	// call: its caller has stopped waiting for the ids.
	if lim.over(len(ids)) || lim.check() {
		return lim.fail(ids)
	}
	return ids, nil
}

// encodeSegment appends the ids of seg, a stretch of the text between
// special tokens: normalized, split again around added tokens that match
// only normalized text (into subBuf), and each part tokenized. It reports
// false when one of sc's limits stopped the work.
func (t *Tokenizer) encodeSegment(ids []uint32, seg segment, subBuf []segment, sc *scratch) ([]uint32, bool) {
	lim := sc.lim
	s := seg.text
	if t.norm != nil {
		if s = t.norm.normalize(s, lim); lim.stopped() {
			return ids, false
		}
	}
	subs := t.normalized.split(subBuf, s, 0, lim)
	if lim.stopped() {
		return ids, false
	}
	for _, sub := range subs {
		if sub.tok != nil {
			ids = append(ids, sub.tok.ID)
			continue
		}
		p := piece{text: sub.text, atStart: seg.start == 0 && sub.start == 0}
		var ok bool
		if ids, ok = t.encodePiece(ids, p, sc); !ok {
			return ids, false
		}
	}
	return ids, true
}

// encodePiece appends the ids of one piece of normalized text: the whole
// piece through the model without a pre-tokenizer, stretch by stretch
// with a streaming one, else word by word. Each word first spends its
// bytes of the budget. It reports false when one of sc's limits (bytes,
// tokens, the model's own) stopped the work. The model is called inline
// in each loop: this runs once per word.
func (t *Tokenizer) encodePiece(ids []uint32, p piece, sc *scratch) ([]uint32, bool) {
	lim := sc.lim
	if t.pre == nil {
		if lim.spend(len(p.text)) {
			return ids, false
		}
		ids = t.model.tokenize(ids, p.text, t.rawBytes, sc)
		return ids, lim.err == nil && !lim.over(len(ids))
	}
	if t.stream != nil {
		for i := 0; i < len(p.text); {
			e := t.stream(p.text, i)
			if lim.spend(e - i) {
				return ids, false
			}
			ids = t.model.tokenize(ids, p.text[i:e], t.rawBytes, sc)
			if lim.err != nil || lim.over(len(ids)) {
				return ids, false
			}
			i = e
		}
		return ids, true
	}
	if sc.pieces = t.pre.preTokenize(sc.pieces[:0], p, lim); lim.stopped() {
		return ids, false
	}
	for _, q := range sc.pieces {
		if lim.spend(len(q.text)) {
			return ids, false
		}
		ids = t.model.tokenize(ids, q.text, t.rawBytes, sc)
		if lim.err != nil || lim.over(len(ids)) {
			return ids, false
		}
	}
	return ids, true
}

// AddedSpecialTokens returns the ids Encode puts before and after the text
// when addSpecialTokens is set; both may be empty. The slices are copies.
func (t *Tokenizer) AddedSpecialTokens() (prefix, suffix []uint32) {
	return append([]uint32(nil), t.special.prefix...), append([]uint32(nil), t.special.suffix...)
}
