// Package chattemplate turns an OpenAI chat completions request into the
// prompt text a vLLM replica prefills: it renders the request's messages
// with the model's chat template exactly as vLLM does before tokenizing,
// so that a gateway's key for a chat request is the engine's.
// It is pure: no HTTP, no tokenizer, no clock (the caller passes now), no
// goroutines.
//
//	tmpl, err := chattemplate.Load("/models/qwen3")   // once per model
//	req, err := openai.DecodeChat(body)               // checks every field
//	prompt, err := tmpl.Render(req, time.Now())
//
// Render reads the values openai.Decode decoded (objects in the client's
// key order), without parsing or copying the body again; the request's
// fields are checked there, once, so Render's only errors are the
// template's and ErrMultimodal.
//
// Chat prompts are then tokenized without added special tokens: the
// template writes them.
//
// # What Render reproduces
//
// The environment transformers builds for apply_chat_template
// (src/transformers/utils/chat_template_utils.py): Jinja2 with
// trim_blocks, lstrip_blocks and loop controls (break, continue); the
// {% generation %} tag; tojson as json.dumps(ensure_ascii=False, indent,
// separators, sort_keys); raise_exception, which fails the render with a
// *TemplateError carrying the template's message; strftime_now on the
// caller's clock; the special tokens of tokenizer_config.json as
// variables; messages, tools, documents, add_generation_prompt and
// chat_template_kwargs as variables; continue_final_message by
// transformers' tag-and-cut.
//
// Around it, the request mapping of vLLM's OpenAI server
// (vllm-project/vllm at commit 001eadcf295d90aa0664963cd6a9d93f38a2f3da:
// vllm/entrypoints/chat_utils.py, vllm/renderers/hf.py,
// vllm/renderers/params.py, vllm/entrypoints/openai/chat_completion/protocol.py,
// vllm/entrypoints/generate/base/protocol.py): messages rebuilt with the
// fields vLLM keeps, text parts joined with "\n" for templates that read
// content as a string (or kept as parts for templates that loop over it,
// detected as vLLM detects it), tool-call arguments parsed from JSON,
// tools dumped as vLLM's pydantic model dumps them, add_generation_prompt
// defaulting to true, reasoning_effort driving enable_thinking,
// chat_template_kwargs merged under the request's own fields. A request
// with an image, audio or video part gets ErrMultimodal: it has no key,
// and the caller picks by load. The checks of vLLM's request validation
// (field types, content part types, tool shapes, refused kwargs) are
// openai.Decode's.
//
// # Engine
//
// Templates run on github.com/ardanlabs/jinja (v1.8.0; later versions
// need a newer Go), a pure-Go Jinja engine written for LLM chat
// templates. It was chosen over github.com/nikolalohinski/gonja/v2
// (v2.9.1) after running both on the golden renders: ardanlabs/jinja
// rendered all of them as it comes, has no dependencies, keeps dict key
// order (tool schemas are printed with tojson, so the order is part of
// the prompt), applies transformers' trim_blocks and lstrip_blocks, and
// compiles a template into a value that renders concurrently. gonja
// failed both tool cases: its values are Go maps, iterated in sorted
// order, and its tojson is encoding/json's compact form; it also pulls in
// logrus, json-iterator and x/exp.
//
// Where the engine differs from Jinja2, a small wrapper fixes it without
// forking: the template source is rewritten before compiling (every
// {{ expression }} is passed through a filter printing Python's str(), so
// None prints "None" and 1.0 "1.0"; the filters tojson, map, selectattr,
// rejectattr, join and string are renamed to this package's versions,
// which the engine finds among the render variables; Jinja2's newline
// normalization is applied), and the format filter, raise_exception and
// strftime_now are supplied as variables. The rewrite finds tags exactly
// as the engine's scanner does, so it never moves a boundary.
//
// Every template is compiled once per model by Load or New; a *Template
// is safe for concurrent Render calls, each of which converts the request
// into fresh template values (a template may change its lists in place;
// that stays within its render). A panic inside the engine is recovered
// and returned as ErrRender.
//
// # Known differences from Jinja2
//
// These constructs, absent from the chat templates of the common model
// families, still render differently from Jinja2:
//
//   - the % operator on strings ('%s' % x); the format filter works;
//   - ** gives a float for integer operands; the round filter rounds half
//     away from zero (2.5 gives 3.0) where Python rounds half to even;
//   - str.startswith/endswith with a tuple, str.split with maxsplit, and
//     the str methods join, splitlines and the is* predicates;
//   - "is sequence" is false for strings;
//   - ~ and + print None as "" and floats in Go's %g form (the {{ }}
//     output itself prints them as Python does);
//   - {%+ %} (lstrip disabled for one tag), whitespace inside
//     {% raw %}, \u escapes in string literals, 1e20 float literals;
//   - what Jinja2 refuses, the engine often allows: attributes of
//     undefined values are undefined instead of an UndefinedError, 1 + 'a'
//     concatenates, and .append/.update change the render's copy where
//     the immutable sandbox raises SecurityError;
//   - integers beyond int64 become floats (Python keeps them exact);
//   - entries of an assistant's tool_calls keep the request's key order,
//     which vLLM's pydantic validation may change; only a template that
//     prints a whole tool call with tojson would show it;
//   - the str methods title() and capitalize() neither lowercase the rest
//     of a word nor (title) start a word after punctuation, while the
//     title filter does start one after an apostrophe; upper() leaves ß;
//     strip() keeps U+001C to U+001F, which Python strips;
//   - extra_special_tokens of newer tokenizer configs are not variables.
package chattemplate
