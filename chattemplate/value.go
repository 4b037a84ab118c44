package chattemplate

import (
	"encoding/json"
	"sort"
	"strconv"
	"strings"

	jinja "github.com/ardanlabs/jinja"

	"github.com/inference-cache/inference-cache/openai"
)

// numberValue keeps a JSON integer as int64 when it fits and any other
// number as float64, as json.loads keeps int and float apart. An integer
// beyond int64 becomes a float64: Python would keep it exact.
func numberValue(n json.Number) any {
	s := string(n)
	if !strings.ContainsAny(s, ".eE") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return i
		}
	}
	// An out-of-range exponent gives ±Inf with an error, as Python's
	// float() gives inf.
	f, _ := strconv.ParseFloat(s, 64)
	return f
}

// fromGo converts a JSON-like Go value (see openai.Object) into a fresh
// template value. Every render converts anew: templates can change lists
// and dicts in place (.append, .update), which must not reach the
// caller's request or another render. Strings are shared, being
// immutable. A value of another Go type, or nested deeper than
// openai.MaxNesting (which only a cycle of Go values reaches: decoded
// requests nest less), is undefined for the template.
func fromGo(v any) jinja.Value { return fromGoAt(v, 0) }

func fromGoAt(v any, depth int) jinja.Value {
	switch v.(type) {
	case []any, *openai.Object, map[string]any:
		if depth >= openai.MaxNesting {
			return jinja.Undefined()
		}
	}
	switch x := v.(type) {
	case nil:
		return jinja.None()
	case jinja.Value:
		return x
	case bool:
		return jinja.NewBool(x)
	case string:
		return jinja.NewString(x)
	case int:
		return jinja.NewInt(int64(x))
	case int64:
		return jinja.NewInt(x)
	case float64:
		return jinja.NewFloat(x)
	case json.Number:
		return fromGo(numberValue(x))
	case []any:
		items := make([]jinja.Value, len(x))
		for i, e := range x {
			items[i] = fromGoAt(e, depth+1)
		}
		return jinja.NewList(items)
	case *openai.Object:
		d := jinja.NewDict()
		dict := d.AsDict()
		if x != nil {
			dict.Keys = make([]string, 0, x.Len())
			for _, k := range x.Keys() {
				e, _ := x.Get(k)
				dict.Set(k, fromGoAt(e, depth+1))
			}
		}
		return d
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		d := jinja.NewDict()
		for _, k := range keys {
			d.AsDict().Set(k, fromGoAt(x[k], depth+1))
		}
		return d
	}
	return jinja.Undefined()
}
