package chattemplate

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	jinja "github.com/ardanlabs/jinja"
)

// filterFunc is the engine's calling convention for filters and globals:
// the filtered value first in args, then the filter's own arguments.
type filterFunc = func(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error)

// overrideFilters returns the filters rewriteSource renames templates'
// uses to, keyed by their render-variable names. The names start with
// "__ic_", which leaves the variables a template reads (a kwarg named
// format, say) to the request.
func overrideFilters() map[string]filterFunc {
	return map[string]filterFunc{
		printFilter:                   filterPrint,
		filterOverrides["tojson"]:     filterToJSON,
		filterOverrides["map"]:        filterMap,
		filterOverrides["selectattr"]: func(a []jinja.Value, kw map[string]jinja.Value) (jinja.Value, error) { return selectAttr(a, true) },
		filterOverrides["rejectattr"]: func(a []jinja.Value, kw map[string]jinja.Value) (jinja.Value, error) { return selectAttr(a, false) },
		filterOverrides["join"]:       filterJoin,
		filterOverrides["string"]:     filterString,
		filterOverrides["format"]:     filterFormat,
	}
}

// filterPrint renders a {{ }} value as Jinja2 does, with Python's str().
func filterPrint(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.NewString(""), nil
	}
	if args[0].IsString() {
		return args[0], nil
	}
	var b strings.Builder
	pyStr(&b, args[0])
	return jinja.NewString(b.String()), nil
}

// filterString is Jinja2's string filter: Python's str() of the value.
func filterString(args []jinja.Value, kw map[string]jinja.Value) (jinja.Value, error) {
	return filterPrint(args, kw)
}

// filterJoin is Jinja2's join(d=”, attribute=None): the items' str(),
// separated by d; a dict joins its keys and a string its characters.
func filterJoin(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.NewString(""), nil
	}
	sep := ""
	if len(args) > 1 {
		sep = strArg(args[1])
	} else if d, ok := kwargs["d"]; ok {
		sep = strArg(d)
	}
	items, err := iterate(args[0], "join")
	if err != nil {
		return jinja.Undefined(), err
	}
	attr, hasAttr := kwargs["attribute"]
	if len(args) > 2 {
		attr, hasAttr = args[2], true
	}
	var b strings.Builder
	for i, it := range items {
		if i > 0 {
			b.WriteString(sep)
		}
		if hasAttr {
			it = getAttrPath(it, attr)
		}
		pyStr(&b, it)
	}
	return jinja.NewString(b.String()), nil
}

// filterMap is Jinja2's map: map(attribute='a.b', default=...) takes an
// attribute (a dotted path, numeric parts indexing lists) of each item;
// map('filter', ...) applies one of the filters mapFilters lists.
func filterMap(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.NewList(nil), nil
	}
	items, err := iterate(args[0], "map")
	if err != nil {
		return jinja.Undefined(), err
	}
	out := make([]jinja.Value, len(items))
	if attr, ok := kwargs["attribute"]; ok {
		def, hasDef := kwargs["default"]
		for i, it := range items {
			v := getAttrPath(it, attr)
			if v.IsUndefined() && hasDef {
				v = def
			}
			out[i] = v
		}
		return jinja.NewList(out), nil
	}
	if len(args) < 2 || !args[1].IsString() {
		return jinja.Undefined(), errors.New("map: expected a filter name or attribute=")
	}
	name := args[1].AsString()
	fn, ok := mapFilters()[name]
	if !ok {
		return jinja.Undefined(), fmt.Errorf("map: filter %q is not supported inside map", name)
	}
	for i, it := range items {
		call := append([]jinja.Value{it}, args[2:]...)
		v, err := fn(call, kwargs)
		if err != nil {
			return jinja.Undefined(), err
		}
		out[i] = v
	}
	return jinja.NewList(out), nil
}

// mapFilters are the filters map('name') can apply.
func mapFilters() map[string]filterFunc {
	return map[string]filterFunc{
		"tojson": filterToJSON,
		"string": filterString,
		"trim": func(a []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
			return jinja.NewString(pyStrip(strArg(a[0]))), nil
		},
		"lower": func(a []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
			return jinja.NewString(strings.ToLower(strArg(a[0]))), nil
		},
		"upper": func(a []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
			return jinja.NewString(strings.ToUpper(strArg(a[0]))), nil
		},
		"length": func(a []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
			items, err := iterate(a[0], "length")
			if a[0].IsString() {
				return jinja.NewInt(int64(len([]rune(a[0].AsString())))), nil
			}
			return jinja.NewInt(int64(len(items))), err
		},
	}
}

// selectAttr is Jinja2's selectattr (keep true) and rejectattr (keep
// false): selectattr(attribute, test=None, *args) keeps the items whose
// attribute passes the test, or is truthy when no test is named.
func selectAttr(args []jinja.Value, keep bool) (jinja.Value, error) {
	name := "selectattr"
	if !keep {
		name = "rejectattr"
	}
	if len(args) < 2 {
		return jinja.Undefined(), fmt.Errorf("%s: missing attribute", name)
	}
	items, err := iterate(args[0], name)
	if err != nil {
		return jinja.Undefined(), err
	}
	var out []jinja.Value
	for _, it := range items {
		v := getAttrPath(it, args[1])
		pass := v.IsTruthy()
		if len(args) > 2 {
			pass, err = runTest(strArg(args[2]), v, args[3:])
			if err != nil {
				return jinja.Undefined(), err
			}
		}
		if pass == keep {
			out = append(out, it)
		}
	}
	return jinja.NewList(out), nil
}

