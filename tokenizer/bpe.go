package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// bpe is the BPE model of tokenizer.json: a vocabulary, ranked merges over
// pairs of ids, and the options of the reference implementation that
// change ids (unk handling, byte fallback, subword prefix/suffix,
// ignore_merges).
type bpe struct {
	vocab map[string]uint32
	// runeIDs caches vocab lookups of single-rune strings, the starting
	// symbols of almost every word.
	runeIDs map[rune]uint32
	// merges maps a pair of ids to its rank and the id of the merged
	// token.
	merges *mergeTable

	unk          *uint32
	fuseUnk      bool
	byteFallback bool
	byteIDs      [256]uint32 // <0xXX> tokens, valid when hasByteIDs[b]
	hasByteIDs   [256]bool
	// byteLevelIDs holds the id of byteToRune[b] for every byte b, valid
	// when byteLevelOK: the starting symbols of a raw-bytes piece.
	byteLevelIDs [256]uint32
	byteLevelOK  bool
	// splitAtMeta is set when no vocabulary token has a "▁" after another
	// character (true of SentencePiece vocabularies, whose pieces are
	// split at whitespace). No merge can then produce a token spanning
	// the boundary before such a "▁", so a word can be cut there and its
	// parts merged (and cached) separately with identical results. This
	// matters for models without a pre-tokenizer, where the word is the
	// whole prompt.
	splitAtMeta  bool
	prefix       string // continuing_subword_prefix
	suffix       string // end_of_word_suffix
	ignoreMerges bool
	// longWord is the number of symbols above which a word is merged with
	// a rankQueue instead of a mergeHeap (defaultLongWord; tests lower it
	// to run every word through the rankQueue).
	longWord int

	cache *wordCache
}

// mergeRule is the value side of bpe.merges.
type mergeRule struct {
	rank uint32
	id   uint32
}

// bpeConfig is the "model" object of tokenizer.json.
type bpeConfig struct {
	Type         string            `json:"type"`
	Dropout      *float64          `json:"dropout"`
	UnkToken     *string           `json:"unk_token"`
	Prefix       *string           `json:"continuing_subword_prefix"`
	Suffix       *string           `json:"end_of_word_suffix"`
	FuseUnk      bool              `json:"fuse_unk"`
	ByteFallback bool              `json:"byte_fallback"`
	IgnoreMerges bool              `json:"ignore_merges"`
	Vocab        map[string]uint32 `json:"vocab"`
	Merges       json.RawMessage   `json:"merges"`
}

// buildBPE checks and compiles the model object.
func buildBPE(raw json.RawMessage, where string, cacheWords int) (*bpe, error) {
	var c bpeConfig
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("%w: %s: model: %v", ErrMalformed, where, err)
	}
	if c.Type == "" && c.Merges != nil {
		c.Type = "BPE" // files from old versions of the library omit it
	}
	if c.Type != "BPE" {
		return nil, fmt.Errorf("%w: %s: model type %q (only BPE is implemented)", ErrUnsupported, where, c.Type)
	}
	if c.Dropout != nil && *c.Dropout > 0 {
		return nil, fmt.Errorf("%w: %s: BPE dropout %v makes ids random", ErrUnsupported, where, *c.Dropout)
	}
	if len(c.Vocab) == 0 {
		return nil, fmt.Errorf("%w: %s: BPE model with an empty vocab", ErrMalformed, where)
	}
	m := &bpe{
		vocab:        c.Vocab,
		runeIDs:      make(map[rune]uint32),
		fuseUnk:      c.FuseUnk,
		byteFallback: c.ByteFallback,
		ignoreMerges: c.IgnoreMerges,
		cache:        newWordCache(cacheWords),
		longWord:     defaultLongWord,
	}
	if c.Prefix != nil {
		m.prefix = *c.Prefix
	}
	if c.Suffix != nil {
		m.suffix = *c.Suffix
	}
	for tok, id := range c.Vocab {
		if r, w := utf8.DecodeRuneInString(tok); w == len(tok) && r != utf8.RuneError {
			m.runeIDs[r] = id
		}
	}
	m.byteLevelOK = m.prefix == "" && m.suffix == "" && !m.ignoreMerges
	for b, r := range byteToRune {
		id, ok := m.runeIDs[r]
		m.byteLevelIDs[b] = id
		m.byteLevelOK = m.byteLevelOK && ok
	}
	if _, ok := m.runeIDs[meta]; ok && m.prefix == "" && m.suffix == "" && !m.ignoreMerges {
		m.splitAtMeta = true
		for tok := range c.Vocab {
			if strings.ContainsRune(strings.TrimLeft(tok, metaString), meta) {
				m.splitAtMeta = false
				break
			}
		}
	}
	if c.UnkToken != nil {
		id, ok := c.Vocab[*c.UnkToken]
		if !ok {
			return nil, fmt.Errorf("%w: %s: unk_token %q is not in the vocab", ErrMalformed, where, *c.UnkToken)
		}
		m.unk = &id
	}
	for b := 0; b < 256; b++ {
		m.byteIDs[b], m.hasByteIDs[b] = c.Vocab[fmt.Sprintf("<0x%02X>", b)]
	}
	for tok, id := range c.Vocab {
		if id == ^uint32(0) {
			return nil, fmt.Errorf("%w: %s: token %q has id %d", ErrMalformed, where, tok, id)
		}
	}
	if err := m.loadMerges(c.Merges, where); err != nil {
		return nil, err
	}
	return m, nil
}

