package chattemplate

import (
	"errors"
	"fmt"
	"sort"
)

// Request is what a chat template renders: the fields of an OpenAI
// /v1/chat/completions request that reach vLLM's chat template, as vLLM's
// ChatCompletionRequest reads them.
//
// Decode one from the request body with json.Unmarshal (see
// UnmarshalJSON), or build it in Go. Render does not modify it, so one
// Request may be rendered by several goroutines at once.
type Request struct {
	// Messages are the request's messages, each a JSON object as sent,
	// every field kept with its JSON type. Render maps them to the
	// conversation vLLM hands the template (see Render).
	Messages []*Object

	// Tools is the request's tools: nil when absent or null (the template
	// sees tools = None), else each entry a JSON object (*Object or
	// map[string]any) of the OpenAI function-tool shape.
	Tools []any

	// Documents is the request's documents (vLLM's RAG extension): nil
	// when absent, else JSON objects with string values.
	Documents []any

	// AddGenerationPrompt is add_generation_prompt. nil means the default:
	// true, or false when ContinueFinalMessage is set.
	AddGenerationPrompt *bool

	// ContinueFinalMessage is continue_final_message: render the final
	// message open-ended, cut after its content, so the model continues
	// it.
	ContinueFinalMessage bool

	// ReasoningEffort is reasoning_effort ("none", "minimal", "low",
	// "medium", "high", "xhigh", "max"), "" when absent. vLLM passes it
	// to the template and, unless Kwargs sets enable_thinking, sets
	// enable_thinking = (ReasoningEffort != "none").
	ReasoningEffort string

	// Kwargs is chat_template_kwargs: extra variables for the template
	// (enable_thinking, …), JSON-like values (see Object).
	Kwargs map[string]any
}

// reasoningEfforts are the values vLLM's protocol accepts.
var reasoningEfforts = []string{"none", "minimal", "low", "medium", "high", "xhigh", "max"}

// ParseRequest decodes an OpenAI chat completions request body (see
// UnmarshalJSON). Unlike json.Unmarshal, which checks the syntax first, it
// reports malformed JSON too as a *RequestError (field "body").
func ParseRequest(body []byte) (Request, error) {
	var r Request
	err := r.UnmarshalJSON(body)
	return r, err
}

// UnmarshalJSON decodes an OpenAI chat completions request body, reading
// messages (required), tools, documents, add_generation_prompt,
// continue_final_message, reasoning_effort and chat_template_kwargs, and
// ignoring every other field. Objects keep their key order and numbers
// their int or float kind. A field of the wrong type gives a
// *RequestError naming it.
func (r *Request) UnmarshalJSON(data []byte) error {
	v, err := decodeJSON(data)
	if errors.Is(err, errTooDeep) {
		return badRequest("body", err.Error())
	}
	if err != nil {
		return badRequest("body", "is not valid JSON: "+err.Error())
	}
	body, ok := v.(*Object)
	if !ok {
		return badRequest("body", "must be a JSON object, got "+typeName(v))
	}
	var out Request

	msgs, ok := body.Get("messages")
	if !ok || msgs == nil {
		return badRequest("messages", "is required")
	}
	list, ok := msgs.([]any)
	if !ok {
		return badRequest("messages", "must be an array, got "+typeName(msgs))
	}
	out.Messages = make([]*Object, len(list))
	for i, m := range list {
		o, ok := m.(*Object)
		if !ok {
			return badRequest(fmt.Sprintf("messages[%d]", i), "must be an object, got "+typeName(m))
		}
		out.Messages[i] = o
	}

	if out.Tools, err = optionalArray(body, "tools"); err != nil {
		return err
	}
	if out.Documents, err = optionalArray(body, "documents"); err != nil {
		return err
	}
	if b, ok, err := optionalBool(body, "add_generation_prompt"); err != nil {
		return err
	} else if ok {
		out.AddGenerationPrompt = &b
	}
	if out.ContinueFinalMessage, _, err = optionalBool(body, "continue_final_message"); err != nil {
		return err
	}
	if e, ok := body.Get("reasoning_effort"); ok && e != nil {
		s, isStr := e.(string)
		if !isStr {
			return badRequest("reasoning_effort", "must be a string, got "+typeName(e))
		}
		out.ReasoningEffort = s
	}
	if kw, ok := body.Get("chat_template_kwargs"); ok && kw != nil {
		o, isObj := kw.(*Object)
		if !isObj {
			return badRequest("chat_template_kwargs", "must be an object, got "+typeName(kw))
		}
		out.Kwargs = make(map[string]any, o.Len())
		for _, k := range o.Keys() {
			out.Kwargs[k], _ = o.Get(k)
		}
	}
	*r = out
	return nil
}

