package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
)

// Object is a JSON object of a request body that keeps its names in the
// order the client wrote them, as the dict Python's json.loads gives vLLM
// does: chat templates print objects with tojson (tool schemas, tool-call
// arguments), so the order is part of the prompt.
//
// The values an Object holds are those ParseJSON gives: nil, bool,
// string, json.Number, []any and *Object. Values built in Go may also be
// int, int64, float64 and map[string]any (whose names a template then
// sees sorted, having no order of their own).
//
// The zero Object is empty and ready to use. An Object is not safe for
// concurrent modification; decoding builds it and everything after only
// reads it.
type Object struct {
	keys []string
	vals map[string]any
}

// NewObject returns an Object holding the name/value pairs of kv in
// order: kv alternates names (strings) and values. It panics when kv has
// odd length or a name is not a string; it is meant for literals in code
// and tests.
func NewObject(kv ...any) *Object {
	if len(kv)%2 != 0 {
		panic("openai.NewObject: odd number of arguments")
	}
	o := &Object{keys: make([]string, 0, len(kv)/2), vals: make(map[string]any, len(kv)/2)}
	for i := 0; i < len(kv); i += 2 {
		k, ok := kv[i].(string)
		if !ok {
			panic(fmt.Sprintf("openai.NewObject: name %d is %T, not string", i/2, kv[i]))
		}
		o.Set(k, kv[i+1])
	}
	return o
}

// Len is the number of names.
func (o *Object) Len() int {
	if o == nil {
		return 0
	}
	return len(o.keys)
}

// Keys are the names in order. The slice is the Object's own: do not
// modify it.
func (o *Object) Keys() []string {
	if o == nil {
		return nil
	}
	return o.keys
}

// Get is name's value and whether the name is present (a present name may
// hold nil, JSON null).
func (o *Object) Get(name string) (any, bool) {
	if o == nil {
		return nil, false
	}
	v, ok := o.vals[name]
	return v, ok
}

// Set sets name to v. A new name goes last; a name already present keeps
// its place, as in a Python dict (and as json.loads keeps a name written
// twice: first place, last value).
func (o *Object) Set(name string, v any) {
	if o.vals == nil {
		o.vals = make(map[string]any, 4)
	}
	if _, ok := o.vals[name]; !ok {
		o.keys = append(o.keys, name)
	}
	o.vals[name] = v
}

// Clone is a shallow copy of o (the values are shared) with room for
// extra more names.
func (o *Object) Clone(extra int) *Object {
	c := &Object{keys: make([]string, len(o.Keys()), o.Len()+extra), vals: make(map[string]any, o.Len()+extra)}
	if o != nil {
		copy(c.keys, o.keys)
		for k, v := range o.vals {
			c.vals[k] = v
		}
	}
	return c
}

// UnmarshalJSON decodes a JSON object with ParseJSON, keeping its name
// order and its numbers as written.
func (o *Object) UnmarshalJSON(data []byte) error {
	v, err := ParseJSON(data)
	if err != nil {
		return err
	}
	obj, ok := v.(*Object)
	if !ok {
		return fmt.Errorf("openai: expected a JSON object, got %s", describe(v))
	}
	*o = *obj
	return nil
}

// MarshalJSON encodes o compactly with its names in order (values as
// encoding/json encodes them; a map[string]any with sorted names).
func (o *Object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	if err := writeJSON(&b, o); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func writeJSON(b *bytes.Buffer, v any) error {
	switch x := v.(type) {
	case *Object:
		b.WriteByte('{')
		for i, k := range x.Keys() {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeJSON(b, k); err != nil {
				return err
			}
			b.WriteByte(':')
			if err := writeJSON(b, x.vals[k]); err != nil {
				return err
			}
		}
		b.WriteByte('}')
		return nil
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeJSON(b, e); err != nil {
				return err
			}
		}
		b.WriteByte(']')
		return nil
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		o := &Object{keys: keys, vals: x}
		return writeJSON(b, o)
	}
	enc, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b.Write(enc)
	return nil
}
