package tokenizer

import "errors"

// Sentinel errors. Every error returned by this package wraps exactly one of
// them, so callers can branch with errors.Is and show the wrapped message
// (which names the model, the file and the offending value) as a detail.
var (
	// ErrNoModelsDir is returned by Registry.Encode when the registry was
	// built without a models directory, or when the configured path is not
	// a readable directory.
	ErrNoModelsDir = errors.New("tokenizer: no models directory")

	// ErrUnknownModel is returned when the models directory has no
	// <model_id>/tokenizer.json, or when the model id is not a plain
	// relative path (empty, absolute, or containing "..").
	ErrUnknownModel = errors.New("tokenizer: no tokenizer for model")

	// ErrUnsupported is returned at load time for a tokenizer.json whose
	// model, normalizer, pre-tokenizer or post-processor type (or one of
	// their options) this package does not implement exactly. Refusing is
	// deliberate: a tokenizer that is almost right produces ids that never
	// match the engine's cache.
	ErrUnsupported = errors.New("tokenizer: unsupported tokenizer")

	// ErrMalformed is returned when tokenizer.json or tokenizer_config.json
	// cannot be read or parsed, is larger than the configured limit, or is
	// internally inconsistent (a merge naming a token missing from the
	// vocabulary, a special token without an id).
	ErrMalformed = errors.New("tokenizer: malformed tokenizer file")

	// ErrInvalidUTF8 is returned by Encode for text that is not valid UTF-8;
	// the reference implementations only ever see Unicode strings.
	ErrInvalidUTF8 = errors.New("tokenizer: text is not valid UTF-8")

	// ErrTooManyTokens is returned by EncodeContext when the text encodes
	// to more ids than its maxTokens; it stops as soon as the ids so far
	// exceed the cap, without encoding the rest of the text.
	ErrTooManyTokens = errors.New("tokenizer: text encodes to more tokens than the limit")

	// ErrWordTooLong is returned by EncodePrefix when the text holds a
	// pre-token longer than its maxWordBytes: merging one word costs
	// memory and time in proportion to its length, so EncodePrefix stops
	// there and returns the ids of the text before it, which are exactly
	// the leading ids Encode returns.
	ErrWordTooLong = errors.New("tokenizer: a pre-token is longer than the word limit")

	// ErrStopped is returned by EncodeContext when its context ends (or
	// its deadline passes) before the text is encoded. The error also
	// wraps the context's error (context.Canceled or
	// context.DeadlineExceeded), so a caller can tell which.
	ErrStopped = errors.New("tokenizer: encoding stopped before the end of the text")

	// ErrLoading is wrapped, with ErrStopped, when the context ended
	// while the model's tokenizer was still loading (its first use):
	// nothing was encoded, and a retry shortly after will find it loaded.
	ErrLoading = errors.New("tokenizer: still loading")

	// ErrSkipped is Registry.Preload's error for a model it did not load
	// because the registry keeps only MaxModels tokenizers: loading it
	// would evict one just preloaded. It loads on its first use.
	ErrSkipped = errors.New("tokenizer: not preloaded: more models than the registry keeps")
)
