package ops

import (
	"context"
	"errors"
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
// (Before; Created when a file does not exist), and their diffs.
func readBeside(ctx context.Context, t *target, p *planned) error {
	for i := range p.files {
		f := &p.files[i]
		b, err := t.host.ReadFile(ctx, f.Path)
		switch {
		case err != nil && errors.Is(err, fs.ErrNotExist):
			f.Before, f.Created = "", true
		case err != nil:
			return hostErr("read "+f.Path, t.cfg.Host, err)
		default:
			f.Before = string(b)
		}
		if f.Before != f.After {
			f.Diff = unit.UnifiedDiff(f.Path, f.Before, f.After)
		}
	}
	return nil
}

// writeBesideFiles writes the files beside the unit: their After text for
// UnitNew (removing a file the change removes), their Before text for
// UnitOld (removing a file the change created). Each write is atomic (a
// temporary file renamed over it), so a file is always its old or its new
// text.
func writeBesideFiles(ctx context.Context, t *target, p *planned, which string) error {
	for _, f := range p.files {
		if f.Before == f.After && !f.Created && !f.Removed {
			continue
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

// besideNames lists the paths of files beside the unit.
func besideNames(fs []FileChange) string {
	names := make([]string, len(fs))
	for i, f := range fs {
		names[i] = f.Path
	}
	return strings.Join(names, ", ")
}
