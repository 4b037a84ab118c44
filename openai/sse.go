package openai

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// Done is the data of the event that ends an OpenAI stream.
const Done = "[DONE]"

// SSEWriter writes an OpenAI stream: "data: <json>\n\n" events, each
// flushed to the client as soon as it is written, and the final
// "data: [DONE]\n\n". Not safe for concurrent use.
type SSEWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

// NewSSEWriter sets the stream's headers (Content-Type: text/event-stream,
// as vLLM's StreamingResponse), sends them with status 200 and flushes, so
// the client knows the request was accepted before the first token. It
// fails when w cannot flush.
func NewSSEWriter(w http.ResponseWriter) (*SSEWriter, error) {
	s := &SSEWriter{w: w, rc: http.NewResponseController(w)}
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	if err := s.rc.Flush(); err != nil {
		return nil, fmt.Errorf("openai: stream: %w", err)
	}
	return s, nil
}

// WriteJSON sends v as one event and flushes it.
func (s *SSEWriter) WriteJSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("openai: stream event: %w", err)
	}
	return s.WriteData(b)
}

// WriteData sends data (one line of JSON, or Done) as one event and
// flushes it.
func (s *SSEWriter) WriteData(data []byte) error {
	buf := make([]byte, 0, len(data)+8)
	buf = append(append(append(buf, "data: "...), data...), "\n\n"...)
	if _, err := s.w.Write(buf); err != nil {
		return err
	}
	return s.rc.Flush()
}

// WriteDone sends "data: [DONE]".
func (s *SSEWriter) WriteDone() error { return s.WriteData([]byte(Done)) }

// MaxEventBytes bounds one event read by SSEReader (a chunk with a long
// delta or logprobs stays far below it).
const MaxEventBytes = 4 << 20

// ErrEventTooLarge is returned by SSEReader.Next for an event over
// MaxEventBytes.
var ErrEventTooLarge = errors.New("openai: stream event over MaxEventBytes")

// SSEReader reads the data of an OpenAI stream event by event. Lines
// other than "data:" (comments, event:, id:) are skipped; the data of a
// multi-line event is joined with "\n", as the SSE standard says.
type SSEReader struct {
	sc *bufio.Scanner
}

// NewSSEReader reads events from r.
func NewSSEReader(r io.Reader) *SSEReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxEventBytes)
	return &SSEReader{sc: sc}
}

// Next returns the next event's data (Done for the end marker), io.EOF
// after the last event, or a read error (ErrEventTooLarge for an
// oversized line).
func (r *SSEReader) Next() ([]byte, error) {
	var data []byte
	have := false
	for r.sc.Scan() {
		line := r.sc.Bytes()
		if len(line) == 0 {
			if have {
				return data, nil
			}
			continue
		}
		v, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue
		}
		v = bytes.TrimPrefix(v, []byte(" "))
		if have {
			data = append(data, '\n')
		}
		data = append(data, v...)
		have = true
	}
	if err := r.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, ErrEventTooLarge
		}
		return nil, err
	}
	if have {
		return data, nil
	}
	return nil, io.EOF
}
