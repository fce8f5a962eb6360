package ops

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/opsbot/opsbot/ops/unit"
)

// filesChange reports whether some file beside the unit changes.
func (p *planned) filesChange() bool {
	for _, f := range p.files {
		if f.Created || f.Removed || f.Before != f.After {
			return true
		}
	}
	return false
}

// readBeside reads the present text of the files p writes beside the unit
// (Before; Created when a file does not exist), and their diffs. A file
// found to be anything but a regular file (a symbolic link, a directory, a
// device) is refused before it is read: nothing is changed.
func readBeside(ctx context.Context, t *target, p *planned) error {
	for i := range p.files {
		f := &p.files[i]
		text, exists, err := readRegular(ctx, t, f.Path)
		if err != nil {
			return besideRefused(err)
		}
		f.Before, f.Created = text, !exists
		if f.Before != f.After {
			f.Diff = unit.UnifiedDiff(f.Path, f.Before, f.After)
		}
	}
	return nil
}

// readRegular reads the file at name beside the unit, checked over sftp
// first (lstat: a symbolic link is not followed): its text and true; "" and
// false when nothing is there; a *NotRegularError for anything but a
// regular file.
func readRegular(ctx context.Context, t *target, name string) (string, bool, error) {
	exists, err := regularOrAbsent(ctx, t, name)
	if err != nil || !exists {
		return "", false, err
	}
	b, err := t.host.ReadFile(ctx, name)
	if err != nil {
		return "", false, hostErr("read "+name, t.cfg.Host, err)
	}
	return string(b), true, nil
}

// regularOrAbsent reports whether a regular file is at name on t's host
// (lstat over sftp); nothing there is false; anything else, a symbolic link
// included, a *NotRegularError.
func regularOrAbsent(ctx context.Context, t *target, name string) (bool, error) {
	fi, err := t.host.Lstat(ctx, name)
	switch {
	case err != nil && errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, hostErr("lstat "+name, t.cfg.Host, err)
	case !fi.Mode().IsRegular():
		return false, &NotRegularError{Path: name, Host: t.cfg.Host, Service: t.name, Kind: fileKind(fi.Mode())}
	}
	return true, nil
}

// NotRegularError is a file opsbot writes beside the unit (SGLang's
// adaptive config) found to be something other than a regular file: opsbot
// writes such a file only as a regular file, and leaves what is there as it
// is.
type NotRegularError struct {
	Path, Host, Service string
	Kind                string // "a symbolic link", "a directory", ...
}

func (e *NotRegularError) Error() string {
	return fmt.Sprintf("%s on %s is %s, not a regular file: opsbot writes services.%s.adaptive_config only as a regular file and leaves this one as it is",
		e.Path, e.Host, e.Kind, e.Service)
}

// besideRefused is err of a file beside the unit refused before anything
// was changed, saying so and what to do.
func besideRefused(err error) error {
	var nr *NotRegularError
	if errors.As(err, &nr) {
		return fmt.Errorf("refused: %w. Nothing was changed; remove it on %s (or set services.%s.adaptive_config to a path of its own), then run the command again",
			err, nr.Host, nr.Service)
	}
	return err
}

// fileKind says what a file of mode m is, when not a regular file.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return fmt.Sprintf("not a regular file (mode %v)", m)
}

// writeBesideFiles writes the files beside the unit: their After text for
// UnitNew (removing a file the change removes), their Before text for
// UnitOld (removing a file the change created). Each write is atomic (a
// temporary file renamed over it), so a file is always its old or its new
// text. Each file is checked first (lstat over sftp): one that is there as
// anything but a regular file is left as it is, with a *NotRegularError.
func writeBesideFiles(ctx context.Context, t *target, p *planned, which string) error {
	for _, f := range p.files {
		if f.Before == f.After && !f.Created && !f.Removed {
			continue
		}
		// Checked again right before the write: what is there now may differ
		// from what was read.
		if _, err := regularOrAbsent(ctx, t, f.Path); err != nil {
			return err
		}
		if (which == UnitOld && f.Created) || (which == UnitNew && f.Removed) {
			if err := runOK(ctx, t, "rm", "-f", f.Path); err != nil {
				return err
			}
			continue
		}
		text := f.After
		if which == UnitOld {
			text = f.Before
		}
		if err := runOK(ctx, t, "mkdir", "-p", path.Dir(f.Path)); err != nil {
			return err
		}
		if err := t.host.WriteFileAtomic(ctx, f.Path, []byte(text), 0o644); err != nil {
			return hostErr("write "+f.Path, t.cfg.Host, err)
		}
	}
	return nil
}

// filesText describes the files beside the unit a change writes: their diffs,
// or that one goes.
func filesText(fs []FileChange) []string {
	var out []string
	for _, f := range fs {
		switch {
		case f.Removed:
			out = append(out, "removes "+f.Path)
		case f.Diff != "":
			out = append(out, f.Diff)
		}
	}
	return out
}

// writesText names every file p writes, in the order a deploy writes them:
// each file beside the unit that changes ("(new)" when it does not exist
// yet; one the change removes is said so), then the unit's file.
func (p *planned) writesText() string {
	var parts []string
	for _, f := range p.files {
		switch {
		case f.Removed:
			parts = append(parts, "remove "+f.Path)
		case f.Created:
			parts = append(parts, "write "+f.Path+" (new)")
		case f.Before != f.After:
			parts = append(parts, "write "+f.Path)
		}
	}
	u := "write " + p.path
	if p.created {
		u += " (new)"
	}
	return strings.Join(append(parts, u), ", then ")
}

// besideNames lists the paths of files beside the unit.
func besideNames(fs []FileChange) string {
	names := make([]string, len(fs))
	for i, f := range fs {
		names[i] = f.Path
	}
	return strings.Join(names, ", ")
}
