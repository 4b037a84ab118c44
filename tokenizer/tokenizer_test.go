package tokenizer

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// tinyDir is the hand-made SentencePiece-style fixture.
var tinyDir = filepath.Join("testdata", "tiny-sp")

func loadTiny(t *testing.T) *Tokenizer {
	t.Helper()
	tok, err := LoadDir(tinyDir, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestEncode_SentencePieceRules covers merges, byte fallback, fused unk,
// per-segment prepend and the add_bos/add_eos override on the tiny fixture.
func TestEncode_SentencePieceRules(t *testing.T) {
	tok := loadTiny(t)
	for _, c := range []struct {
		text    string
		special bool
		want    []uint32
	}{
		{"hello", false, []uint32{14}},
		{"hello", true, []uint32{1, 14, 2}},
		{"", true, []uint32{1, 2}},
		{"", false, nil},
		{"hello é", false, []uint32{14, 5, 3, 4}}, // é → <0xC3><0xA9>
		{"hex", false, []uint32{12, 0}},           // x has no byte token → unk
		{"xxx", false, []uint32{5, 0}},            // unks fuse
		{"<s>hello</s>", false, []uint32{1, 14, 2}},
		{"hello<s>hello", false, []uint32{14, 1, 14}}, // each segment gets its ▁
	} {
		got, err := tok.Encode(c.text, c.special)
		if err != nil {
			t.Fatalf("%q: %v", c.text, err)
		}
		if diff := cmp.Diff(c.want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("Encode(%q, %v) (-want +got):\n%s", c.text, c.special, diff)
		}
	}
}

// TestEncode_WithoutConfigUsesPostProcessor: without tokenizer_config.json
// the TemplateProcessing post-processor decides (BOS only).
func TestEncode_WithoutConfigUsesPostProcessor(t *testing.T) {
	tok, err := Load(filepath.Join(tinyDir, "tokenizer.json"), "", LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := tok.Encode("hello", true)
	if diff := cmp.Diff([]uint32{1, 14}, got); diff != "" {
		t.Error(diff)
	}
	pre, suf := tok.AddedSpecialTokens()
	if diff := cmp.Diff([]uint32{1}, pre); diff != "" || len(suf) != 0 {
		t.Errorf("AddedSpecialTokens = %v, %v", pre, suf)
	}
}

// TestEncode_RefusesInvalidUTF8 checks the sentinel.
func TestEncode_RefusesInvalidUTF8(t *testing.T) {
	if _, err := loadTiny(t).Encode("a\xffb", false); !errors.Is(err, ErrInvalidUTF8) {
		t.Fatalf("err = %v, want ErrInvalidUTF8", err)
	}
}

// writeVariant writes the tiny fixture with edit applied to its JSON into a
// fresh directory and returns the directory.
func writeVariant(t *testing.T, edit func(m map[string]any)) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(tinyDir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestLoad_RefusesUnsupportedTypes checks that every component this package
// does not reproduce is refused with ErrUnsupported, naming the type and
// the file.
func TestLoad_RefusesUnsupportedTypes(t *testing.T) {
	model := func(k string, v any) func(map[string]any) {
		return func(m map[string]any) { m["model"].(map[string]any)[k] = v }
	}
	set := func(k string, v any) func(map[string]any) {
		return func(m map[string]any) { m[k] = v }
	}
	obj := func(s string) any {
		var v any
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			panic(err)
		}
		return v
	}
	for _, c := range []struct {
		name, mention string
		edit          func(map[string]any)
	}{
		{"WordPiece model", `"WordPiece"`, model("type", "WordPiece")},
		{"Unigram model", `"Unigram"`, model("type", "Unigram")},
		{"BPE dropout", "dropout", model("dropout", 0.1)},
		{"BertNormalizer", `"BertNormalizer"`, set("normalizer", obj(`{"type":"BertNormalizer"}`))},
		{"Precompiled in a sequence", `"Precompiled"`, set("normalizer", obj(`{"type":"Sequence","normalizers":[{"type":"NFC"},{"type":"Precompiled","precompiled_charsmap":""}]}`))},
		{"Replace with an uncompilable regex", `a++`, set("normalizer", obj(`{"type":"Replace","pattern":{"Regex":"a++"},"content":" "}`))},
		{"Whitespace pre-tokenizer", `"Whitespace"`, set("pre_tokenizer", obj(`{"type":"Whitespace"}`))},
		{"uncompilable Split regex", `\\p{L}++`, set("pre_tokenizer", obj(`{"type":"Split","pattern":{"Regex":"\\p{L}++"},"behavior":"Isolated","invert":false}`))},
		{"unknown Split behavior", `"Sideways"`, set("pre_tokenizer", obj(`{"type":"Split","pattern":{"String":" "},"behavior":"Sideways","invert":false}`))},
		{"Metaspace prepend scheme", `"sometimes"`, set("pre_tokenizer", obj(`{"type":"Metaspace","replacement":"▁","prepend_scheme":"sometimes"}`))},
		{"unknown post-processor", `"Fancy"`, set("post_processor", obj(`{"type":"Fancy"}`))},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := writeVariant(t, c.edit)
			_, err := LoadDir(dir, LoadOptions{})
			if !errors.Is(err, ErrUnsupported) {
				t.Fatalf("err = %v, want ErrUnsupported", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, strings.Trim(c.mention, `\`)) && !strings.Contains(msg, c.mention) {
				t.Errorf("error %q does not name %s", msg, c.mention)
			}
			if !strings.Contains(msg, filepath.Join(dir, "tokenizer.json")) {
				t.Errorf("error %q does not name the file", msg)
			}
		})
	}
}

// TestLoad_RefusesMalformedFiles checks ErrMalformed.
func TestLoad_RefusesMalformedFiles(t *testing.T) {
	dir := writeVariant(t, func(m map[string]any) {
		m["model"].(map[string]any)["merges"] = []any{"▁ q"}
	})
	if _, err := LoadDir(dir, LoadOptions{}); !errors.Is(err, ErrMalformed) {
		t.Errorf("merge with unknown token: err = %v, want ErrMalformed", err)
	}
	bad := t.TempDir()
	os.WriteFile(filepath.Join(bad, "tokenizer.json"), []byte("{not json"), 0o644)
	if _, err := LoadDir(bad, LoadOptions{}); !errors.Is(err, ErrMalformed) {
		t.Errorf("invalid JSON: err = %v, want ErrMalformed", err)
	}
	if _, err := LoadDir(tinyDir, LoadOptions{MaxFileBytes: 100}); !errors.Is(err, ErrMalformed) {
		t.Errorf("oversized file: err = %v, want ErrMalformed", err)
	}
}

// TestLoad_AcceptsOtherSupportedComponents loads the other supported
// component shapes (Metaspace, ByteLevel with its own regex, Digits,
// Bert/Roberta post-processors, Sequence post-processor).
func TestLoad_AcceptsOtherSupportedComponents(t *testing.T) {
	metaspace := writeVariant(t, func(m map[string]any) {
		m["normalizer"] = nil
		m["pre_tokenizer"] = map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false}
	})
	tok, err := LoadDir(metaspace, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// "first": only the segment at the start of the text gets the ▁.
	for text, want := range map[string][]uint32{
		"hello":         {14},
		"<s>hello":      {1, 6, 7, 11, 9},
		"hello hello":   {14, 14},
		" hello":        {14}, // already starts with ▁: no second one
		"hello</s>hell": {14, 2, 6, 7, 11},
	} {
		got, err := tok.Encode(text, false)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Metaspace first: Encode(%q) (-want +got):\n%s", text, diff)
		}
	}
	for _, pre := range []string{
		`{"type":"ByteLevel","add_prefix_space":true,"use_regex":true}`,
		`{"type":"Sequence","pretokenizers":[{"type":"Digits","individual_digits":true},{"type":"Split","pattern":{"Regex":` + mustJSON(patternCL100K) + `},"behavior":"Isolated","invert":false}]}`,
	} {
		dir := writeVariant(t, func(m map[string]any) {
			var v any
			json.Unmarshal([]byte(pre), &v)
			m["pre_tokenizer"] = v
			m["post_processor"] = map[string]any{"type": "Sequence", "processors": []any{
				map[string]any{"type": "ByteLevel"},
				map[string]any{"type": "RobertaProcessing", "sep": []any{"</s>", 2}, "cls": []any{"<s>", 1}},
			}}
		})
		tok, err := Load(filepath.Join(dir, "tokenizer.json"), "", LoadOptions{})
		if err != nil {
			t.Fatalf("%s: %v", pre, err)
		}
		pfx, sfx := tok.AddedSpecialTokens()
		if diff := cmp.Diff([]uint32{1}, pfx); diff != "" || !cmp.Equal([]uint32{2}, sfx) {
			t.Errorf("Roberta frame = %v %v", pfx, sfx)
		}
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// TestEncode_ConcurrentCallersAgree encodes the golden cases from many
// goroutines at once on one tokenizer (shared word cache) under -race.
func TestEncode_ConcurrentCallersAgree(t *testing.T) {
	g := loadGolden(t)
	for _, gt := range g.Tokenizers {
		tok := sharedTokenizer(t, gt.Name)
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range gt.Cases {
					c := gt.Cases[(i+w*17)%len(gt.Cases)]
					got, err := tok.Encode(c.Text, c.AddSpecialTokens)
					if err != nil {
						t.Error(err)
						return
					}
					if len(got) != len(c.IDs) || (len(got) > 0 && !cmp.Equal(got, c.IDs)) {
						t.Errorf("%s: concurrent Encode(%q) differs", gt.Name, c.Text)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
}

// TestLoad_OtherRegexesUseTheGeneralEngine: a Split regex without a
// scanner (here DeepSeek-V3's digit and CJK splits) and a Replace regex
// are compiled with regexp2 and applied.
func TestLoad_OtherRegexesUseTheGeneralEngine(t *testing.T) {
	dir := writeVariant(t, func(m map[string]any) {
		m["normalizer"] = map[string]any{"type": "Sequence", "normalizers": []any{
			map[string]any{"type": "Replace", "pattern": map[string]any{"Regex": " {2,}"}, "content": " "},
			map[string]any{"type": "Prepend", "prepend": "▁"},
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": "▁"},
		}}
		m["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `\p{N}{1,3}`}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `[一-龥\x{3040}-ゟ゠-ヿ]+`}, "behavior": "Isolated", "invert": false},
		}}
	})
	tok, err := Load(filepath.Join(dir, "tokenizer.json"), "", LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// "hello   hello" → "▁hello▁hello" after collapsing the spaces.
	got, err := tok.Encode("hello   hello", false)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]uint32{14, 14}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	var pieces []string
	for _, p := range tok.pre.preTokenize(nil, piece{text: "ab12345漢字カナcd"}, nil) {
		pieces = append(pieces, p.text)
	}
	if diff := cmp.Diff([]string{"ab", "123", "45", "漢字カナ", "cd"}, pieces); diff != "" {
		t.Errorf("pieces (-want +got):\n%s", diff)
	}
}

// TestEncode_NormalizedAddedTokensMatchNormalizedText: an added token with
// normalized true is matched in the normalized text by its normalized
// content; Lowercase is full Unicode lowercasing.
func TestEncode_NormalizedAddedTokensMatchNormalizedText(t *testing.T) {
	dir := writeVariant(t, func(m map[string]any) {
		m["normalizer"] = map[string]any{"type": "Lowercase"}
		m["added_tokens"] = append(m["added_tokens"].([]any), map[string]any{
			"id": 15, "content": "HELL", "single_word": false, "lstrip": false, "rstrip": false, "normalized": true, "special": false,
		})
		m["model"].(map[string]any)["vocab"].(map[string]any)["HELL"] = 15
	})
	tok, err := Load(filepath.Join(dir, "tokenizer.json"), "", LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := tok.Encode("HeLLo", false)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]uint32{15, 9}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got := tok.norm.normalize("ΟΔΟΣ İ", nil); got != "οδος i̇" {
		t.Errorf("Lowercase = %q", got)
	}
}
