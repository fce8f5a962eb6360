package commands

import "strings"

// render returns the canonical text of c: the path, positional arguments with
// resolved names, key=N arguments that are set (in usage order), then flags
// (for schedule add, its own flags come before the cron spec).
func render(c Command) string {
	b := bind(c)
	var sb strings.Builder
	sb.Grow(48)
	sb.WriteString(c.Spec().Path)
	writeFlags := func() {
		for _, f := range b.flags {
			if *f.v {
				sb.WriteByte(' ')
				sb.WriteString(f.def.name)
			}
		}
	}
	first := b.flagsFirst()
	if first {
		writeFlags()
	}
	if b.to != nil && *b.to.v != "" {
		sb.WriteString(" --to ")
		sb.WriteString(*b.to.v)
	}
	for _, p := range b.params {
		p.render(&sb)
	}
	for _, k := range b.keys {
		if *k.v != 0 {
			writeInt(&sb, " "+k.k.name+"=", int64(*k.v))
		}
	}
	if !first {
		writeFlags()
	}
	return sb.String()
}

// usageOf is the usage line of s, from its binding.
func usageOf(s *Spec) string {
	b := bind(s.new())
	var sb strings.Builder
	sb.WriteString(s.Path)
	writeFlags := func() {
		for _, f := range b.flags {
			sb.WriteString(" " + f.usage())
		}
	}
	first := b.flagsFirst()
	if first {
		writeFlags()
	}
	if b.to != nil {
		sb.WriteString(" " + b.to.usage())
	}
	for _, p := range b.params {
		sb.WriteString(" " + p.usage())
	}
	for _, k := range b.keys {
		sb.WriteString(" " + k.usage())
	}
	if !first {
		writeFlags()
	}
	return sb.String()
}