func optionalArray(body *Object, field string) ([]any, error) {
	v, ok := body.Get(field)
	if !ok || v == nil {
		return nil, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, badRequest(field, "must be an array, got "+typeName(v))
	}
	return list, nil
}

func optionalBool(body *Object, field string) (value, present bool, err error) {
	v, ok := body.Get(field)
	if !ok || v == nil {
		return false, false, nil
	}
	b, ok := v.(bool)
	if !ok {
		return false, false, badRequest(field, "must be a boolean, got "+typeName(v))
	}
	return b, true, nil
}

// apiParams are the keyword parameters of transformers'
// apply_chat_template that it consumes itself: given in
// chat_template_kwargs they never become template variables (vLLM passes
// them on as keyword arguments).
var apiParams = map[string]bool{
	"documents": true, "add_generation_prompt": true, "continue_final_message": true,
	"return_dict": true, "return_assistant_tokens_mask": true, "padding": true,
	"truncation": true, "max_length": true, "return_tensors": true, "tokenizer_kwargs": true,
}

// refusedKwargs are chat_template_kwargs vLLM refuses: chat_template and
// tokenize it rejects by name, the others would be given twice to
// apply_chat_template or to the template's render call.
var refusedKwargs = map[string]bool{
	"chat_template": true, "tokenize": true, "conversation": true, "tools": true, "messages": true,
}

// templateKwargs merges chat_template_kwargs with the request's own fields
// as vLLM's ChatCompletionRequest.build_chat_params does (the request's
// add_generation_prompt and continue_final_message win, documents and
// reasoning_effort win when set) and returns the variables that reach the
// template, with the documents to pass.
func templateKwargs(req *Request) (vars map[string]any, documents []any, err error) {
	keys := make([]string, 0, len(req.Kwargs))
	for k := range req.Kwargs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	vars = make(map[string]any, len(keys)+2)
	documents = req.Documents
	for _, k := range keys {
		v := req.Kwargs[k]
		field := "chat_template_kwargs." + k
		if refusedKwargs[k] {
			return nil, nil, badRequest(field, "is not allowed in chat_template_kwargs")
		}
		if err := checkValue(field, v); err != nil {
			return nil, nil, err
		}
		if k == "documents" && documents == nil && v != nil {
			list, ok := v.([]any)
			if !ok {
				return nil, nil, badRequest(field, "must be an array, got "+typeName(v))
			}
			documents = list
		}
		if apiParams[k] {
			continue
		}
		vars[k] = v
	}
	if req.ReasoningEffort != "" {
		if !contains(reasoningEfforts, req.ReasoningEffort) {
			return nil, nil, badRequest("reasoning_effort", fmt.Sprintf("must be one of %q, got %q", reasoningEfforts, req.ReasoningEffort))
		}
		vars["reasoning_effort"] = req.ReasoningEffort
		if _, set := req.Kwargs["enable_thinking"]; !set {
			vars["enable_thinking"] = req.ReasoningEffort != "none"
		}
	}
	return vars, documents, nil
}