// loadMerges reads merges in either of the two layouts the library writes:
// "a b" strings or ["a", "b"] pairs. Rank is the position in the list.
func (m *bpe) loadMerges(raw json.RawMessage, where string) error {
	if isNull(raw) {
		m.merges = newMergeTable(0)
		return nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return fmt.Errorf("%w: %s: merges: %v", ErrMalformed, where, err)
	}
	m.merges = newMergeTable(len(list))
	for rank, item := range list {
		var a, b string
		if len(item) > 0 && item[0] == '"' {
			var s string
			if err := json.Unmarshal(item, &s); err != nil {
				return fmt.Errorf("%w: %s: merge %d: %v", ErrMalformed, where, rank, err)
			}
			parts := strings.Split(s, " ")
			if len(parts) != 2 {
				return fmt.Errorf("%w: %s: merge %d %q is not two tokens", ErrMalformed, where, rank, s)
			}
			a, b = parts[0], parts[1]
		} else {
			var pair []string
			if err := json.Unmarshal(item, &pair); err != nil || len(pair) != 2 {
				return fmt.Errorf("%w: %s: merge %d is not a pair of strings", ErrMalformed, where, rank)
			}
			a, b = pair[0], pair[1]
		}
		aID, okA := m.vocab[a]
		bID, okB := m.vocab[b]
		merged := a + strings.TrimPrefix(b, m.prefix)
		if m.prefix != "" && !strings.HasPrefix(b, m.prefix) {
			merged = a + b
		}
		nID, okN := m.vocab[merged]
		if !okA || !okB || !okN {
			return fmt.Errorf("%w: %s: merge %d (%q, %q) uses a token missing from the vocab", ErrMalformed, where, rank, a, b)
		}
		m.merges.put(pairKey(aID, bID), mergeRule{rank: uint32(rank), id: nID})
	}
	return nil
}

// scratch holds the per-call buffers of the merge loop so that encoding
// does not allocate per word. Encode takes one from scratchPool.
type scratch struct {
	syms   []symbol
	heap   mergeHeap
	rq     rankQueue
	pieces []piece
	lim    *limits // the bounds of the current call (&limits inside encode)
	limits limits
}

// scratchPool recycles scratch buffers between Encode calls.
var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// meta is SentencePiece's whitespace marker.
const (
	meta       = '\u2581'
	metaString = string(meta)
)

