package chattemplate

import "errors"

// Sentinel errors. Every error this package returns wraps exactly one of
// them (a *TemplateError wraps ErrTemplateRaised), so callers can branch
// with errors.Is and show the wrapped message as the detail.
var (
	// ErrMultimodal is returned by Render for a request whose messages
	// hold an image, audio, video or embedding part. Such a prompt has no
	// key: the engine splices the media's tokens in by a processor this
	// package does not run, and the observation path does not index
	// multimodal blocks, so the caller picks a replica by load instead.
	ErrMultimodal = errors.New("chattemplate: request has multimodal content")

	// ErrTemplateRaised is wrapped by *TemplateError, the error of a
	// template that called raise_exception.
	ErrTemplateRaised = errors.New("chattemplate: chat template raised an exception")

	// ErrRender is returned when the template fails for another reason
	// while rendering: an unknown filter or test, a value of the wrong
	// type for an operation, continue_final_message on a template that
	// drops the final message. The engine's message is wrapped.
	ErrRender = errors.New("chattemplate: rendering failed")

	// ErrNoChatTemplate is returned by Load and Render when the model has
	// no usable chat template: none in the directory, or several named
	// ones and none of them named "default" (nor "tool_use" for a request
	// with tools).
	ErrNoChatTemplate = errors.New("chattemplate: no chat template")

	// ErrInvalidTemplate is returned by Load and New for a template that
	// does not compile, or model files that cannot be read or parsed.
	ErrInvalidTemplate = errors.New("chattemplate: invalid chat template")
)

// TemplateError is the error of a chat template that called
// raise_exception(message), as transformers raises
// jinja2.exceptions.TemplateError(message). vLLM answers such a request
// with 400 and the message.
type TemplateError struct {
	// Message is the argument of raise_exception, exactly.
	Message string
}

// Error returns the template's message after a fixed prefix.
func (e *TemplateError) Error() string {
	return "chattemplate: chat template raised an exception: " + e.Message
}

// Unwrap returns ErrTemplateRaised.
func (e *TemplateError) Unwrap() error { return ErrTemplateRaised }
