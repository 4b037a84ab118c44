// Package loadgen replays a Mooncake request trace in real time as
// streaming OpenAI chat requests (`inference-cache loadgen`) and measures
// each one at the client: time to first token, end-to-end latency,
// errors, the engine's usage and the headers of the inference-cache proxy
// (x-inference-cache-replica, -reason, -matched-tokens). The live
// benchmark (`inference-cache bench --live`) runs it through the proxy
// once per routing strategy.
//
// # From hash ids to text
//
// A Mooncake record gives arrival time, input and output lengths, and one
// hash id per 512-token block of its prompt; requests that share leading
// ids share that prefix. The trace has no text, so each id is rendered
// as a block of 512 words drawn from a fixed 128-word vocabulary by a
// generator seeded with the id (BlockText): the same id is always the
// same text, and a request's user message is its blocks' texts in order,
// the last cut so the message has input_length words (PromptText). The
// request is one user message; the engine's chat template wraps it (for
// Qwen3, "<|im_start|>user\n" before and the assistant header after), so
// two requests sharing k leading ids share the template's head and k×512
// tokens of prompt.
//
// Every vocabulary word, with its leading space, is exactly one token of
// the Qwen3 tokenizer (testdata/tokenizers/qwen3), and byte-level BPE
// pre-tokenization splits before each " word", so with that tokenizer a
// block is exactly 512 tokens and the message exactly input_length tokens;
// the prompt adds the template's few tokens. With another tokenizer the
// counts are approximate (a word may be two tokens), but shared ids still
// give shared token prefixes, which is what routing is measured on. The
// real text is not natural language: an engine's speed does not depend
// on it, and a router must not.
//
// # Measurement
//
// Records are sent at their timestamps divided by the speed-up, from the
// first record's, each on its own goroutine (open loop: a slow server
// does not slow the arrivals), with at most MaxInFlight open; a record
// held back by that bound is reported late (Summary.MaxLateMs). Each
// request is streamed with stream_options.include_usage, so the engine's
// last chunk gives prompt_tokens and prompt_tokens_details.cached_tokens.
// max_tokens is the record's output_length, optionally capped (the
// trace's outputs average 340 tokens; a cap keeps a short replay's decode
// and its event count small). A request fails when it is refused, answers
// a status other than 200, streams an error event or breaks off before
// data: [DONE], or exceeds its timeout; each failure keeps its kind.
//
// The load is bounded (a record count, a duration, the request timeout)
// and only goes to a loopback address.
package loadgen
