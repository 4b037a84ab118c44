// Package tokenizer turns prompt text into the token ids an inference
// engine would compute, so that a LookupRoute carrying prompt_text (contract §5.2)
// can be fingerprinted like one carrying token_ids.
//
// It loads Hugging Face tokenizer.json files and reproduces the reference
// implementation exactly for the two BPE families LLM serving uses most:
//
//   - byte-level BPE (GPT-2, Llama 3, Qwen): optional NFC normalizer, a
//     Split pre-tokenizer (the lookahead in these patterns is beyond Go's
//     regexp: the GPT-2, cl100k/Llama-3 and Qwen2 patterns run as
//     hand-written scanners, see scanner.go, any other pattern through the
//     backtracking engine github.com/dlclark/regexp2), the ByteLevel
//     byte-to-unicode mapping, ranked merges;
//   - SentencePiece-style BPE (Llama 2, Mistral): Prepend+Replace
//     normalizers or a Metaspace pre-tokenizer, byte_fallback to <0xXX>
//     tokens, unk with fuse_unk.
//
// Supported components: model BPE (unk_token, fuse_unk, byte_fallback,
// continuing_subword_prefix, end_of_word_suffix, ignore_merges); normalizers
// NFC, NFD, NFKC, NFKD, Lowercase, Strip, Prepend, Replace, Sequence;
// pre-tokenizers Split (all five behaviours, invert), ByteLevel, Metaspace
// (prepend_scheme always/first/never, split), Digits, Sequence;
// post-processors TemplateProcessing, BertProcessing, RobertaProcessing,
// ByteLevel, Sequence. The decoder is not used.
//
// Added tokens ("<|im_start|>", "<s>", …) are cut out of the text before
// anything else, leftmost-longest, honouring lstrip, rstrip, single_word
// and normalized. Anything else in a tokenizer.json that would change the
// ids (another model type such as WordPiece or Unigram, a normalizer,
// pre-tokenizer or post-processor type not listed here, a regex regexp2
// cannot compile, BPE dropout) is refused at load time with ErrUnsupported and a message naming the type and the file,
// rather than producing ids that silently never match the engine's.
//
// # Special tokens
//
// Registry.Encode does what vLLM's OpenAI-compatible completions endpoint
// does with a prompt string: it encodes with add_special_tokens=True. Which
// tokens that adds is decided by the model's files, as transformers
// decides it:
//
//   - if tokenizer_config.json sets add_bos_token or add_eos_token (the
//     Llama/Mistral/Gemma fast tokenizers rebuild their post-processor from
//     these flags), the bos_token is prepended when add_bos_token is true
//     and the eos_token appended when add_eos_token is true (an absent flag
//     counts as false);
//   - otherwise the post_processor of tokenizer.json decides
//     (TemplateProcessing, BertProcessing, RobertaProcessing, or nothing
//     for ByteLevel and null).
//
// So Qwen3 adds nothing (add_bos_token false, no bos_token) and a
// Mistral/Llama 2 tokenizer prepends <s>. Chat-formatted prompts already
// contain their special tokens as text; those are recognised as added
// tokens either way.
//
// # Models directory
//
// A Registry serves <dir>/<model_id>/tokenizer.json (and
// tokenizer_config.json when present), loading each model lazily on first
// use, sharing one load among concurrent callers and keeping at most
// RegistryOptions.MaxModels loaded. Each Tokenizer keeps a bounded cache
// of recent pre-token → ids results, so repeated system prompts cost a
// lock-free hash-table lookup per word.
//
// # Bounded encoding
//
// Tokenizer.EncodeContext and Registry.EncodeContext stop early, without
// ids, once their context ends or its deadline passes (ErrStopped, also
// wrapping the context's error) and once the ids exceed a cap
// (ErrTooManyTokens). Every stage that can take milliseconds on a long
// text looks at the limits at least every checkEvery units of work: the
// added-token split, Unicode normalization (chunk by chunk), the
// pre-tokenizer's split, the merge loop of one long pre-token, and the
// loop over pre-tokens; a Registry's first load of a model is waited for
// only until the context ends. A stop is noticed within about a
// millisecond of work; the rare exception is the allocation of a
// megabyte-long word's symbols, which can stall on the garbage collector.
// When ids are returned they are exactly Encode's.
//
// Long pre-tokens (a run of spaces or of one letter is one pre-token for
// the byte-level patterns) are merged with a queue bucketed by merge rank
// (rankqueue.go) rather than a heap: it pops in the same order, so the ids
// are the same, in a fraction of the time.
//
// # Known differences from the reference
//
// The golden vectors come from the JavaScript port of the library; where
// it and the Rust library differ, this package follows the Rust library
// that vLLM runs, except for the case-insensitive contractions of the
// cl100k/Qwen pattern, which match ASCII letters only (as in the JavaScript
// port; Oniguruma would also fold 'ſ' to 's'). \s is Unicode White_Space
// (U+0085 included, U+FEFF not), as in Rust. Unicode tables are Go's.
// tokenizer.json's truncation and padding are ignored, as transformers
// ignores them for a plain encode call.
package tokenizer
