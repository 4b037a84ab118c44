package chattemplate

import (
	"fmt"
	"strings"

	jinja "github.com/ardanlabs/jinja"
)

// runTest applies the Jinja2 test name to v with the test's arguments, for
// selectattr and rejectattr.
func runTest(name string, v jinja.Value, args []jinja.Value) (bool, error) {
	arg := func() (jinja.Value, error) {
		if len(args) == 0 {
			return jinja.Undefined(), fmt.Errorf("test %q needs an argument", name)
		}
		return args[0], nil
	}
	switch name {
	case "defined":
		return !v.IsUndefined(), nil
	case "undefined":
		return v.IsUndefined(), nil
	case "none":
		return v.IsNone(), nil
	case "true":
		return v.IsBool() && v.AsBool(), nil
	case "false":
		return v.IsBool() && !v.AsBool(), nil
	case "boolean":
		return v.IsBool(), nil
	case "integer":
		return v.IsInt(), nil
	case "float":
		return v.IsFloat(), nil
	case "number":
		return v.IsNumber() || v.IsBool(), nil
	case "string":
		return v.IsString(), nil
	case "mapping":
		return v.IsDict(), nil
	case "iterable", "sequence":
		return v.IsList() || v.IsDict() || v.IsString(), nil
	case "callable":
		return v.IsCallable(), nil
	case "odd", "even":
		if !v.IsInt() {
			return false, fmt.Errorf("test %q needs an integer", name)
		}
		return (v.AsInt()%2 != 0) == (name == "odd"), nil
	case "lower", "upper":
		s := strArg(v)
		if name == "lower" {
			return s == strings.ToLower(s), nil
		}
		return s == strings.ToUpper(s), nil
	case "eq", "equalto", "==", "sameas":
		a, err := arg()
		return pyEqual(v, a), err
	case "ne", "!=":
		a, err := arg()
		return !pyEqual(v, a), err
	case "lt", "lessthan", "<", "le", "<=", "gt", "greaterthan", ">", "ge", ">=":
		a, err := arg()
		if err != nil {
			return false, err
		}
		c, ok := pyCompare(v, a)
		if !ok {
			return false, fmt.Errorf("test %q: cannot compare %s and %s", name, kindName(v), kindName(a))
		}
		switch name {
		case "lt", "lessthan", "<":
			return c < 0, nil
		case "le", "<=":
			return c <= 0, nil
		case "gt", "greaterthan", ">":
			return c > 0, nil
		}
		return c >= 0, nil
	case "in":
		a, err := arg()
		if err != nil {
			return false, err
		}
		return pyIn(v, a), nil
	}
	return false, fmt.Errorf("no test named %q", name)
}

// pyEqual is Python's == on template values: numbers compare by value
// (1 == 1.0 == True), containers element by element.
func pyEqual(a, b jinja.Value) bool {
	if (a.IsNumber() || a.IsBool()) && (b.IsNumber() || b.IsBool()) {
		return numArg(a) == numArg(b)
	}
	switch {
	case a.IsString() && b.IsString():
		return a.AsString() == b.AsString()
	case a.IsNone() && b.IsNone(), a.IsUndefined() && b.IsUndefined():
		return true
	case a.IsList() && b.IsList():
		x, y := a.AsList().Items, b.AsList().Items
		if len(x) != len(y) {
			return false
		}
		for i := range x {
			if !pyEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case a.IsDict() && b.IsDict():
		x, y := a.AsDict(), b.AsDict()
		if x.Len() != y.Len() {
			return false
		}
		for _, k := range x.Keys {
			w, ok := y.Get(k)
			if !ok || !pyEqual(x.Data[k], w) {
				return false
			}
		}
		return true
	}
	return false
}

// pyCompare orders numbers and strings as Python does; ok is false for
// values Python cannot order.
func pyCompare(a, b jinja.Value) (int, bool) {
	if (a.IsNumber() || a.IsBool()) && (b.IsNumber() || b.IsBool()) {
		x, y := numArg(a), numArg(b)
		switch {
		case x < y:
			return -1, true
		case x > y:
			return 1, true
		}
		return 0, true
	}
	if a.IsString() && b.IsString() {
		return strings.Compare(a.AsString(), b.AsString()), true
	}
	return 0, false
}

// pyIn is Python's "v in container".
func pyIn(v, container jinja.Value) bool {
	switch {
	case container.IsString():
		return v.IsString() && strings.Contains(container.AsString(), v.AsString())
	case container.IsDict():
		return v.IsString() && container.AsDict().Has(v.AsString())
	case container.IsList():
		for _, e := range container.AsList().Items {
			if pyEqual(v, e) {
				return true
			}
		}
	}
	return false
}
