package engine

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Sample is one line of a Prometheus text exposition. The timestamp, if any,
// is dropped.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Metrics is a scrape, in exposition order.
type Metrics []Sample

// Value sums name's samples over all label sets (NaN samples are skipped);
// ok is false when there is no sample of that name.
func (m Metrics) Value(name string) (float64, bool) {
	var sum float64
	found := false
	for _, s := range m {
		if s.Name == name {
			found = true
			if !math.IsNaN(s.Value) {
				sum += s.Value
			}
		}
	}
	return sum, found
}

// Metrics scrapes /metrics (SGLang needs --enable-metrics: without it the
// answer is a *StatusError 404).
func (c *Client) Metrics(ctx context.Context) (Metrics, error) {
	body, err := c.get(ctx, "/metrics", 64<<20)
	if err != nil {
		return nil, fmt.Errorf("scrape metrics: %w", err)
	}
	m, err := ParseMetrics(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("scrape %s/metrics: %w", c.BaseURL, err)
	}
	return m, nil
}

// ParseMetrics reads the Prometheus text format (and the OpenMetrics subset
// engines emit): "#" lines and blank lines are skipped; a sample is
// name{label="value",...} value [timestamp], label values with \\, \" and \n
// escapes, values including +Inf, -Inf and NaN. A malformed line is an error
// naming its number; nothing is returned then.
func ParseMetrics(r io.Reader) (Metrics, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var out Metrics
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("metrics line %d %q: %w", n, Excerpt(line), err)
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading metrics: %w", err)
	}
	return out, nil
}

func isNameChar(c byte, first bool) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || !first && c >= '0' && c <= '9'
}

func parseSample(line string) (Sample, error) {
	i := 0
	for i < len(line) && isNameChar(line[i], i == 0) {
		i++
	}
	if i == 0 {
		return Sample{}, fmt.Errorf("no metric name")
	}
	s := Sample{Name: line[:i]}
	rest := strings.TrimLeft(line[i:], " \t")
	if strings.HasPrefix(rest, "{") {
		labels, after, err := parseLabels(rest[1:])
		if err != nil {
			return Sample{}, err
		}
		s.Labels = labels
		rest = strings.TrimLeft(after, " \t")
	} else if i < len(line) && line[i] != ' ' && line[i] != '\t' {
		return Sample{}, fmt.Errorf("bad character %q in metric name", line[i])
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 || len(fields) > 2 {
		return Sample{}, fmt.Errorf("want a value and an optional timestamp, got %d fields", len(fields))
	}
	v, err := parseValue(fields[0])
	if err != nil {
		return Sample{}, err
	}
	s.Value = v
	if len(fields) == 2 {
		if _, err := strconv.ParseFloat(fields[1], 64); err != nil {
			return Sample{}, fmt.Errorf("bad timestamp %q", Excerpt(fields[1]))
		}
	}
	return s, nil
}

func parseValue(f string) (float64, error) {
	switch f {
	case "+Inf", "Inf":
		return math.Inf(1), nil
	case "-Inf":
		return math.Inf(-1), nil
	case "NaN":
		return math.NaN(), nil
	}
	v, err := strconv.ParseFloat(f, 64)
	if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("bad value %q", Excerpt(f))
	}
	return v, nil
}

// parseLabels reads `a="x",b="y"}` (the "{" already consumed) and returns the
// text after the "}".
func parseLabels(s string) (map[string]string, string, error) {
	labels := map[string]string{}
	i := 0
	for {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
		if i < len(s) && s[i] == '}' {
			return labels, s[i+1:], nil
		}
		j := i
		for j < len(s) && isNameChar(s[j], j == i) && s[j] != ':' {
			j++
		}
		if j == i {
			return nil, "", fmt.Errorf("bad label name at %q", Excerpt(s[i:]))
		}
		name := s[i:j]
		for j < len(s) && (s[j] == ' ' || s[j] == '\t') {
			j++
		}
		if j >= len(s) || s[j] != '=' {
			return nil, "", fmt.Errorf("label %s: want =", Excerpt(name))
		}
		j++
		for j < len(s) && (s[j] == ' ' || s[j] == '\t') {
			j++
		}
		if j >= len(s) || s[j] != '"' {
			return nil, "", fmt.Errorf("label %s: value not quoted", Excerpt(name))
		}
		j++
		var b strings.Builder
		closed := false
		for j < len(s) {
			c := s[j]
			if c == '"' {
				closed = true
				j++
				break
			}
			if c == '\\' && j+1 < len(s) {
				j++
				switch s[j] {
				case 'n':
					b.WriteByte('\n')
				case '\\', '"':
					b.WriteByte(s[j])
				default:
					b.WriteByte('\\')
					b.WriteByte(s[j])
				}
				j++
				continue
			}
			b.WriteByte(c)
			j++
		}
		if !closed {
			return nil, "", fmt.Errorf("label %s: unterminated value", Excerpt(name))
		}
		if _, dup := labels[name]; dup {
			return nil, "", fmt.Errorf("label %s given twice", Excerpt(name))
		}
		labels[name] = b.String()
		for j < len(s) && (s[j] == ' ' || s[j] == '\t') {
			j++
		}
		if j < len(s) && s[j] == ',' {
			j++
		} else if j >= len(s) || s[j] != '}' {
			return nil, "", fmt.Errorf("label %s: want , or }", Excerpt(name))
		}
		i = j
	}
}
