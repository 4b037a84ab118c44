package openai

import (
	"slices"
	"strconv"
	"strings"
)

// ReasoningEfforts are the values of reasoning_effort vLLM's protocol
// accepts.
var ReasoningEfforts = []string{"none", "minimal", "low", "medium", "high", "xhigh", "max"}

// refusedKwargs are chat_template_kwargs vLLM refuses: tokenize by name,
// the others because apply_chat_template or the template's render call
// would get them twice. chat_template, also refused, is the caller's to
// refuse (package prompt, with vLLM's message for a request template).
var refusedKwargs = []string{"tokenize", "conversation", "tools", "messages"}

// chatFields reads and checks the fields of a chat request that reach the
// chat template, each once, as vLLM's ChatCompletionRequest and its
// chat_utils check them.
func (r *Request) chatFields(f fields) error {
	v, ok := f.present("messages")
	if !ok {
		return Errorf("messages", "required: a list of chat messages")
	}
	list, isList := v.([]any)
	if !isList {
		return Errorf("messages", "expected a list of message objects, got %s", describe(v))
	}
	if len(list) == 0 {
		return Errorf("messages", "empty: at least one message is required")
	}
	r.Messages = make([]*Object, len(list))
	for i, m := range list {
		msg, err := checkMessage(i, m)
		if err != nil {
			return err
		}
		r.Messages[i] = msg
	}
	agp, agpSet, err := f.boolean("add_generation_prompt")
	if err != nil {
		return err
	}
	if r.ContinueFinalMessage, _, err = f.boolean("continue_final_message"); err != nil {
		return err
	}
	if r.ContinueFinalMessage && agpSet && agp {
		return Errorf("continue_final_message", "cannot be true together with \"add_generation_prompt\": true")
	}
	r.AddGenerationPrompt = !r.ContinueFinalMessage // vLLM's default when not given
	if agpSet {
		r.AddGenerationPrompt = agp
	}
	if r.ChatTemplate, err = f.str("chat_template"); err != nil {
		return err
	}
	if r.ReasoningEffort, err = f.str("reasoning_effort"); err != nil {
		return err
	}
	if r.ReasoningEffort != "" && !slices.Contains(ReasoningEfforts, r.ReasoningEffort) {
		return Errorf("reasoning_effort", "expected one of %s, got %q", strings.Join(ReasoningEfforts, ", "), r.ReasoningEffort)
	}
	if r.Tools, err = f.objects("tools"); err != nil {
		return err
	}
	for i, t := range r.Tools {
		if err := checkTool("tools["+strconv.Itoa(i)+"]", t); err != nil {
			return err
		}
	}
	if r.Documents, err = f.objects("documents"); err != nil {
		return err
	}
	if err := checkDocuments("documents", r.Documents); err != nil {
		return err
	}
	return r.kwargs(f)
}

// kwargs reads chat_template_kwargs: an object whose names are not among
// refusedKwargs, and whose documents, when the request has none of its
// own (they then reach the template), are documents.
func (r *Request) kwargs(f fields) error {
	v, ok := f.present("chat_template_kwargs")
	if !ok {
		return nil
	}
	kw, isObj := v.(*Object)
	if !isObj {
		return Errorf("chat_template_kwargs", "expected an object, got %s", describe(v))
	}
	for _, k := range kw.Keys() {
		if slices.Contains(refusedKwargs, k) {
			return Errorf("chat_template_kwargs."+k, "not allowed in chat_template_kwargs (vLLM refuses it)")
		}
	}
	if docs, _ := kw.Get("documents"); docs != nil && r.Documents == nil {
		list, isList := docs.([]any)
		if !isList {
			return Errorf("chat_template_kwargs.documents", "expected a list of objects, got %s", describe(docs))
		}
		objs := make([]*Object, len(list))
		for i, d := range list {
			o, isObj := d.(*Object)
			if !isObj {
				return Errorf("chat_template_kwargs.documents["+strconv.Itoa(i)+"]", "expected an object, got %s", describe(d))
			}
			objs[i] = o
		}
		if err := checkDocuments("chat_template_kwargs.documents", objs); err != nil {
			return err
		}
	}
	r.ChatTemplateKwargs = kw
	return nil
}

// checkMessage checks messages[i]: an object with a non-empty string
// role, a content that is a string, null or a list of content parts
// (see checkPart), and for an assistant, tool_calls (null or a list of
// objects with an object function) and a string reasoning (or
// reasoning_content, read when reasoning is null) when not null.
func checkMessage(i int, m any) (*Object, error) {
	at := "messages[" + strconv.Itoa(i) + "]"
	msg, ok := m.(*Object)
	if !ok {
		return nil, Errorf(at, "expected a message object, got %s", describe(m))
	}
	rv, _ := msg.Get("role")
	role, ok := rv.(string)
	if !ok {
		if rv == nil {
			return nil, Errorf(at+".role", "required: a string such as \"user\"")
		}
		return nil, Errorf(at+".role", "expected a string, got %s", describe(rv))
	}
	if role == "" {
		return nil, Errorf(at+".role", "empty: a role such as \"user\" is required")
	}
	switch c, _ := msg.Get("content"); c := c.(type) {
	case nil, string:
	case []any:
		for j, p := range c {
			if err := checkPart(at+".content["+strconv.Itoa(j)+"]", p); err != nil {
				return nil, err
			}
		}
	default:
		return nil, Errorf(at+".content", "expected a string, a list of content parts or null, got %s", describe(c))
	}
	if role == "assistant" {
		if err := checkAssistant(at, msg); err != nil {
			return nil, err
		}
	}
	return msg, nil
}

