package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"

	"go.yaml.in/yaml/v3"
)

// Load reads, expands and validates the config file at path. A file that
// every user may write is refused: opsbot acts as root on the hosts it names.
// Invalid configs return a *Error listing every problem.
func Load(path string) (*Config, error) {
	c, err := Inspect(path)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Inspect reads the config file at path as Load does, and returns what it
// could read together with every problem found (a *Error, or another error
// when the file cannot be read at all). It is for tools that report more
// problems of their own (`opsbot config check`); a config that came with a
// *Error must not be run.
func Inspect(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	c, problems := parse(data, filepath.Dir(abs), os.LookupEnv)
	if fi, err := os.Stat(path); err != nil {
		problems = append([]error{fmt.Errorf("read config: %w", err)}, problems...)
	} else if fi.Mode().Perm()&0o002 != 0 {
		problems = append([]error{worldWritable(path, fi, "what opsbot does as root on your hosts")}, problems...)
	}
	problems = append(problems, c.trust(path)...)
	c.File = abs
	if len(problems) > 0 {
		return c, &Error{Problems: problems}
	}
	return c, nil
}

// Parse decodes config text. dir resolves relative paths; lookup resolves ${ENV}.
// Invalid text returns a *Error listing every problem.
func Parse(data []byte, dir string, lookup func(string) (string, bool)) (*Config, error) {
	c, problems := parse(data, dir, lookup)
	if len(problems) > 0 {
		return nil, &Error{Problems: problems}
	}
	return c, nil
}

// parse decodes, resolves, defaults and validates, collecting every problem.
// The Config is never nil.
func parse(data []byte, dir string, lookup func(string) (string, bool)) (*Config, []error) {
	root, err := decodeNode(data)
	if err != nil {
		return &Config{}, []error{err}
	}
	return parseNode(root, dir, lookup)
}

// decodeNode reads YAML text into a node tree; an empty text gives an
// empty node.
func decodeNode(data []byte) (*yaml.Node, error) {
	var root yaml.Node
	err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&root)
	switch {
	case errors.Is(err, io.EOF):
		return &yaml.Node{}, nil
	case err != nil:
		// Syntax errors name a line and a construct, never a value.
		return nil, fmt.Errorf("config: %w", err)
	}
	return &root, nil
}

// parseNode is parse for a decoded tree.
func parseNode(rootp *yaml.Node, dir string, lookup func(string) (string, bool)) (*Config, []error) {
	c := &Config{}
	root := *rootp
	var problems []error
	switch {
	case root.Kind == 0: // an empty file: every required key is reported below
	default:
		problems = checkShape(&root)
		if len(problems) == 0 || root.Content[0].Kind == yaml.MappingNode {
			if err := root.Decode(c); err != nil {
				// checkShape accepts only what decodes; should yaml disagree,
				// its message still must not show a value.
				problems = append(problems, fmt.Errorf("config: %s", quotedValue.ReplaceAllString(err.Error(), "(value hidden)")))
			}
		}
	}
	c.Dir = dir
	problems = append(problems, c.resolveSecrets(lookup)...)
	c.applyDefaults()
	if err := c.Validate(); err != nil {
		var ce *Error
		if errors.As(err, &ce) {
			problems = append(problems, ce.Problems...)
		} else {
			problems = append(problems, err)
		}
	}
	return c, problems
}

// quotedValue is how yaml quotes a value in its errors.
var quotedValue = regexp.MustCompile("`[^`]*`")
