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
	fd := req.ProtoReflect().Descriptor().Fields().ByName(protoreflect.Name(field))
	if fd == nil || !fd.IsList() || fd.Message() == nil {
		return fmt.Errorf("internal: %s is not a repeated message field of %s", field, req.ProtoReflect().Descriptor().FullName())
	}
	md := req.ProtoReflect().Descriptor()
	if t[0] != '[' {
		if err := protojson.Unmarshal(b, req); err != nil {
			if singleItem(t, md, fd.Message()) {
				return fmt.Errorf("one %s object, not %s: wrap it in [ ] to send it as an array of one %[1]s", singular(field), shape)
			}
			return itemErr(b, field, shape, err, 0, itemSpans(b, field), md)
		}
		return nil
	}
	// A bare array: each item is unmarshalled on its own, so an error
	// names the item and a position in the input as typed.
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
			return itemErr(b, field, shape, err, start, spans, md)
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
// start of b: its position becomes one in b, a field is named as b spells
// it (asWritten; md is the request's descriptor) and, when the position
// falls in one of the items starting at spans, the item's index is named.
func itemErr(b []byte, field, shape string, err error, start int, spans []int, md protoreflect.MessageDescriptor) error {
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
	reason = asWritten(b, off, string(bytes.TrimSpace([]byte(reason))), md)
	idx := -1
	for i, s := range spans {
		if s <= off {
			idx = i
		}
	}
	if idx < 0 {
		return fmt.Errorf("not %s at %s: %s", shape, position(b, off), reason)
	}
	return fmt.Errorf("%s %d (at %s): %s", singular(field), idx, position(b, off), reason)
}

// singular names one item of the request's repeated field.
func singular(field string) string {
	if s := map[string]string{"events": "event", "stats": "stats entry"}[field]; s != "" {
		return s
	}
	return field + " item"
}

// singleItem reports whether the JSON object t (valid JSON) is one item
// of the request rather than the request: none of its keys is a field of
// req and some is a field of item (by proto or JSON name).
func singleItem(t []byte, req, item protoreflect.MessageDescriptor) bool {
	var keys map[string]json.RawMessage
	if json.Unmarshal(t, &keys) != nil {
		return false
	}
	has := func(md protoreflect.MessageDescriptor, k string) bool {
		return md.Fields().ByName(protoreflect.Name(k)) != nil || md.Fields().ByJSONName(k) != nil
	}
	some := false
	for k := range keys {
		if has(req, k) {
			return false
		}
		some = some || has(item, k)
	}
	return some
}

// fieldInReason matches the field protojson names in a reason: it names
// fields by their JSON (lowerCamelCase) name, whichever the input used.
var fieldInReason = regexp.MustCompile(`\bfield ([A-Za-z0-9_]+)`)

// asWritten rewrites the field named in reason, an error at byte off of
// b, to the spelling the input uses: protojson accepts waiting_requests
// and waitingRequests but reports waitingRequests, and names a map's
// value "value". The keys leading to off decide.
func asWritten(b []byte, off int, reason string, md protoreflect.MessageDescriptor) string {
	m := fieldInReason.FindStringSubmatchIndex(reason)
	if m == nil {
		return reason
	}
	name := reason[m[2]:m[3]]
	keys := keysAt(b, off)
	field := func(n string) string { return protoNameOf(md, n, map[protoreflect.FullName]bool{}) }
	use := name
	switch {
	case len(keys) == 0:
	case name == "value" && len(keys) >= 2 && field(keys[len(keys)-2]) != "":
		use = keys[len(keys)-2] + "[" + strconv.Quote(keys[len(keys)-1]) + "]"
	case field(name) != "" && field(name) == field(keys[len(keys)-1]):
		use = keys[len(keys)-1] // the same field, as typed
	}
	return reason[:m[2]] + use + reason[m[3]:]
}

// keysAt is the object keys on the way from b's top level to the value
// that starts at byte off (array indices left out), or nil when no value
// starts there. b must be valid JSON.
func keysAt(b []byte, off int) []string {
	dec := json.NewDecoder(bytes.NewReader(b))
	type level struct {
		object bool
		key    string
		want   bool // an object's next string is a key
	}
	var stack []level
	for {
		at := skipSpace(b, int(dec.InputOffset()))
		for at < len(b) && (b[at] == ':' || b[at] == ',') {
			at = skipSpace(b, at+1)
		}
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		isKey := len(stack) > 0 && stack[len(stack)-1].object && stack[len(stack)-1].want
		if isKey {
			stack[len(stack)-1].key, _ = tok.(string)
			stack[len(stack)-1].want = false
			continue
		}
		if at == off {
			var keys []string
			for _, l := range stack {
				if l.object {
					keys = append(keys, l.key)
				}
			}
			return keys
		}
		if len(stack) > 0 && stack[len(stack)-1].object {
			stack[len(stack)-1].want = true // a value ends; a key comes next
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, level{object: true, want: true})
		case json.Delim('['):
			stack = append(stack, level{})
		case json.Delim('}'), json.Delim(']'):
			if len(stack) == 0 {
				return nil
			}
			stack = stack[:len(stack)-1]
		}
	}
}

// protoNameOf is the proto name of the field called name (its JSON or
// proto name) in md or a message it holds, or "".
func protoNameOf(md protoreflect.MessageDescriptor, name string, seen map[protoreflect.FullName]bool) string {
	if seen[md.FullName()] {
		return ""
	}
	seen[md.FullName()] = true
	if f := md.Fields().ByJSONName(name); f != nil {
		return string(f.Name())
	}
	if f := md.Fields().ByName(protoreflect.Name(name)); f != nil {
		return string(f.Name())
	}
	fs := md.Fields()
	for i := 0; i < fs.Len(); i++ {
		f := fs.Get(i)
		if f.IsMap() {
			f = f.MapValue()
		}
		if f.Message() != nil {
			if n := protoNameOf(f.Message(), name, seen); n != "" {
				return n
			}
		}
	}
	return ""
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