// checkAssistant checks an assistant message's tool_calls and reasoning.
func checkAssistant(at string, msg *Object) error {
	if tc, _ := msg.Get("tool_calls"); tc != nil {
		calls, ok := tc.([]any)
		if !ok {
			return Errorf(at+".tool_calls", "expected a list of tool calls, got %s", describe(tc))
		}
		for j, c := range calls {
			cat := at + ".tool_calls[" + strconv.Itoa(j) + "]"
			call, ok := c.(*Object)
			if !ok {
				return Errorf(cat, "expected a tool call object, got %s", describe(c))
			}
			if fn, _ := call.Get("function"); !isObject(fn) {
				return Errorf(cat+".function", "expected an object, got %s", describe(fn))
			}
		}
	}
	key := "reasoning"
	v, _ := msg.Get(key)
	if v == nil {
		key = "reasoning_content"
		v, _ = msg.Get(key)
	}
	if _, isStr := v.(string); v != nil && !isStr {
		return Errorf(at+"."+key, "expected a string or null, got %s", describe(v))
	}
	return nil
}

// checkPart checks one content part at: a string, or an object whose
// "type" is a text part type (whose text, refusal or thinking is a
// string), tool_reference (whose name is a string) or a media type; a
// part without a type must have a media field (image_url, …).
func checkPart(at string, p any) error {
	switch part := p.(type) {
	case string:
		return nil
	case *Object:
		tv, _ := part.Get("type")
		if tv == nil {
			if kind, _ := Part(part); kind == PartMedia {
				return nil
			}
			return Errorf(at+".type", "required: a content part type such as \"text\"")
		}
		typ, ok := tv.(string)
		if !ok {
			return Errorf(at+".type", "expected a string, got %s", describe(tv))
		}
		if mediaPartTypes[typ] {
			return nil
		}
		key, ok := textPartKeys[typ]
		if !ok {
			return Errorf(at+".type", "unsupported content part type %q", typ)
		}
		if v, _ := part.Get(key); !isString(v) {
			return Errorf(at+"."+key, "a %s part needs a string %s, got %s", typ, key, describe(v))
		}
		return nil
	}
	return Errorf(at, "expected a content part object or a string, got %s", describe(p))
}

// checkTool checks a tool as vLLM's ChatCompletionToolsParam validates
// it: type "function" (or absent), an object function with a string name,
// a string or null description, an object or null parameters, true,
// false or null strict and defer_loading (also on the tool).
func checkTool(at string, tool *Object) error {
	if typ, ok := tool.Get("type"); ok && typ != "function" {
		return Errorf(at+".type", "expected \"function\", got %s", describe(typ))
	}
	fv, _ := tool.Get("function")
	fn, ok := fv.(*Object)
	if !ok {
		return Errorf(at+".function", "required: an object with the function's name, got %s", describe(fv))
	}
	if nv, _ := fn.Get("name"); !isString(nv) {
		return Errorf(at+".function.name", "required: the function's name as a string, got %s", describe(nv))
	}
	if v, _ := fn.Get("description"); v != nil && !isString(v) {
		return Errorf(at+".function.description", "expected a string or null, got %s", describe(v))
	}
	if v, _ := fn.Get("parameters"); v != nil && !isObject(v) {
		return Errorf(at+".function.parameters", "expected an object or null, got %s", describe(v))
	}
	for _, b := range []struct {
		o   *Object
		at  string
		key string
	}{{fn, at + ".function", "strict"}, {fn, at + ".function", "defer_loading"}, {tool, at, "defer_loading"}} {
		if v, _ := b.o.Get(b.key); v != nil {
			if _, isBool := v.(bool); !isBool {
				return Errorf(b.at+"."+b.key, "expected true, false or null, got %s", describe(v))
			}
		}
	}
	return nil
}

// checkDocuments checks documents as vLLM's list[dict[str, str]].
func checkDocuments(at string, docs []*Object) error {
	for i, d := range docs {
		for _, k := range d.Keys() {
			if v, _ := d.Get(k); !isString(v) {
				return Errorf(at+"["+strconv.Itoa(i)+"]."+k, "expected a string, got %s", describe(v))
			}
		}
	}
	return nil
}

func isString(v any) bool { _, ok := v.(string); return ok }

func isObject(v any) bool { o, ok := v.(*Object); return ok && o != nil }
