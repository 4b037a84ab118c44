// Package openai holds the wire shapes of OpenAI's HTTP API as vLLM's
// OpenAI-compatible server speaks it: the request bodies of
// /v1/completions and /v1/chat/completions (decoded and checked, with
// errors naming the field as the client wrote it), their responses and
// streamed chunks, /v1/models, the error body, and a Server-Sent Events
// writer and reader. It routes nothing and imports nothing of the project:
// the sim engine (simengine) serves these shapes and the gateway and proxy
// read them, so what the proxy is tested against is what vLLM sends.
//
// Sources (vllm-project/vllm, read at the commits given):
//
//   - vllm/entrypoints/openai/protocol.py @ 0052bed3: CompletionRequest,
//     ChatCompletionRequest (the vLLM extension fields add_generation_prompt
//     default true, continue_final_message, add_special_tokens — default
//     true for completions, false for chat —, chat_template,
//     chat_template_kwargs, documents, cache_salt, and the validators this
//     package repeats: stream_options only with stream, not both
//     continue_final_message and add_generation_prompt, cache_salt a
//     non-empty string), the response and chunk models, UsageInfo with
//     prompt_tokens_details.cached_tokens, ModelCard and ModelList, and
//     ErrorResponse {"error": {message, type, param, code}} with code the
//     HTTP status;
//   - vllm/entrypoints/openai/serving_chat.py @ 003fe593: a chat stream is
//     a first chunk per choice with delta {"role": "assistant", "content":
//     ""}, one chunk per output delta ({"content": …}; the last carries
//     finish_reason and stop_reason), a usage chunk with empty choices when
//     stream_options.include_usage, then "data: [DONE]"; chunks are dumped
//     with exclude_unset (unset fields absent), the usage chunk also with
//     exclude_none;
//   - vllm/entrypoints/openai/serving_completion.py @ 00463e62: completion
//     chunks are dumped with every field (logprobs, finish_reason,
//     stop_reason and usage null until set), the usage chunk with
//     exclude_none, then "data: [DONE]".
//
// A completion prompt is a string, a list of strings, a list of token ids
// or a list of lists of token ids (Prompt keeps which). The chat fields a
// template reads (messages, tools, documents, chat_template_kwargs) are
// kept as the decoded values, objects as *Object with the client's name
// order and numbers as written, so that a chat template (package
// chattemplate) renders from the Request itself and sees every field as
// sent. Each field is checked once, here, with one message naming it as
// the client wrote it and the rule or limit; the chat template and the
// sim engine trust what Decode returns. Sampling parameters (temperature,
// top_p, stop, seed, …) are not interpreted.
//
// This package holds the project's one JSON reader (ParseJSON, which
// Decode runs over the body in one pass): jsontext
// (github.com/go-json-experiment/json, the tokenizer of encoding/json/v2,
// about a seventh of encoding/json's CPU here), accepting exactly what
// encoding/json accepts within MaxNesting levels; a document it refuses
// is handed to encoding/json only for its message, so the message stays
// encoding/json's.
package openai