// tokenize appends the ids of one pre-tokenized piece to dst. raw says w
// is raw bytes still to be mapped by byteToRune.
func (m *bpe) tokenize(dst []uint32, w string, raw bool, sc *scratch) []uint32 {
	if w == "" {
		return dst
	}
	if raw && !m.byteLevelOK {
		w, raw = byteLevelEncode(w), false
	}
	if raw {
		return m.tokenizeRaw(dst, w, sc)
	}
	if m.ignoreMerges {
		if id, ok := m.vocab[w]; ok {
			return append(dst, id)
		}
	}
	if m.splitAtMeta && !raw && len(w) > maxCachedWordBytes/4 {
		// Cut before every "▁" that follows another character.
		start := 0
		for i := 1; i < len(w); i++ {
			if w[i] == metaString[0] && strings.HasPrefix(w[i:], metaString) && w[i-1] != metaString[len(metaString)-1] {
				dst = m.tokenizePart(dst, w[start:i], sc)
				if sc.lim.spend(i-start) || sc.lim.over(len(dst)) {
					return dst
				}
				start = i
			}
		}
		return m.tokenizePart(dst, w[start:], sc)
	}
	return m.tokenizePart(dst, w, sc)
}

// tokenizePart is tokenize for a piece that is not raw bytes and needs no
// further cutting.
func (m *bpe) tokenizePart(dst []uint32, w string, sc *scratch) []uint32 {
	if out, ok := m.cache.appendCached(dst, w); ok {
		return out
	}
	if sc.lim.wordTooLong(len(w)) {
		return dst
	}
	start := len(dst)
	dst = m.mergeWord(dst, w, sc)
	if !sc.lim.stopped() {
		m.cache.put(w, dst[start:])
	}
	return dst
}

// tokenizeRaw is tokenize for a piece of raw bytes on a byte-level model.
func (m *bpe) tokenizeRaw(dst []uint32, w string, sc *scratch) []uint32 {
	if out, ok := m.cache.appendCached(dst, w); ok {
		return out
	}
	if sc.lim.wordTooLong(len(w)) {
		return dst
	}
	start := len(dst)
	syms := growSyms(sc.syms, len(w))
	for i := 0; i < len(w); i++ {
		syms = append(syms, symbol{id: m.byteLevelIDs[w[i]], prev: int32(i) - 1, next: int32(i) + 1})
	}
	dst = m.merge(dst, syms, sc)
	if !sc.lim.stopped() {
		m.cache.put(w, dst[start:])
	}
	return dst
}

// growSyms returns syms emptied, with room for n symbols: a long word
// then costs one allocation instead of a series of doublings and copies.
func growSyms(syms []symbol, n int) []symbol {
	if cap(syms) < n {
		return make([]symbol, 0, n)
	}
	return syms[:0]
}

// maxPooledSymbols bounds the scratch buffers kept for the next call
// (in symbols or queue entries): a megabyte-long word's buffers are
// garbage once it is merged, not a pooled cost of every later call.
const maxPooledSymbols = 1 << 16

// keepable is s emptied for reuse, or nil when it is larger than the pool
// keeps.
func keepable[T any](s []T) []T {
	if cap(s) > maxPooledSymbols {
		return nil
	}
	return s[:0]
}

// symbol is one node of the doubly linked list a word is merged on.
type symbol struct {
	id         uint32
	prev, next int32
	gone       bool
}

// mergeItem is a candidate merge of symbols[pos] (id left) with its
// successor (id right) into id.
type mergeItem struct {
	rank        uint32
	pos         int32
	id          uint32
	left, right uint32
}

