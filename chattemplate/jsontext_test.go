package chattemplate

import (
	"reflect"
	"strings"
	"testing"
)

// decodeJSONSeeds are documents where JSON decoders are known to differ:
// invalid UTF-8, lone surrogates, names given twice (first place, last
// value), numbers of each kind, space, trailing data, nesting at the
// limit.
var decodeJSONSeeds = []string{
	`{"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}], "tools": [{"z": 1, "a": {"y": 2.5, "b": null}}]}`,
	"{\"a\": \"\xff\", \"b\xfe\": \"a\xc3\", \"c\": \"\xc0\xaf \xed\xa0\x80 \xf4\x90\x80\x80\"}",
	`{"a": "\ud800", "b": "\udc00x", "c": "\ud800\u0041", "d": "\ud83d\ude00", "e": "\u0000\"\\\/\b\f\n\r\t"}`,
	`{"b": 1, "a": 2, "b": 3, "c": {"x": 1, "x": [true, false]}}`,
	`[-0, 1e400, -1e400, 1E+2, 0.0000, 123456789012345678901234567890, 9223372036854775807, -9223372036854775808, 9223372036854775808, -1.5e-3]`,
	" {\t\"a\" \r\n:\n [ 1 , { \"b\" : null } ] , \"c\":\"\" } ",
	`{"a": 1} {"b": 2}`,
	`{"a": 1}x`,
	`{"a": 01}`,
	`{"a": "x\u12"}`,
	`{"a": [1, 2,]}`,
	`{"a" 1}`,
	`"x"`,
	`3`,
	`null`,
	``,
	strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth),
	strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1),
	strings.Repeat(`{"a":`, maxDepth) + `1` + strings.Repeat("}", maxDepth),
	strings.Repeat(`{"a":`, maxDepth+1) + `1` + strings.Repeat("}", maxDepth+1),
}

// decodeFast accepts what encoding/json's Decoder accepts within maxDepth,
// with the same values; the rest goes to decodeStd.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range decodeJSONSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		want, err := decodeStd(data)
		got, ok := decodeFast(data)
		if ok != (err == nil) {
			t.Fatalf("%q: jsontext accepts: %v; encoding/json: %v", data, ok, err)
		}
		if ok && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: decoded %#v, want %#v", data, got, want)
		}
	})
}
