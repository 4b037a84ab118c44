package chattemplate

import (
	"github.com/inference-cache/inference-cache/openai"
)

// apiParams are the keyword parameters of transformers'
// apply_chat_template that it consumes itself: given in
// chat_template_kwargs they never become template variables (vLLM passes
// them on as keyword arguments). chat_template is among them: vLLM takes
// it as the template (package prompt refuses a request template).
var apiParams = map[string]bool{
	"documents": true, "add_generation_prompt": true, "continue_final_message": true,
	"return_dict": true, "return_assistant_tokens_mask": true, "padding": true,
	"truncation": true, "max_length": true, "return_tensors": true, "tokenizer_kwargs": true,
	"chat_template": true,
}

// templateKwargs merges chat_template_kwargs with the request's own fields
// as vLLM's ChatCompletionRequest.build_chat_params does (the request's
// add_generation_prompt and continue_final_message win, documents and
// reasoning_effort win when set) and returns the variables that reach the
// template, with the documents to pass (openai.Decode checked both).
func templateKwargs(req *openai.Request) (vars map[string]any, documents []any) {
	kw := req.ChatTemplateKwargs
	vars = make(map[string]any, kw.Len()+2)
	if req.Documents != nil {
		documents = make([]any, len(req.Documents))
		for i, d := range req.Documents {
			documents[i] = d
		}
	}
	for _, k := range kw.Keys() {
		v, _ := kw.Get(k)
		if k == "documents" && documents == nil && v != nil {
			documents, _ = v.([]any)
		}
		if apiParams[k] {
			continue
		}
		vars[k] = v
	}
	if req.ReasoningEffort != "" {
		vars["reasoning_effort"] = req.ReasoningEffort
		if _, set := kw.Get("enable_thinking"); !set {
			vars["enable_thinking"] = req.ReasoningEffort != "none"
		}
	}
	return vars, documents
}
