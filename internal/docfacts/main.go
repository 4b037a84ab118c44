// Command docfacts writes the facts that the documents state about the
// code (the package table, the bench's strategies, the reason codes)
// into their generated blocks, so that each fact has one owner: the code.
// It writes the evaluation's figures the same way, their owner being the
// bench's committed JSON reports: the headline figures and evaltable's
// tables.
//
//	go run ./internal/docfacts [-check] [-root DIR] [-eval DIR] FILE...
//
// Without -check it rewrites each FILE's blocks (make docs). With -check
// it changes nothing and exits 1 naming every FILE and block that
// differs from the code or the results (make lint). A block is the lines
// between `<!-- facts:NAME ARG... -->` and `<!-- /facts:NAME -->`; NAME
// is one of packages, bench-strategies, reason-codes (no arguments),
// headline and eval-tables (arguments: the reports to show) or
// eval-targets (argument: the strategy under test); see the functions of
// the same names.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("docfacts", flag.ContinueOnError)
	fl.SetOutput(stderr)
	check := fl.Bool("check", false, "change nothing; exit 1 when a block differs from the code")
	root := fl.String("root", ".", "the module's root directory (the package table walks it)")
	evalDir := fl.String("eval", "", "the directory of the bench's --json reports that headline blocks read (default ROOT/docs/eval/json)")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	if fl.NArg() == 0 {
		fmt.Fprintln(stderr, "docfacts: name the Markdown files to check or write")
		return 2
	}
	if *evalDir == "" {
		*evalDir = filepath.Join(*root, "docs", "eval", "json")
	}
	e := &env{root: *root, evalDir: *evalDir, targets: map[string]*targets{}}
	drift := 0
	for _, file := range fl.Args() {
		b, err := os.ReadFile(file)
		if err != nil {
			fmt.Fprintf(stderr, "docfacts: %v\n", err)
			return 2
		}
		e.doc = file
		out, changed, err := render(string(b), func(spec string) (string, error) { return generate(e, spec) })
		if err != nil {
			fmt.Fprintf(stderr, "docfacts: %s: %v\n", file, err)
			return 2
		}
		if len(changed) == 0 {
			continue
		}
		if *check {
			drift++
			fmt.Fprintf(stderr, "docfacts: %s: block(s) %s differ from the code and the committed results; run `make docs`\n", file, strings.Join(changed, ", "))
			continue
		}
		if err := os.WriteFile(file, []byte(out), 0o644); err != nil {
			fmt.Fprintf(stderr, "docfacts: %v\n", err)
			return 2
		}
		fmt.Fprintf(stdout, "docfacts: %s: wrote %s\n", file, strings.Join(changed, ", "))
	}
	if drift > 0 {
		return 1
	}
	return 0
}

// generate renders the body of the block whose opening marker says spec
// (a generator's name, then its arguments).
func generate(e *env, spec string) (string, error) {
	words := strings.Fields(spec)
	if len(words) == 0 {
		return "", fmt.Errorf("a block names no generator")
	}
	g, ok := generators[words[0]]
	if !ok {
		names := make([]string, 0, len(generators))
		for n := range generators {
			names = append(names, n)
		}
		sort.Strings(names)
		return "", fmt.Errorf("no generator %q (want one of %s)", words[0], strings.Join(names, ", "))
	}
	return g(e, words[1:])
}
