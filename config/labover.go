package config

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// LabKeys are the top-level keys the lab supplies to a config given with
// --lab: the config file must not set them, except the LabServiceKeys of
// the lab's services.
var LabKeys = []string{"ssh", "hosts", "services", "default_service", "bench"}

// LabServiceKeys are the keys of a supplied service that a config file on
// top of the lab's may still set (services.qwen.auto_recover: true): the
// watchdog's options, which the lab has no opinion on. Every other key of
// a service stays the lab's.
var LabServiceKeys = []string{"auto_recover"}

// LoadOver reads the config file at path as Load does, on top of base (the
// text of a config whose paths are absolute, such as the lab's): base
// supplies the top-level keys in supplied, which the file must not set (a
// problem naming the key and the file) but for the LabServiceKeys of base's
// services, and every other top-level key the file leaves out. Relative
// paths in the file resolve against its directory.
func LoadOver(path string, base []byte, supplied []string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	var problems []error
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o002 != 0 {
		problems = append(problems, worldWritable(path, fi, "what opsbot does as root on your hosts"))
	}
	top, err := decodeNode(data)
	if err != nil {
		return nil, &Error{Problems: []error{err}}
	}
	under, err := decodeNode(base)
	if err != nil {
		return nil, fmt.Errorf("base config: %w", err)
	}
	if top.Kind == 0 {
		top = &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{{Kind: yaml.MappingNode, Tag: "!!map"}}}
	}
	m := top.Content[0]
	if m.Kind != yaml.MappingNode || under.Kind == 0 || under.Content[0].Kind != yaml.MappingNode {
		return Load(path) // reports the shape of the file
	}
	has := topKeys(m)
	problems = append(problems, suppliedSet(path, m, supplied)...)
	b := under.Content[0]
	if i := keyIndex(m, "services"); i >= 0 && slices.Contains(supplied, "services") {
		// The file's services only add LabServiceKeys to base's.
		merged, ps := overServices(path, m.Content[i+1], b)
		problems = append(problems, ps...)
		m.Content[i+1] = merged
	}
	for i := 0; i+1 < len(b.Content); i += 2 {
		if _, ok := has[b.Content[i].Value]; !ok {
			m.Content = append(m.Content, b.Content[i], b.Content[i+1])
		}
	}
	c, ps := parseNode(top, filepath.Dir(abs), os.LookupEnv)
	c.File = abs
	problems = append(problems, ps...)
	problems = append(problems, c.trust(path)...)
	if len(problems) > 0 {
		return nil, &Error{Problems: problems}
	}
	return c, nil
}

func topKeys(m *yaml.Node) map[string]int {
	has := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		has[m.Content[i].Value] = m.Content[i].Line
	}
	return has
}

// keyIndex returns the index in mapping m of key's key node, or -1.
func keyIndex(m *yaml.Node, key string) int {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return i
		}
	}
	return -1
}

// suppliedSet reports the keys of supplied that the top-level mapping m of
// the file at path sets; for services, the keys of a service other than
// LabServiceKeys.
func suppliedSet(path string, m *yaml.Node, supplied []string) []error {
	var problems []error
	for _, k := range supplied {
		i := keyIndex(m, k)
		if i < 0 {
			continue
		}
		if v := m.Content[i+1]; k == "services" && v.Kind == yaml.MappingNode {
			for j := 0; j+1 < len(v.Content); j += 2 {
				name, svc := v.Content[j].Value, v.Content[j+1]
				if svc.Kind != yaml.MappingNode {
					problems = append(problems, labServiceKey(path, "services."+name, v.Content[j].Line))
					continue
				}
				for n := 0; n+1 < len(svc.Content); n += 2 {
					if key := svc.Content[n].Value; !slices.Contains(LabServiceKeys, key) {
						problems = append(problems, labServiceKey(path, "services."+name+"."+key, svc.Content[n].Line))
					}
				}
			}
			continue
		}
		problems = append(problems, fmt.Errorf("%s: set in %s (line %d), but --lab supplies it (and %s): remove it from the file, or run without --lab",
			k, path, m.Content[i].Line, strings.Join(supplied, ", ")))
	}
	return problems
}

func labServiceKey(path, key string, line int) error {
	return fmt.Errorf("%s: set in %s (line %d), but --lab supplies its services: of a lab service the file may set only %s (the watchdog's options); remove it from the file, or run without --lab",
		key, path, line, strings.Join(LabServiceKeys, ", "))
}

// overServices returns base's services with the LabServiceKeys the file's
// services node sets, and a problem for each service base does not have.
func overServices(path string, file, base *yaml.Node) (*yaml.Node, []error) {
	i := keyIndex(base, "services")
	if i < 0 || base.Content[i+1].Kind != yaml.MappingNode || file.Kind != yaml.MappingNode {
		return file, nil
	}
	merged := base.Content[i+1]
	var names []string
	for j := 0; j+1 < len(merged.Content); j += 2 {
		names = append(names, merged.Content[j].Value)
	}
	var problems []error
	for j := 0; j+1 < len(file.Content); j += 2 {
		name, svc := file.Content[j].Value, file.Content[j+1]
		k := keyIndex(merged, name)
		if k < 0 {
			problems = append(problems, fmt.Errorf("services.%s: set in %s (line %d), but the lab has no service %s (it has %s)",
				name, path, file.Content[j].Line, name, strings.Join(names, ", ")))
			continue
		}
		into := merged.Content[k+1]
		if svc.Kind != yaml.MappingNode || into.Kind != yaml.MappingNode {
			continue // suppliedSet reported it
		}
		for n := 0; n+1 < len(svc.Content); n += 2 {
			if !slices.Contains(LabServiceKeys, svc.Content[n].Value) {
				continue // suppliedSet reported it
			}
			if at := keyIndex(into, svc.Content[n].Value); at >= 0 {
				into.Content[at+1] = svc.Content[n+1]
			} else {
				into.Content = append(into.Content, svc.Content[n], svc.Content[n+1])
			}
		}
	}
	return merged, problems
}

// CheckNotSet reports, as a *Error, the keys of supplied that the config
// file at path sets at its top level: a quick check before starting what
// supplies them (LoadOver checks it again, with everything else).
func CheckNotSet(path string, supplied []string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read config: %w", err)
	}
	top, err := decodeNode(data)
	if err != nil {
		return &Error{Problems: []error{err}}
	}
	if top.Kind == 0 || top.Content[0].Kind != yaml.MappingNode {
		return nil
	}
	if ps := suppliedSet(path, top.Content[0], supplied); len(ps) > 0 {
		return &Error{Problems: ps}
	}
	return nil
}
