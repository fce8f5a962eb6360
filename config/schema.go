package config

import (
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// secretKeys are the keys whose values are secrets wherever they appear:
// errors about them name the key and the expected type, never the value.
var secretKeys = map[string]bool{
	"bot_token": true, "app_token": true, "signing_secret": true,
	"password": true, "access_token": true,
}

// secretSections are the sections (and keys, by path) that hold secrets: no value under them is
// ever quoted in an error, whatever key it was written under.
var secretSections = map[string]bool{"slack": true, "matrix": true, "store.url": true}

// maxShownValue is the longest value an error quotes: a token pasted in the
// wrong place is longer.
const maxShownValue = 16

var (
	durationType = reflect.TypeFor[Duration]()
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
	bad := func(showValue bool) {
		got := kindWord(n)
		if showValue && n.Kind == yaml.ScalarNode && !secret && len(n.Value) <= maxShownValue {
			got = strconv.Quote(n.Value)
		}
		w.errs = append(w.errs, fmt.Errorf("%s: expected %s, got %s (line %d)", path, typeWord(t), got, n.Line))
	}
	if path == "" && n.Kind != yaml.MappingNode {
		w.errs = append(w.errs, fmt.Errorf("config: expected a mapping of keys (store, ssh, hosts, ...), got %s (line %d)", kindWord(n), n.Line))
		return false
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return true // an empty value leaves the default
	}
	switch {
	case t == durationType:
		if n.Kind != yaml.ScalarNode {
			bad(false)
			return false
		} else if d, err := ParseDuration(n.Value); err != nil || d < 0 {
			bad(true)
			return false
		}
		return true
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			bad(false)
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
			p := join(path, k.Value)
			if line, dup := seen[k.Value]; dup {
				w.errs = append(w.errs, fmt.Errorf("%s: given twice (lines %d and %d)", p, line, k.Line))
				continue
			}
			seen[k.Value] = k.Line
			f, ok := fields[k.Value]
			if !ok {
				w.errs = append(w.errs, fmt.Errorf("%s: unknown key (line %d)", p, k.Line))
				continue
			}
			if walkShape(v, f.Type, p, secret || secretKeys[k.Value] || secretSections[p], w) {
				kept = append(kept, k, v)
			}
		}
		n.Content = kept
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			bad(false)
			return false
		}
		seen := map[string]int{}
		kept := n.Content[:0]
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := join(path, k.Value)
			if line, dup := seen[k.Value]; dup {
				w.errs = append(w.errs, fmt.Errorf("%s: given twice (lines %d and %d)", p, line, k.Line))
				continue
			}
			seen[k.Value] = k.Line
			if k.Kind != yaml.ScalarNode {
				w.errs = append(w.errs, fmt.Errorf("%s: keys are strings, got %s (line %d)", path, kindWord(k), k.Line))
				continue
			}
			if walkShape(v, t.Elem(), p, secret, w) {
				kept = append(kept, k, v)
			}
		}
		n.Content = kept
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			bad(false)
			return false
		}
		kept := n.Content[:0]
		for i, v := range n.Content {
			if walkShape(v, t.Elem(), fmt.Sprintf("%s[%d]", path, i), secret, w) {
				kept = append(kept, v)
			}
		}
		n.Content = kept
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			bad(false)
			return false
		}
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
			bad(true)
			return false
		}
	case reflect.Int, reflect.Int64:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
			bad(true)
			return false
		}
		if _, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64); err != nil {
			bad(true)
			return false
		}
	}
	return true
}
