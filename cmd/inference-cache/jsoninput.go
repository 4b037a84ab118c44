package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// parseWriteInput fills req from b, the JSON input of `ingest` or
// `stats`: a request object, or a bare array of the items of its repeated
// field (field, e.g. "events"). Errors say where in b, as line:column
// (column in characters, as an editor counts), and for an item's content
// which item (0-based, the index the server's rejections use): an empty
// input (errEmptyInput), a syntax error, input cut short, data after the
// value, or a field protojson refuses; an error outside any item names
// shape, what was expected.
func parseWriteInput(b []byte, field, shape string, req proto.Message) error {
	t := bytes.TrimSpace(b)
	if len(t) == 0 {
		return errEmptyInput
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	var v json.RawMessage
	if err := dec.Decode(&v); err != nil {
		return syntaxErr(b, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		off := skipSpace(b, int(dec.InputOffset()))
		return fmt.Errorf("unexpected data after the JSON value at %s", position(b, off))
	}
	if t[0] != '[' {
		if err := protojson.Unmarshal(b, req); err != nil {
			return itemErr(b, field, shape, err, 0, itemSpans(b, field))
		}
		return nil
	}
	// A bare array: each item is unmarshalled on its own, so an error
	// names the item and a position in the input as typed.
	fd := req.ProtoReflect().Descriptor().Fields().ByName(protoreflect.Name(field))
	if fd == nil || !fd.IsList() || fd.Message() == nil {
		return fmt.Errorf("internal: %s is not a repeated message field of %s", field, req.ProtoReflect().Descriptor().FullName())
	}
	list := req.ProtoReflect().Mutable(fd).List()
	var items []json.RawMessage
	if err := json.Unmarshal(b, &items); err != nil {
		return syntaxErr(b, err)
	}
	spans := itemSpans(b, "")
	for i, it := range items {
		m := list.NewElement()
		if err := protojson.Unmarshal(it, m.Message().Interface()); err != nil {
			start := 0
			if i < len(spans) {
				start = spans[i]
			}
			return itemErr(b, field, shape, err, start, spans)
		}
		list.Append(m)
	}
	return nil
}

// syntaxErr places an encoding/json error in b.
func syntaxErr(b []byte, err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		// Offset is just past the offending byte.
		off := max(int(se.Offset)-1, 0)
		return fmt.Errorf("not valid JSON at %s: %s", position(b, off), se.Error())
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Errorf("not valid here at %s: expected %s, found a JSON %s", position(b, max(int(te.Offset)-1, 0)), te.Type, te.Value)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("the input ends at %s before its JSON value is closed (a missing ] or })", position(b, len(bytes.TrimRight(b, " \t\r\n"))))
	}
	return fmt.Errorf("not valid JSON: %v", err)
}

// errEmptyInput: the input holds nothing but white space.
var errEmptyInput = errors.New("the input is empty")

// protoPos matches protojson's "(line L:C)" (positions within what it
// was given).
var protoPos = regexp.MustCompile(`\(line (\d+):(\d+)\)`)

// itemErr rewrites protojson's error for input that started at byte
// start of b: its position becomes one in b and, when it falls in one of
// the items starting at spans, the item's index is named.
func itemErr(b []byte, field, shape string, err error, start int, spans []int) error {
	msg := err.Error()
	m := protoPos.FindStringSubmatchIndex(msg)
	if m == nil {
		return fmt.Errorf("not %s: %s", shape, msg)
	}
	line, _ := strconv.Atoi(msg[m[2]:m[3]])
	col, _ := strconv.Atoi(msg[m[4]:m[5]])
	off := offsetOf(b, start, line, col)
	reason := msg[m[1]:]
	if len(reason) > 0 && reason[0] == ':' {
		reason = reason[1:]
	}
	reason = string(bytes.TrimSpace([]byte(reason)))
	idx := -1
	for i, s := range spans {
		if s <= off {
			idx = i
		}
	}
	if idx < 0 {
		return fmt.Errorf("not %s at %s: %s", shape, position(b, off), reason)
	}
	singular := map[string]string{"events": "event", "stats": "stats entry"}[field]
	if singular == "" {
		singular = field + " item"
	}
	return fmt.Errorf("%s %d (at %s): %s", singular, idx, position(b, off), reason)
}

// itemSpans returns the start offsets in b of the items of the array at
// b's top level (field "") or under b's top-level key field. nil when
// there is none. b must be valid JSON.
func itemSpans(b []byte, field string) []int {
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return nil
	}
	if field != "" {
		if d, ok := tok.(json.Delim); !ok || d != '{' {
			return nil
		}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil
			}
			if k == field {
				if tok, err = dec.Token(); err != nil {
					return nil
				}
				break
			}
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				return nil
			}
		}
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return nil
	}
	var spans []int
	for dec.More() {
		spans = append(spans, skipSpaceComma(b, int(dec.InputOffset())))
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return spans
		}
	}
	return spans
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

func skipSpaceComma(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n' || b[i] == ',') {
		i++
	}
	return i
}

// position is "line L, column C" of byte offset off in b (both from 1;
// the column counts characters).
func position(b []byte, off int) string {
	off = min(off, len(b))
	line, lineStart := 1, 0
	for i := 0; i < off; i++ {
		if b[i] == '\n' {
			line, lineStart = line+1, i+1
		}
	}
	return fmt.Sprintf("line %d, column %d", line, utf8.RuneCount(b[lineStart:off])+1)
}

// offsetOf is the byte offset in b of line:col (from 1, col in
// characters) of the text that starts at byte start of b.
func offsetOf(b []byte, start, line, col int) int {
	i := start
	for l := 1; l < line && i < len(b); i++ {
		if b[i] == '\n' {
			l++
		}
	}
	for c := 1; c < col && i < len(b); c++ {
		_, n := utf8.DecodeRune(b[i:])
		i += n
	}
	return i
}