// mergeWord applies the merges to w with a priority queue ordered by
// (rank, position), as the reference does: O(n log n) in the number of
// characters, without rebuilding strings. It appends the ids to dst.
func (m *bpe) mergeWord(dst []uint32, w string, sc *scratch) []uint32 {
	syms := growSyms(sc.syms, len(w)) // a rune is at least a byte; byte fallback gives a symbol per byte
	add := func(id uint32) {
		syms = append(syms, symbol{id: id, prev: int32(len(syms)) - 1, next: int32(len(syms)) + 1})
	}
	var pendingUnk bool
	spent := 0
	for i, r := range w {
		if i-spent >= checkEvery {
			if sc.lim.spend(i - spent) {
				return dst
			}
			spent = i
		}
		size := utf8.RuneLen(r)
		if r == utf8.RuneError {
			_, size = utf8.DecodeRuneInString(w[i:])
		}
		first, last := i == 0, i+size == len(w)
		var id uint32
		var ok bool
		s := ""
		if (first || m.prefix == "") && (!last || m.suffix == "") {
			id, ok = m.runeIDs[r]
			if !ok {
				s = w[i : i+size]
			}
		} else {
			s = w[i : i+size]
			if !first {
				s = m.prefix + s
			}
			if last {
				s += m.suffix
			}
			id, ok = m.vocab[s]
		}
		if ok {
			if pendingUnk {
				add(*m.unk)
				pendingUnk = false
			}
			add(id)
			continue
		}
		if m.byteFallback {
			all := true
			for k := 0; k < len(s); k++ {
				all = all && m.hasByteIDs[s[k]]
			}
			if all {
				for k := 0; k < len(s); k++ {
					add(m.byteIDs[s[k]])
				}
				continue
			}
		}
		if m.unk == nil {
			continue // the reference drops the character
		}
		if pendingUnk && !m.fuseUnk {
			add(*m.unk)
		}
		pendingUnk = true
	}
	if pendingUnk {
		add(*m.unk)
	}
	return m.merge(dst, syms, sc)
}

// merge runs the merge loop over syms (linked in order; the last next is
// fixed here) and appends the resulting ids to dst. syms is kept as
// sc.syms for reuse. It spends one unit of sc.lim per merge step and
// returns early, with dst incomplete, once sc.lim says stop.
func (m *bpe) merge(dst []uint32, syms []symbol, sc *scratch) []uint32 {
	defer func() { sc.syms = keepable(syms) }()
	if len(syms) == 0 {
		return dst
	}
	syms[len(syms)-1].next = -1
	if len(syms) == 1 {
		return append(dst, syms[0].id)
	}

	q := mergeQueue{h: sc.heap[:0]}
	if len(syms) > m.longWord {
		q.rq = &sc.rq
		q.rq.reset()
	}
	defer func() {
		sc.heap = keepable(q.h)
		if q.rq != nil && len(syms) > maxPooledSymbols {
			sc.rq = rankQueue{} // its buckets grew with the word: let them go
		}
	}()
	for i := 0; i+1 < len(syms); i++ {
		if i%checkEvery == checkEvery-1 && sc.lim.spend(checkEvery) {
			return dst
		}
		if r, ok := m.merges.get(syms[i].id, syms[i+1].id); ok {
			q.push(mergeItem{rank: r.rank, pos: int32(i), id: r.id, left: syms[i].id, right: syms[i+1].id})
		}
	}
	steps := 0
	for !q.empty() {
		if steps++; steps == checkEvery {
			steps = 0
			if sc.lim.spend(checkEvery) {
				return dst
			}
		}
		top := q.pop()
		cur := &syms[top.pos]
		if cur.gone || cur.next < 0 {
			continue
		}
		nextPos := cur.next
		right := syms[nextPos]
		// Skip entries made stale by an earlier merge. Like the reference,
		// an entry stays valid when the pair now there merges into the same
		// id; the map lookup is needed only when the pair changed.
		if cur.id != top.left || right.id != top.right {
			if r, ok := m.merges.get(cur.id, right.id); !ok || r.id != top.id {
				continue
			}
		}
		cur.id = top.id
		cur.next = right.next
		syms[nextPos].gone = true
		if right.next >= 0 {
			syms[right.next].prev = top.pos
		}
		if cur.prev >= 0 {
			prev := syms[cur.prev]
			if r, ok := m.merges.get(prev.id, cur.id); ok {
				q.push(mergeItem{rank: r.rank, pos: cur.prev, id: r.id, left: prev.id, right: cur.id})
			}
		}
		if cur.next >= 0 {
			if r, ok := m.merges.get(cur.id, syms[cur.next].id); ok {
				q.push(mergeItem{rank: r.rank, pos: top.pos, id: r.id, left: cur.id, right: syms[cur.next].id})
			}
		}
	}
	for i := int32(0); i >= 0; i = syms[i].next {
		dst = append(dst, syms[i].id)
	}
	return dst
}
