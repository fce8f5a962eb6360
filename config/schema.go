package config

import (
	"fmt"
	"math"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/opsbot/opsbot/commands"
)

// secretKeys are the keys whose values are secrets wherever they appear:
// errors about them name the key and the expected type, never the value.
var secretKeys = map[string]bool{
	"bot_token": true, "app_token": true, "signing_secret": true,
	"password": true, "access_token": true, "recovery_key": true,
}

// secretSections are the sections (and keys, by path) that hold secrets: no value under them is
// ever quoted in an error, whatever key it was written under.
var secretSections = map[string]bool{"slack": true, "matrix": true, "store.url": true}

// maxShownValue is the longest value an error quotes: a token pasted in the
// wrong place is longer.
const maxShownValue = 16

var (
	durationType = reflect.TypeFor[Duration]()
	grantType    = reflect.TypeFor[Grant]()
	plainKeyRE   = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)
)

// checkShape walks the YAML tree against the Config type before it is
// decoded, and removes from the tree what does not fit, so that the rest
// decodes and is validated: every wrong type, unknown key and repeated key is
// reported at once, each with its key path (services.qwen.gpus[1]) and what
// was expected in words. A value is quoted only where it cannot be a secret:
// a short scalar given for a number, a boolean or a duration, outside the
// adapters' sections and not under a secret's key.
func checkShape(root *yaml.Node) []error {
	if root == nil || root.Kind == 0 {
		return nil
	}
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return nil
		}
		root = root.Content[0]
	}
	w := &shapeWalk{}
	walkShape(root, reflect.TypeFor[Config](), "", false, w)
	return w.errs
}

// shapeWalk is the state of one checkShape.
type shapeWalk struct {
	errs   []error
	visits int // nodes visited, aliases expanded
}

// maxVisits bounds the nodes checkShape visits, aliases expanded, so that
// aliases of aliases cannot make it run for ever.
const maxVisits = 1 << 20

func join(path, key string) string {
	if !plainKeyRE.MatchString(key) {
		key = strconv.Quote(key)
		return path + "[" + key + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func kindWord(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			return "nothing"
		case "!!bool":
			return "true/false"
		case "!!int", "!!float":
			return "a number"
		}
		return "a string"
	}
	return "an alias"
}

func typeWord(t reflect.Type) string {
	switch {
	case t == durationType:
		return "a duration like 30s or 5m"
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "a mapping"
	case reflect.Slice:
		return "a list"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int64:
		return "a whole number"
	case reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	}
	return t.String()
}

// walkShape reports whether n fits t, after removing the entries of n's
// mappings and lists that do not.
func walkShape(n *yaml.Node, t reflect.Type, path string, secret bool, w *shapeWalk) bool {
	if w.visits++; w.visits > maxVisits {
		if w.visits == maxVisits+1 {
			w.errs = append(w.errs, fmt.Errorf("config: too many nodes once aliases are expanded (more than %d): write the config out", maxVisits))
		}
		return false
	}
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if path == "" && n.Kind != yaml.MappingNode {
		w.errs = append(w.errs, fmt.Errorf("config: expected a mapping of keys (store, ssh, hosts, ...), got %s (line %d)", kindWord(n), n.Line))
		return false
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return true // an empty value leaves the default
	}
	at := shapeAt{n: n, t: t, path: path, secret: secret}
	if t == durationType {
		return w.duration(at)
	}
	if t == grantType {
		return w.grant(at)
	}
	switch t.Kind() {
	case reflect.Struct:
		return w.structFields(at)
	case reflect.Map:
		return w.mapEntries(at)
	case reflect.Slice:
		return w.listItems(at)
	}
	return w.scalar(at)
}

// shapeAt is the node walkShape checks, where it is, and the type it must fit.
type shapeAt struct {
	n      *yaml.Node // aliases resolved
	t      reflect.Type
	path   string
	secret bool // under a secret's key or section: no value is quoted
}

// mismatch reports that at's node does not fit its type. The node's value
// is quoted only when showValue, for a short scalar outside secrets.
func (w *shapeWalk) mismatch(at shapeAt, showValue bool) {
	n := at.n
	got := kindWord(n)
	if showValue && n.Kind == yaml.ScalarNode && !at.secret && len(n.Value) <= maxShownValue {
		got = strconv.Quote(n.Value)
	}
	w.errs = append(w.errs, fmt.Errorf("%s: expected %s, got %s (line %d)", at.path, typeWord(at.t), got, n.Line))
}

