package chattemplate

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	jinja "github.com/ardanlabs/jinja"

	"github.com/inference-cache/inference-cache/openai"
)

// continueTag is the marker transformers appends to the final message for
// continue_final_message, to find where the message ends in the render.
// The trailing space is part of it.
const continueTag = "CONTINUE_FINAL_MESSAGE_TAG "

// Template is a model's chat template (or its set of named templates),
// compiled once. It is safe for concurrent use by many goroutines: Render
// builds all its state per call.
type Template struct {
	name   string
	single *compiled            // the template, when the model has one
	named  map[string]*compiled // named templates, when it has several
	tokens SpecialTokens
	base   map[string]jinja.Value // globals, filter overrides, special tokens
}

// compiled is one chat template ready to render.
type compiled struct {
	tmpl       *jinja.Template
	format     ContentFormat
	hasContent bool // the source mentions "content" (continue_final_message needs it)
}

func compile(src string) (*compiled, error) {
	t, err := jinja.Compile(rewriteSource(src))
	if err != nil {
		return nil, err
	}
	return &compiled{tmpl: t, format: detectContentFormat(src), hasContent: strings.Contains(src, "content")}, nil
}

// init builds the variables every render shares.
func (t *Template) init() {
	t.base = t.tokens.vars()
	for name, fn := range overrideFilters() {
		t.base[name] = jinja.NewCallable(name, fn)
	}
	t.base["raise_exception"] = jinja.NewCallable("raise_exception", raiseException)
}

// SpecialTokens returns the special tokens the template sees.
func (t *Template) SpecialTokens() SpecialTokens { return t.tokens }

// Names returns the names of the model's named templates, nil when it has
// a single unnamed one.
func (t *Template) Names() []string {
	var out []string
	for n := range t.named {
		out = append(out, n)
	}
	return out
}

// ContentFormat returns the content format vLLM detects for the template
// Render would use for a request with (tools true) or without tools.
func (t *Template) ContentFormat(tools bool) (ContentFormat, error) {
	c, err := t.pick(tools)
	if err != nil {
		return ContentString, err
	}
	return c.format, nil
}

// pick chooses the template as transformers' get_chat_template does when
// vLLM passes no template name: the single one; else "tool_use" for a
// request with tools, when present; else "default".
func (t *Template) pick(tools bool) (*compiled, error) {
	if t.single != nil {
		return t.single, nil
	}
	if tools {
		if c, ok := t.named["tool_use"]; ok {
			return c, nil
		}
	}
	if c, ok := t.named["default"]; ok {
		return c, nil
	}
	return nil, fmt.Errorf("%w: %s has several named chat templates (%s) and none named \"default\"", ErrNoChatTemplate, t.name, strings.Join(t.Names(), ", "))
}

