package openai

import (
	"bytes"
	"encoding/json"
)

// maxSpotBytes bounds what FirstTokenSpotter holds of an event still
// being received; an event longer than this counts as the first token.
const maxSpotBytes = 1 << 20

// FirstTokenSpotter spots the first event of an OpenAI stream (SSE, as
// vLLM's StreamingResponse sends it) that carries generated output: a
// chat chunk whose delta has non-empty content, reasoning or tool calls,
// or a completion chunk with non-empty text (the first chat chunk, role
// and "" content, is not one). It reads the bytes a gateway forwards, in
// pieces cut anywhere, event by event, only until it finds that event;
// after it, it looks at nothing and holds nothing. The zero value is
// ready; not safe for concurrent use. This is the time-to-first-token
// signal of the proxy and of the endpoint picker (contract §14).
type FirstTokenSpotter struct {
	pending []byte
	scanned int // bytes of pending known to hold no event end
	found   bool
}

// Feed takes the next bytes of the stream and reports whether they
// complete the first output event (true once, on the piece that does).
// An event over 1 MiB still being received counts as output.
func (s *FirstTokenSpotter) Feed(p []byte) bool {
	if s.found {
		return false
	}
	s.pending = append(s.pending, p...)
	for {
		i, n := eventEnd(s.pending, s.scanned)
		if i < 0 {
			s.scanned = max(0, len(s.pending)-3)
			if len(s.pending) > maxSpotBytes {
				s.found, s.pending = true, nil
				return true
			}
			return false
		}
		ev := s.pending[:i]
		if hasOutput(ev) {
			s.found, s.pending = true, nil
			return true
		}
		s.pending = s.pending[i+n:]
		s.scanned = 0
	}
}

// eventEnd finds the blank line ending an event in b at or after from:
// its offset and length ("\n\n" or "\r\n\r\n"), or -1.
func eventEnd(b []byte, from int) (int, int) {
	for i := from; i+1 < len(b); i++ {
		if b[i] != '\n' {
			continue
		}
		if b[i+1] == '\n' {
			return i, 2
		}
		if b[i+1] == '\r' && i+2 < len(b) && b[i+2] == '\n' {
			return i, 3
		}
	}
	return -1, 0
}

// chunkOutput is the part of a stream chunk that says whether it carries
// output.
type chunkOutput struct {
	Choices []struct {
		Text  *string `json:"text"`
		Delta *struct {
			Content          *string         `json:"content"`
			ReasoningContent *string         `json:"reasoning_content"`
			Reasoning        *string         `json:"reasoning"`
			ToolCalls        json.RawMessage `json:"tool_calls"`
		} `json:"delta"`
	} `json:"choices"`
}

// hasOutput reports whether one SSE event's data is a chunk with output.
func hasOutput(ev []byte) bool {
	var data []byte
	for len(ev) > 0 {
		line := ev
		if i := bytes.IndexByte(ev, '\n'); i >= 0 {
			line, ev = ev[:i], ev[i+1:]
		} else {
			ev = nil
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		if v, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			data = append(data, bytes.TrimPrefix(v, []byte(" "))...)
		}
	}
	if len(data) == 0 || data[0] != '{' {
		return false
	}
	var c chunkOutput
	if json.Unmarshal(data, &c) != nil {
		return false
	}
	nonEmpty := func(s *string) bool { return s != nil && *s != "" }
	for _, ch := range c.Choices {
		if nonEmpty(ch.Text) {
			return true
		}
		if d := ch.Delta; d != nil {
			if nonEmpty(d.Content) || nonEmpty(d.ReasoningContent) || nonEmpty(d.Reasoning) {
				return true
			}
			if t := bytes.TrimSpace(d.ToolCalls); len(t) > 2 && t[0] == '[' {
				return true
			}
		}
	}
	return false
}
