package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// JSON as Python's json.load gives it, for messages that quote what a file held the way the
// engine's Python does: objects keep their key order (pyDict), numbers stay json.Number so
// that 3 (an int) and 3.0 (a float) differ, and pyValue is Python's repr.

// pyError is an error whose text is the engine's own message, verbatim (capitals and
// final period included).
type pyError string

func (e pyError) Error() string { return string(e) }

func pyErrorf(format string, a ...any) error { return pyError(fmt.Sprintf(format, a...)) }

// pyDict is a decoded JSON object in file order; a repeated key keeps its first place and
// its last value, like a Python dict.
type pyDict struct {
	keys []string
	vals []any
}

func (d *pyDict) get(key string) (any, bool) {
	for i, k := range d.keys {
		if k == key {
			return d.vals[i], true
		}
	}
	return nil, false
}

// decodeJSON decodes one JSON value; objects become *pyDict, arrays []any, numbers
// json.Number.
func decodeJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, pyError("Extra data")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			d := &pyDict{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				if i := indexOf(d.keys, k); i >= 0 {
					d.vals[i] = v
				} else {
					d.keys, d.vals = append(d.keys, k), append(d.vals, v)
				}
			}
			_, err := dec.Token()
			return d, err
		case '[':
			list := []any{}
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				list = append(list, v)
			}
			_, err := dec.Token()
			return list, err
		}
	}
	return tok, nil
}

func indexOf(keys []string, k string) int {
	for i, x := range keys {
		if x == k {
			return i
		}
	}
	return -1
}

// isFloatLiteral says whether Python's json reads the number as a float.
func isFloatLiteral(n json.Number) bool { return strings.ContainsAny(string(n), ".eE") }

// pyInt is v as a Python int: a JSON integer, or true/false when withBool.
func pyInt(v any, withBool bool) (int, bool) {
	switch x := v.(type) {
	case json.Number:
		if isFloatLiteral(x) {
			return 0, false
		}
		n, err := strconv.Atoi(string(x))
		return n, err == nil
	case bool:
		if withBool {
			if x {
				return 1, true
			}
			return 0, true
		}
	}
	return 0, false
}

// pyNumber is v as a finite number (an int or a float, not a bool).
func pyNumber(v any) (float64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	f, err := n.Float64()
	return f, err == nil && !math.IsInf(f, 0) && !math.IsNaN(f)
}

// pyTypeName is type(v).__name__.
func pyTypeName(v any) string {
	switch x := v.(type) {
	case *pyDict:
		return "dict"
	case []any:
		return "list"
	case string:
		return "str"
	case json.Number:
		if isFloatLiteral(x) {
			return "float"
		}
		return "int"
	case bool:
		return "bool"
	}
	return "NoneType"
}

// pyValue is repr(v); a missing value (Go nil) is None.
func pyValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case bool:
		if x {
			return "True"
		}
		return "False"
	case string:
		return pyRepr(x)
	case json.Number:
		if !isFloatLiteral(x) {
			n, err := strconv.ParseInt(string(x), 10, 64)
			if err != nil {
				return string(x)
			}
			return strconv.FormatInt(n, 10)
		}
		f, err := x.Float64()
		if err != nil {
			return "inf"
		}
		return pyFloat(f)
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = pyValue(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case *pyDict:
		parts := make([]string, len(x.keys))
		for i, k := range x.keys {
			parts[i] = pyRepr(k) + ": " + pyValue(x.vals[i])
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	return "None"
}