// Render renders a chat request, as openai.Decode returns it (checked,
// values shared with the body's decode; Render does not modify it, so
// several goroutines may render one request at once), with the chat
// template, as vLLM's chat completions endpoint does before tokenizing (vllm-project/vllm:
// vllm/entrypoints/chat_utils.py at 001eadcf, vllm/renderers/hf.py,
// vllm/entrypoints/openai/chat_completion/protocol.py) with transformers'
// apply_chat_template (src/transformers/utils/chat_template_utils.py):
//
//   - the messages become vLLM's conversation (see conversation): content
//     parts joined with "\n" for a string-content template, kept as text
//     parts for one that loops over content (ContentFormat), tool-call
//     arguments parsed from their JSON strings;
//   - the tools are normalized as vLLM's pydantic model dumps them (see
//     normalizeTools);
//   - the template sees messages, tools (None without tools), documents
//     (None without), add_generation_prompt, the special tokens, and
//     chat_template_kwargs as variables (kwargs win over special tokens;
//     enable_thinking follows reasoning_effort unless the kwargs set it);
//   - raise_exception(msg) fails the render with a *TemplateError;
//     strftime_now(format) formats now (the caller's clock, in its own
//     location);
//   - with ContinueFinalMessage, the final message gets transformers' tag,
//     and the render is cut where the tag is (its trailing whitespace
//     trimmed when the template trimmed the tag's).
//
// Errors: ErrMultimodal for a media part; a *TemplateError for
// raise_exception; ErrRender for any other failure of the template
// (including a panic of the engine, which never escapes); ErrNoChatTemplate
// when no named template applies.
func (t *Template) Render(req *openai.Request, now time.Time) (out string, err error) {
	c, err := t.pick(req.Tools != nil)
	if err != nil {
		return "", err
	}
	conv, err := conversation(req.Messages, c.format)
	if err != nil {
		return "", err
	}
	var tools []any
	if req.Tools != nil {
		tools = normalizeTools(req.Tools)
	}
	kwargs, documents := templateKwargs(req)
	var final string
	if req.ContinueFinalMessage {
		if final, err = markFinal(conv, c); err != nil {
			return "", err
		}
	}

	data := make(map[string]jinja.Value, len(t.base)+len(kwargs)+6)
	maps.Copy(data, t.base)
	data["strftime_now"] = jinja.NewCallable("strftime_now", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		if len(args) != 1 {
			return jinja.Undefined(), fmt.Errorf("strftime_now() takes 1 argument (%d given)", len(args))
		}
		return jinja.NewString(strftime(strArg(args[0]), now)), nil
	})
	// Render variables shadow globals in Jinja2, so kwargs come after
	// raise_exception and strftime_now; the variables transformers passes
	// by name come last.
	for k, v := range kwargs {
		if !strings.HasPrefix(k, "__ic_") {
			data[k] = fromGo(v)
		}
	}
	data["messages"] = fromGo(conv)
	data["tools"] = jinja.None()
	if tools != nil {
		data["tools"] = fromGo(tools)
	}
	data["documents"] = jinja.None()
	if documents != nil {
		data["documents"] = fromGo(documents)
	}
	data["add_generation_prompt"] = jinja.NewBool(req.AddGenerationPrompt)

	out, err = execute(c.tmpl, data)
	if err != nil {
		return "", err
	}
	if req.ContinueFinalMessage {
		return cutAtFinal(out, final)
	}
	return out, nil
}

// execute runs the template, turning an engine panic into ErrRender.
func execute(t *jinja.Template, data map[string]jinja.Value) (out string, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = "", fmt.Errorf("%w: template engine failed: %v", ErrRender, r)
		}
	}()
	out, err = t.RenderValues(data)
	if err != nil {
		var te *TemplateError
		if errors.As(err, &te) {
			return "", te
		}
		return "", fmt.Errorf("%w: %v", ErrRender, err)
	}
	return out, nil
}

// raiseException is transformers' raise_exception global.
func raiseException(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) != 1 {
		return jinja.Undefined(), fmt.Errorf("raise_exception() takes 1 argument (%d given)", len(args))
	}
	return jinja.Undefined(), &TemplateError{Message: strArg(args[0])}
}

// markFinal appends continueTag to the final message's text (its last text
// part for list content) and returns that text as it was.
func markFinal(conv []any, c *compiled) (string, error) {
	if len(conv) == 0 {
		return "", fmt.Errorf("%w: continue_final_message is set but there is no message to continue", ErrRender)
	}
	if !c.hasContent {
		return "", fmt.Errorf("%w: continue_final_message is set to \"content\" but this is not an accepted field in the chat_template", ErrRender)
	}
	last := conv[len(conv)-1].(*openai.Object).Clone(0)
	conv[len(conv)-1] = last
	content, _ := last.Get("content")
	switch x := content.(type) {
	case string:
		last.Set("content", x+continueTag)
		return x, nil
	case []any:
		blocks := append([]any(nil), x...)
		for i := len(blocks) - 1; i >= 0; i-- {
			b, ok := blocks[i].(*openai.Object)
			if !ok {
				continue
			}
			if text, ok := b.Get("text"); ok {
				s, _ := text.(string)
				nb := b.Clone(0)
				nb.Set("text", s+continueTag)
				blocks[i] = nb
				last.Set("content", blocks)
				return s, nil
			}
		}
	}
	return "", fmt.Errorf("%w: continue_final_message is set but we could not find any text to continue in the final message", ErrRender)
}

// cutAtFinal cuts the render where the final message's tag is, as
// transformers' render_jinja_template does.
func cutAtFinal(out, final string) (string, error) {
	tag := strings.TrimSpace(continueTag)
	if !strings.Contains(out, pyStrip(final)) || !strings.Contains(out, tag) {
		return "", fmt.Errorf("%w: continue_final_message is set but the final message does not appear in the chat after applying the chat template", ErrRender)
	}
	loc := strings.LastIndex(out, tag)
	if strings.HasPrefix(out[loc:], continueTag) {
		return out[:loc], nil
	}
	return strings.TrimRightFunc(out[:loc], pyIsSpace), nil
}
