package commands

import (
	"encoding/json"
	"errors"
	"fmt"
)

// EncodingVersion is the version of Encode's layout. Decode reads this
// version; a later layout adds a version and reads the old ones too.
const EncodingVersion = 1

// encoded is how a command is kept as data: its path and its typed
// arguments, with the layout's version.
type encoded struct {
	V    int             `json:"v"`
	Path string          `json:"command"`
	Args json.RawMessage `json:"args"`
}

// Encode returns c as data, for the store: {"v":1,"command":"mtp steps",
// "args":{"service":"qwen","host":"gpu1","steps":10}}. Decode(Encode(c))
// returns a Command equal to c.
func Encode(c Command) ([]byte, error) {
	args, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", c.Spec().Path, err)
	}
	return json.Marshal(encoded{V: EncodingVersion, Path: c.Spec().Path, Args: args})
}

// Decode returns the command Encode kept in data. It checks the version and
// the path, not the configuration: the command is as it was accepted.
func Decode(data []byte) (Command, error) {
	var e encoded
	if err := json.Unmarshal(data, &e); err != nil {
		return nil, fmt.Errorf("decode a command: %w", err)
	}
	if e.V != EncodingVersion {
		return nil, fmt.Errorf("decode a command: layout version %d, want %d", e.V, EncodingVersion)
	}
	s := Lookup(e.Path)
	if s == nil {
		return nil, fmt.Errorf("decode a command: no command %q", e.Path)
	}
	c := s.new()
	if len(e.Args) > 0 {
		if err := json.Unmarshal(e.Args, c); err != nil {
			return nil, fmt.Errorf("decode %s: %w", e.Path, err)
		}
	}
	return c, nil
}

// scheduleAddJSON is ScheduleAdd with its scheduled command encoded.
type scheduleAddJSON struct {
	Cron   string          `json:"cron"`
	Sub    json.RawMessage `json:"sub"`
	To     string          `json:"to,omitempty"`
	DryRun bool            `json:"dry_run,omitempty"`
}

// MarshalJSON encodes the scheduled command with Encode.
func (c *ScheduleAdd) MarshalJSON() ([]byte, error) {
	if c.Sub == nil {
		return nil, errors.New("schedule add without a command")
	}
	sub, err := Encode(c.Sub)
	if err != nil {
		return nil, err
	}
	return json.Marshal(scheduleAddJSON{Cron: c.Cron, Sub: sub, To: c.To, DryRun: c.DryRun})
}

// UnmarshalJSON decodes what MarshalJSON encoded.
func (c *ScheduleAdd) UnmarshalJSON(data []byte) error {
	var j scheduleAddJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	sub, err := Decode(j.Sub)
	if err != nil {
		return err
	}
	*c = ScheduleAdd{Cron: j.Cron, Sub: sub, To: j.To, DryRun: j.DryRun}
	return nil
}

// PreviewIn is PreviewOf with the configuration's options: a command that
// writes files the configuration names (mtp per-load) names them.
func PreviewIn(c Command, opts Options) string {
	if text, ok := rolloutPreview(c, opts); ok {
		return text
	}
	if p, ok := c.(previewerIn); ok {
		return p.previewIn(opts)
	}
	return PreviewOf(c)
}

// PreviewOf says in one line what c will do when it runs: its own preview
// (Previewer), or a line naming what it changes.
func PreviewOf(c Command) string {
	if p, ok := c.(Previewer); ok {
		return p.Preview()
	}
	return fmt.Sprintf("`%s` changes %s.", Text(c), Where(c).Host)
}
