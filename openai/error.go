package openai

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"unicode/utf8"
)

// Error is a request the server refuses, as vLLM's ErrorResponse carries
// it: Status is the HTTP status (also the body's "code", as vLLM sends
// it), Param the field as the client wrote it ("messages[2].content",
// "max_tokens"; "" when the body as a whole is at fault), Message the
// reason with the value and the limit. Type is derived from Status
// (TypeOf).
type Error struct {
	Status  int
	Param   string
	Message string
}

// Error returns "param: message" (just the message without a param).
func (e *Error) Error() string {
	if e.Param == "" {
		return e.Message
	}
	return e.Param + ": " + e.Message
}

// Errorf returns a 400 Error for param.
func Errorf(param, format string, a ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Param: param, Message: fmt.Sprintf(format, a...)}
}

// TypeOf is the error type vLLM names for an HTTP status: BadRequestError
// (400), NotFoundError (404), RequestEntityTooLargeError (413),
// InternalServerError (500), ServiceUnavailableError (503), else the
// status text without spaces.
func TypeOf(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "BadRequestError"
	case http.StatusNotFound:
		return "NotFoundError"
	case http.StatusRequestEntityTooLarge:
		return "RequestEntityTooLargeError"
	case http.StatusInternalServerError:
		return "InternalServerError"
	case http.StatusServiceUnavailable:
		return "ServiceUnavailableError"
	}
	b := []byte(http.StatusText(status))
	out := b[:0]
	for _, c := range b {
		if c != ' ' && c != '-' {
			out = append(out, c)
		}
	}
	return string(out) + "Error"
}

// ErrorInfo is the "error" object of an error body.
type ErrorInfo struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

// ErrorResponse is vLLM's error body: {"error": {"message", "type",
// "param", "code"}}.
type ErrorResponse struct {
	Error ErrorInfo `json:"error"`
}

// NewErrorResponse is the body for err: an *Error (anywhere in its chain)
// gives its status, param and message; any other error is a 500 with its
// text.
func NewErrorResponse(err error) ErrorResponse {
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{Status: http.StatusInternalServerError, Message: err.Error()}
	}
	info := ErrorInfo{Message: e.Error(), Type: TypeOf(e.Status), Code: e.Status}
	if e.Param != "" {
		p := e.Param
		info.Param = &p
	}
	return ErrorResponse{Error: info}
}

// WriteError writes err as an error body with its status (see
// NewErrorResponse) and returns the status written.
func WriteError(w http.ResponseWriter, err error) int {
	body := NewErrorResponse(err)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(body.Error.Code)
	_ = json.NewEncoder(w).Encode(body)
	return body.Error.Code
}

// maxEcho bounds a client's value echoed in an error message (a model
// name, say), in bytes.
const maxEcho = 256

// Clip is s cut to at most 256 bytes at a rune boundary, with "…" and
// the full length appended when cut, for echoing a client's value in an
// error message: a megabyte-long model name is not sent back whole.
func Clip(s string) string {
	if len(s) <= maxEcho {
		return s
	}
	cut := maxEcho
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "… (" + strconv.Itoa(len(s)) + " bytes)"
}
