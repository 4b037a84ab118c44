// Command docfacts writes the facts that the documents state about the
// code (the package table, the bench's strategies, the reason codes)
// into their generated blocks, so that each fact has one owner: the code.
//
//	go run ./internal/docfacts [-check] [-root DIR] FILE...
//
// Without -check it rewrites each FILE's blocks (make docs). With -check
// it changes nothing and exits 1 naming every FILE and block that
// differs from the code (make lint). A block is the lines between
// `<!-- facts:NAME -->` and `<!-- /facts:NAME -->`; NAME is one of
// packages, bench-strategies, reason-codes.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
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
	if err := fl.Parse(args); err != nil {
		return 2
	}
	if fl.NArg() == 0 {
		fmt.Fprintln(stderr, "docfacts: name the Markdown files to check or write")
		return 2
	}
	gens := generators(*root)
	cache := map[string]string{}
	gen := func(name string) (string, error) {
		if s, ok := cache[name]; ok {
			return s, nil
		}
		g, ok := gens[name]
		if !ok {
			names := make([]string, 0, len(gens))
			for n := range gens {
				names = append(names, n)
			}
			sort.Strings(names)
			return "", fmt.Errorf("no generator %q (want one of %s)", name, strings.Join(names, ", "))
		}
		s, err := g()
		if err == nil {
			cache[name] = s
		}
		return s, err
	}
	drift := 0
	for _, file := range fl.Args() {
		b, err := os.ReadFile(file)
		if err != nil {
			fmt.Fprintf(stderr, "docfacts: %v\n", err)
			return 2
		}
		out, changed, err := render(string(b), gen)
		if err != nil {
			fmt.Fprintf(stderr, "docfacts: %s: %v\n", file, err)
			return 2
		}
		if len(changed) == 0 {
			continue
		}
		if *check {
			drift++
			fmt.Fprintf(stderr, "docfacts: %s: block(s) %s differ from the code; run `make docs`\n", file, strings.Join(changed, ", "))
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
