// Package prompt is the one owner of "OpenAI request → the token ids the
// engine will prefill". The gateway keys a request with it, the sim
// engine prefills with it, and `inference-cache render` prints it, so the
// three can never disagree about a prompt.
//
// For each model of a models directory (<dir>/<model>/tokenizer.json,
// tokenizer_config.json and, when present, chat_template.jinja) the
// tokenizer and the chat template are loaded once, on first use or by
// Preload, and shared by every request. Then, as vLLM's OpenAI server
// does (vllm/entrypoints/openai/serving_chat.py and
// serving_completion.py; see package openai for the commit):
//
//   - a chat request's messages are rendered with the model's chat
//     template (package chattemplate, which reproduces transformers'
//     apply_chat_template and vLLM's request mapping) and the text is
//     tokenized without added special tokens (the template writes them;
//     add_special_tokens, default false for chat, is honoured);
//   - a completion's prompt string is tokenized with them
//     (add_special_tokens defaults to true for completions, as in vLLM);
//   - a token-id prompt is the prefill as it is;
//   - a batch of completion prompts is keyed by its first prompt (one
//     request goes to one replica);
//   - a chat request with an image, audio or video part has no key
//     (Prompt.NoKey is ErrMultimodal): the engine splices in the media's
//     tokens with a processor this package does not run, and the
//     observation path does not index multimodal blocks, so the caller
//     picks a replica by load;
//   - cache_salt is carried through (Prompt.CacheSalt), so that the key is
//     computed in the salt's hash domain as the engine's blocks are.
//
// The request's fields were checked when openai.Decode decoded it (the
// template renders from those values, without parsing the body again). A
// template that raises (raise_exception), text that is not UTF-8 and a
// prompt over the token cap give an *openai.Error with status 400 naming
// the field, in vLLM's words where it has them: what the engine would
// answer. A request chat_template
// is refused, as vLLM refuses it without --trust-request-chat-template.
// The model's files failing to load gives an error wrapping ErrModelFiles;
// a model without a directory ErrUnknownModel.
//
// strftime_now in templates reads Options.Now, so tests and `render
// --now` render on a fixed clock.
package prompt