// filterFormat is Jinja2's format filter, Python's printf-style "%"
// formatting, for the conversions templates use: %s %r %d %i %f %x %%,
// with flags, width and precision.
func filterFormat(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 || !args[0].IsString() {
		return jinja.Undefined(), errors.New("format: expected a format string")
	}
	f, vals := args[0].AsString(), args[1:]
	var b strings.Builder
	n := 0
	for i := 0; i < len(f); i++ {
		if f[i] != '%' {
			b.WriteByte(f[i])
			continue
		}
		j := i + 1
		for j < len(f) && strings.IndexByte("-+ 0#.0123456789", f[j]) >= 0 {
			j++
		}
		if j >= len(f) {
			return jinja.Undefined(), errors.New("format: incomplete format")
		}
		spec, verb := f[i+1:j], f[j]
		i = j
		if verb == '%' {
			b.WriteByte('%')
			continue
		}
		if n >= len(vals) {
			return jinja.Undefined(), errors.New("format: not enough arguments for format string")
		}
		v := vals[n]
		n++
		switch verb {
		case 's', 'r':
			var s strings.Builder
			if verb == 's' {
				pyStr(&s, v)
			} else {
				pyRepr(&s, v)
			}
			fmt.Fprintf(&b, "%"+spec+"s", s.String())
		case 'd', 'i':
			if !v.IsNumber() && !v.IsBool() {
				return jinja.Undefined(), fmt.Errorf("format: %%%c format: a real number is required, not %s", verb, kindName(v))
			}
			fmt.Fprintf(&b, "%"+spec+"d", int64(numArg(v)))
		case 'f', 'F', 'e', 'g', 'x', 'X', 'o':
			if !v.IsNumber() && !v.IsBool() {
				return jinja.Undefined(), fmt.Errorf("format: %%%c format: a real number is required, not %s", verb, kindName(v))
			}
			if verb == 'x' || verb == 'X' || verb == 'o' {
				fmt.Fprintf(&b, "%"+spec+string(verb), int64(numArg(v)))
			} else {
				if !strings.Contains(spec, ".") && verb != 'g' {
					spec += ".6"
				}
				fmt.Fprintf(&b, "%"+spec+string(verb), numArg(v))
			}
		default:
			return jinja.Undefined(), fmt.Errorf("format: unsupported format character '%c'", verb)
		}
	}
	if n < len(vals) {
		return jinja.Undefined(), errors.New("format: not all arguments converted during string formatting")
	}
	return jinja.NewString(b.String()), nil
}

// iterate lists what a Jinja2 for-loop over v visits: a list's items, a
// dict's keys, a string's characters; nothing for undefined and none is
// an error, as in Python.
func iterate(v jinja.Value, filter string) ([]jinja.Value, error) {
	switch {
	case v.IsList():
		return v.AsList().Items, nil
	case v.IsDict():
		keys := v.AsDict().Keys
		out := make([]jinja.Value, len(keys))
		for i, k := range keys {
			out[i] = jinja.NewString(k)
		}
		return out, nil
	case v.IsString():
		var out []jinja.Value
		for _, r := range v.AsString() {
			out = append(out, jinja.NewString(string(r)))
		}
		return out, nil
	case v.IsUndefined():
		return nil, nil
	}
	return nil, fmt.Errorf("%s: '%s' object is not iterable", filter, kindName(v))
}

// getAttrPath resolves Jinja2's attribute argument (of map, selectattr,
// join): a dotted path whose parts index dicts by key and lists by
// number; a missing step gives undefined.
func getAttrPath(v jinja.Value, attr jinja.Value) jinja.Value {
	if attr.IsInt() {
		return index(v, int(attr.AsInt()))
	}
	for _, part := range strings.Split(strArg(attr), ".") {
		if n, err := strconv.Atoi(part); err == nil && v.IsList() {
			v = index(v, n)
			continue
		}
		if !v.IsDict() {
			return jinja.Undefined()
		}
		next, ok := v.AsDict().Get(part)
		if !ok {
			return jinja.Undefined()
		}
		v = next
	}
	return v
}

func index(v jinja.Value, n int) jinja.Value {
	if !v.IsList() {
		return jinja.Undefined()
	}
	items := v.AsList().Items
	if n < 0 {
		n += len(items)
	}
	if n < 0 || n >= len(items) {
		return jinja.Undefined()
	}
	return items[n]
}

// strArg is a filter argument as a string (Python's str()).
func strArg(v jinja.Value) string {
	if v.IsString() {
		return v.AsString()
	}
	var b strings.Builder
	pyStr(&b, v)
	return b.String()
}

// numArg is a numeric filter argument as float64 (booleans count 0 and 1).
func numArg(v jinja.Value) float64 {
	switch {
	case v.IsInt():
		return float64(v.AsInt())
	case v.IsFloat():
		return v.AsFloat()
	case v.IsBool() && v.AsBool():
		return 1
	}
	return 0
}
