package main

import (
	"fmt"
	"strings"
)

// A generated block in a Markdown file is the text between
//
//	<!-- facts:NAME ARG... -->
//	<!-- /facts:NAME -->
//
// each marker alone on its line; NAME names the generator and the
// arguments, separated by spaces, say what it renders (most generators
// take none). Everything between the markers is the generator's,
// replaced on every run.
const (
	openMarker  = "<!-- facts:"
	closeMarker = "<!-- /facts:"
	markerEnd   = " -->"
)

// block is one generated block of a file: its opening marker's text
// (spec: the name and the arguments), its name and the byte range of its
// body (the lines between the markers).
type block struct {
	spec, name string
	start, end int
}

// findBlocks lists the generated blocks of text in order. A block opened
// and not closed, closed under another name, or nested is an error naming
// the line.
func findBlocks(text string) ([]block, error) {
	var out []block
	var open *block
	pos := 0
	for i, line := range strings.SplitAfter(text, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, openMarker) && strings.HasSuffix(trimmed, markerEnd):
			if open != nil {
				return nil, fmt.Errorf("line %d: block %q opened inside block %q", i+1, blockName(markerName(trimmed, openMarker)), open.name)
			}
			spec := markerName(trimmed, openMarker)
			open = &block{spec: spec, name: blockName(spec), start: pos + len(line)}
		case strings.HasPrefix(trimmed, closeMarker) && strings.HasSuffix(trimmed, markerEnd):
			name := markerName(trimmed, closeMarker)
			if open == nil || open.name != name {
				return nil, fmt.Errorf("line %d: closes block %q, which is not open", i+1, name)
			}
			open.end = pos
			out = append(out, *open)
			open = nil
		}
		pos += len(line)
	}
	if open != nil {
		return nil, fmt.Errorf("block %q is not closed (want a line %s%s%s)", open.name, closeMarker, open.name, markerEnd)
	}
	return out, nil
}

func markerName(line, prefix string) string {
	return strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(line, prefix), markerEnd))
}

// blockName is the generator's name in a block's spec: its first word.
func blockName(spec string) string {
	if f := strings.Fields(spec); len(f) > 0 {
		return f[0]
	}
	return ""
}

// render replaces the body of every block of text with gen(spec); a body
// always ends with a newline. It returns the new text and the specs of
// the blocks whose body changed.
func render(text string, gen func(spec string) (string, error)) (string, []string, error) {
	blocks, err := findBlocks(text)
	if err != nil {
		return "", nil, err
	}
	var b strings.Builder
	var changed []string
	last := 0
	for _, bl := range blocks {
		body, err := gen(bl.spec)
		if err != nil {
			return "", nil, fmt.Errorf("block %q: %w", bl.spec, err)
		}
		if body != "" && !strings.HasSuffix(body, "\n") {
			body += "\n"
		}
		if text[bl.start:bl.end] != body {
			changed = append(changed, bl.spec)
		}
		b.WriteString(text[last:bl.start])
		b.WriteString(body)
		last = bl.end
	}
	b.WriteString(text[last:])
	return b.String(), changed, nil
}
