package lab

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// A unit's enablement, as systemd keeps it: the symbolic links of its
// [Install] section's WantedBy= and RequiredBy= targets, TARGET.wants/UNIT
// and TARGET.requires/UNIT, in /etc/systemd/system (enable) or in
// /run/systemd/system (enable --runtime, gone at a reboot). systemctl
// is-enabled reads them back: "enabled" or "enabled-runtime" where a link
// is there, "disabled" where none is, "static" for a unit without an
// [Install] section (nothing to enable; it runs when another unit pulls it
// in). systemctl(1), "is-enabled": exit 0 for enabled, enabled-runtime,
// static, indirect, generated, transient and alias; non-zero for the others.

// runtimeUnitDir is where systemd keeps runtime enablement.
const runtimeUnitDir = "/run/systemd/system"

// installLinks lists the links enabling d makes (target directory and
// unit name) from its [Install] section; none for a unit without one.
func installLinks(d diskUnit) []string {
	entries, err := parseUnitText(d.fragPath, d.fragText)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if e.Section != "Install" {
			continue
		}
		suffix := map[string]string{"WantedBy": ".wants", "RequiredBy": ".requires"}[e.Key]
		if suffix == "" {
			continue
		}
		for _, target := range strings.Fields(e.Value) {
			out = append(out, target+suffix+"/"+d.name)
		}
	}
	return out
}

// unitFileState is what `systemctl is-enabled` prints for d ("" when it has
// no unit file).
func (h *SimHost) unitFileState(d diskUnit) string {
	if !d.exists {
		return ""
	}
	links := installLinks(d)
	if len(links) == 0 {
		return "static"
	}
	for _, base := range []string{unitDir, runtimeUnitDir} {
		for _, l := range links {
			if _, err := os.Lstat(h.realPath(path.Join(base, l))); err == nil {
				if base == runtimeUnitDir {
					return "enabled-runtime"
				}
				return "enabled"
			}
		}
	}
	return "disabled"
}

// enabledState reports whether state is one `systemctl is-enabled` exits 0 for.
func enabledState(state string) bool {
	switch state {
	case "enabled", "enabled-runtime", "static", "indirect", "generated", "transient", "alias":
		return true
	}
	return false
}

// noInstallText is what systemctl says when asked to enable or disable a
// unit without an [Install] section (it exits 0).
const noInstallText = `The unit files have no installation config (WantedBy=, RequiredBy=, UpheldBy=,
Also=, or Alias= settings in the [Install] section, and DefaultInstance= for
template units). This means they are not meant to be enabled or disabled using systemctl.
`

// enableUnit makes d's links (in /run with runtime), as `systemctl enable`
// does, and returns the lines systemctl prints for them.
func (h *SimHost) enableUnit(d diskUnit, runtime bool) ([]string, error) {
	base := unitDir
	if runtime {
		base = runtimeUnitDir
	}
	var said []string
	for _, l := range installLinks(d) {
		link := path.Join(base, l)
		rp := h.realPath(link)
		if _, err := os.Lstat(rp); err == nil {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(rp), 0o755); err != nil {
			return said, fmt.Errorf("create %s: %w", path.Dir(link), unwrapPath(err))
		}
		// Relative, so that it resolves inside the host's file system.
		rel, err := filepath.Rel(path.Dir(link), d.fragPath)
		if err != nil {
			return said, err
		}
		if err := os.Symlink(rel, rp); err != nil {
			return said, fmt.Errorf("create symlink %s: %w", link, unwrapPath(err))
		}
		said = append(said, fmt.Sprintf("Created symlink %s → %s.", link, d.fragPath))
	}
	return said, nil
}

// disableUnit removes d's links (in /run with runtime), as `systemctl
// disable` does, and returns the lines systemctl prints for them.
func (h *SimHost) disableUnit(d diskUnit, runtime bool) ([]string, error) {
	base := unitDir
	if runtime {
		base = runtimeUnitDir
	}
	var said []string
	for _, l := range installLinks(d) {
		link := path.Join(base, l)
		err := os.Remove(h.realPath(link))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return said, fmt.Errorf("remove %s: %w", link, unwrapPath(err))
		}
		said = append(said, fmt.Sprintf("Removed %q.", link))
	}
	return said, nil
}

// enableVerb runs `systemctl enable|disable [--runtime] UNIT...`.
func (e *cmdEnv) enableVerb(verb string, units []string, runtime, quiet bool) int {
	if len(units) == 0 {
		fmt.Fprintln(e.stderr, "Too few arguments.")
		return 1
	}
	for _, un := range units {
		d := e.h.readDiskUnit(un)
		if !d.exists {
			fmt.Fprintf(e.stderr, "Failed to %s unit: Unit file %s does not exist.\n", verb, un)
			return 1
		}
		if len(installLinks(d)) == 0 {
			if !quiet {
				fmt.Fprint(e.stderr, noInstallText)
			}
			continue
		}
		change := e.h.enableUnit
		if verb == "disable" {
			change = e.h.disableUnit
		}
		said, err := change(d, runtime)
		if !quiet {
			for _, s := range said {
				fmt.Fprintln(e.stderr, s)
			}
		}
		if err != nil {
			fmt.Fprintf(e.stderr, "Failed to %s unit: %v\n", verb, err)
			return 1
		}
	}
	return 0
}

// Disable runs `systemctl disable UNIT` on the host (for tests): the unit
// is no longer wanted at boot.
func (h *SimHost) Disable(unit string) error {
	_, err := h.disableUnit(h.readDiskUnit(normUnit(unit)), false)
	return err
}

// UnitFileState is what `systemctl is-enabled UNIT` prints on the host.
func (h *SimHost) UnitFileState(unit string) string {
	return h.unitFileState(h.readDiskUnit(normUnit(unit)))
}