// duration checks a Duration: a scalar ParseDuration reads, not negative.
func (w *shapeWalk) duration(at shapeAt) bool {
	if at.n.Kind != yaml.ScalarNode {
		w.mismatch(at, false)
		return false
	} else if d, err := ParseDuration(at.n.Value); err != nil || d < 0 {
		w.mismatch(at, true)
		return false
	}
	return true
}

// structFields checks a mapping against a struct's yaml keys, keeping the
// entries that fit: a repeated key, an unknown key and a value that does
// not fit its field are reported and removed.
func (w *shapeWalk) structFields(at shapeAt) bool {
	n, t := at.n, at.t
	if n.Kind != yaml.MappingNode {
		w.mismatch(at, false)
		return false
	}
	fields := map[string]reflect.StructField{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name != "" && name != "-" {
			fields[name] = f
		}
	}
	seen := map[string]int{}
	kept := n.Content[:0]
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		p := join(at.path, k.Value)
		if line, dup := seen[k.Value]; dup {
			w.errs = append(w.errs, fmt.Errorf("%s: given twice (lines %d and %d)", p, line, k.Line))
			continue
		}
		seen[k.Value] = k.Line
		f, ok := fields[k.Value]
		if !ok {
			w.errs = append(w.errs, fmt.Errorf("%s: unknown key (line %d)%s", p, k.Line, didYouMeanKey(at.path, k.Value, fields)))
			continue
		}
		if walkShape(v, f.Type, p, at.secret || secretKeys[k.Value] || secretSections[p], w) {
			kept = append(kept, k, v)
		}
	}
	n.Content = kept
	return true
}

// mapEntries checks a mapping against a map type, keeping the entries that
// fit: a repeated key, a key that is not a string and a value that does not
// fit are reported and removed.
func (w *shapeWalk) mapEntries(at shapeAt) bool {
	n, t := at.n, at.t
	if n.Kind != yaml.MappingNode {
		w.mismatch(at, false)
		return false
	}
	seen := map[string]int{}
	kept := n.Content[:0]
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		p := join(at.path, k.Value)
		if line, dup := seen[k.Value]; dup {
			w.errs = append(w.errs, fmt.Errorf("%s: given twice (lines %d and %d)", p, line, k.Line))
			continue
		}
		seen[k.Value] = k.Line
		if k.Kind != yaml.ScalarNode {
			w.errs = append(w.errs, fmt.Errorf("%s: keys are strings, got %s (line %d)", at.path, kindWord(k), k.Line))
			continue
		}
		if walkShape(v, t.Elem(), p, at.secret, w) {
			kept = append(kept, k, v)
		}
	}
	n.Content = kept
	return true
}

// listItems checks a list against a slice type, keeping the items that fit.
func (w *shapeWalk) listItems(at shapeAt) bool {
	n := at.n
	if n.Kind != yaml.SequenceNode {
		w.mismatch(at, false)
		return false
	}
	kept := n.Content[:0]
	for i, v := range n.Content {
		if walkShape(v, at.t.Elem(), fmt.Sprintf("%s[%d]", at.path, i), at.secret, w) {
			kept = append(kept, v)
		}
	}
	n.Content = kept
	return true
}

// scalar checks a string, a boolean or a whole number; any other kind of
// type takes what yaml gives it.
func (w *shapeWalk) scalar(at shapeAt) bool {
	n := at.n
	switch at.t.Kind() {
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			w.mismatch(at, false)
			return false
		}
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
			w.mismatch(at, true)
			return false
		}
	case reflect.Int, reflect.Int64:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
			w.mismatch(at, true)
			return false
		}
		if _, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64); err != nil {
			w.mismatch(at, true)
			return false
		}
	case reflect.Float64:
		if n.Kind != yaml.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!float") {
			w.mismatch(at, true)
			return false
		}
		if f, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64); err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			w.mismatch(at, true)
			return false
		}
	}
	return true
}

// didYouMeanKey is "; did you mean PATH.KEY?" naming the key of fields
// nearest to key, or "" when none is near.
func didYouMeanKey(path, key string, fields map[string]reflect.StructField) string {
	names := make([]string, 0, len(fields))
	for n := range fields {
		names = append(names, n)
	}
	sort.Strings(names)
	if m := commands.Closest(key, names); m != "" && m != key {
		return "; did you mean " + join(path, m) + "?"
	}
	return ""
}
