package main

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/inference-cache/inference-cache/internal/evaltargets"
)

// evalTables renders evaltable's table of each report args name, in that
// order, under a "####" heading (its title, as in EVALUATION.md). An
// argument is a report's file name without .json or a pattern of them
// (conversation-*); none means every report of e.evalDir.
func evalTables(e *env, args []string) (string, error) {
	files, err := reportFiles(e.evalDir)
	if err != nil {
		return "", err
	}
	runs, err := selectReports(e.evalDir, files, args)
	if err != nil {
		return "", err
	}
	tg, err := e.targetsOf(headlineStrategies[0], files)
	if err != nil {
		return "", err
	}
	sections := evaltableSections(tg.out)
	var b strings.Builder
	for i, f := range runs {
		r, err := readReport(f)
		if err != nil {
			return "", err
		}
		body, ok := sections[evaltargets.Title(r)]
		if !ok {
			return "", fmt.Errorf("%s: evaltable gave no table %q for it", f, evaltargets.Title(r))
		}
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "#### %s\n\n%s\n", evaltargets.Title(r), body)
	}
	return b.String(), nil
}

// evalTargets renders evaltable's targets table and count of the
// strategy args names over every report of e.evalDir.
func evalTargets(e *env, args []string) (string, error) {
	if len(args) != 1 {
		return "", fmt.Errorf("name the one strategy whose targets to show, e.g. lookuproute-sdk")
	}
	files, err := reportFiles(e.evalDir)
	if err != nil {
		return "", err
	}
	tg, err := e.targetsOf(args[0], files)
	if err != nil {
		return "", err
	}
	heading := "Targets of " + args[0]
	body, ok := evaltableSections(tg.out)[heading]
	if !ok {
		return "", fmt.Errorf("evaltable -strategy %s gave no section %q", args[0], heading)
	}
	return body + "\n", nil
}

// evaltableSections splits evaltable's output into its "### " sections:
// the text under each heading, by heading, without its surrounding blank
// lines.
func evaltableSections(out string) map[string]string {
	sections := map[string]string{}
	var title string
	var body []string
	flush := func() {
		if title != "" {
			sections[title] = strings.TrimSpace(strings.Join(body, "\n"))
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if t, ok := strings.CutPrefix(line, "### "); ok {
			flush()
			title, body = t, nil
			continue
		}
		body = append(body, line)
	}
	flush()
	return sections
}

// selectReports lists the files of the reports args name (file names
// without .json, or patterns of them), in the order of args and sorted
// within a pattern; no args means every file.
func selectReports(dir string, files, args []string) ([]string, error) {
	if len(args) == 0 {
		return files, nil
	}
	var out []string
	for _, a := range args {
		if strings.ContainsAny(a, `/\`) {
			return nil, fmt.Errorf("run %q: name a report of %s by its file name without .json", a, dir)
		}
		n := len(out)
		for _, f := range files {
			if ok, err := filepath.Match(a, strings.TrimSuffix(filepath.Base(f), ".json")); err != nil {
				return nil, fmt.Errorf("run %q: %w", a, err)
			} else if ok {
				out = append(out, f)
			}
		}
		if len(out) == n {
			return nil, fmt.Errorf("run %q: no report %s.json in %s", a, a, dir)
		}
	}
	return out, nil
}
