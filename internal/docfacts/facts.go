package main

import (
	"fmt"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/bench"
)

// env is what the generators read besides the code.
type env struct {
	root    string // the module's root directory
	evalDir string // the bench's committed --json reports (make evaluate's)
	doc     string // the Markdown file that holds the block: links are relative to it
	// targets caches evaltargets' targets by strategy under test: one
	// rendering per strategy for all the documents.
	targets map[string]*targets
}

// A generator renders one block's body from its arguments (the words
// after its name in the opening marker).
type generator func(e *env, args []string) (string, error)

// generators are the facts a document may hold as a generated block,
// by block name. Each is computed from the code or from the committed
// bench results, so a document that holds it cannot drift from them once
// `make lint` checks it.
var generators = map[string]generator{
	"packages":         noArgs(func(e *env) (string, error) { return packageTable(e.root) }),
	"bench-strategies": noArgs(func(*env) (string, error) { return benchStrategies() }),
	"reason-codes":     noArgs(func(*env) (string, error) { return reasonCodes() }),
	"headline":         headline,
	"eval-tables":      evalTables,
	"eval-targets":     evalTargets,
}

// noArgs is a generator that takes no arguments.
func noArgs(g func(e *env) (string, error)) generator {
	return func(e *env, args []string) (string, error) {
		if len(args) > 0 {
			return "", fmt.Errorf("takes no arguments, got %q", strings.Join(args, " "))
		}
		return g(e)
	}
}

// benchStrategies is the sentence naming the bench's strategies, from
// bench.AllStrategies, in report order.
func benchStrategies() (string, error) {
	names := make([]string, len(bench.AllStrategies))
	for i, n := range bench.AllStrategies {
		names[i] = "`" + n + "`"
	}
	return fmt.Sprintf("The bench compares %d routing strategies: %s.\n", len(names), strings.Join(names, ", ")), nil
}

// reasonReplicas says which replicas an answer of each reason code holds
// (contract §5.6). A code of the API without an entry here fails the
// generation, so a new code cannot reach the contract undocumented.
var reasonReplicas = map[string]string{
	"NO_HINT":         "none",
	"PREFIX_MATCH":    "ranked matches (§5.4)",
	"TENANT_HOT":      "warm for the tenant, by hit rate",
	"AFFINITY_HINT":   "exactly one",
	"UNKNOWN_SCHEME":  "none",
	"UNKNOWN_MODEL":   "none",
	"UNKNOWN_TENANT":  "none",
	"UNKNOWN_ADAPTER": "none",
}

// reasonCodes is the table of the API's reason codes (pb.ReasonCode), by
// value.
func reasonCodes() (string, error) {
	vals := make([]int32, 0, len(pb.ReasonCode_name))
	for v := range pb.ReasonCode_name {
		vals = append(vals, v)
	}
	sort.Slice(vals, func(i, j int) bool { return vals[i] < vals[j] })
	var b strings.Builder
	b.WriteString("| code | value | replicas |\n|---|---|---|\n")
	for _, v := range vals {
		name := pb.ReasonCode_name[v]
		what, ok := reasonReplicas[name]
		if !ok {
			return "", fmt.Errorf("reason code %s (%d) has no entry in internal/docfacts reasonReplicas", name, v)
		}
		fmt.Fprintf(&b, "| `%s` | %d | %s |\n", name, v, what)
	}
	return b.String(), nil
}

// packageTable is the table of the module's packages: each directory
// under root holding non-test Go files of the root module, with the
// first sentence of its package comment. A package without a comment
// fails the generation, unless all its files are generated protobuf
// code.
func packageTable(root string) (string, error) {
	type row struct{ path, job string }
	var rows []row
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "bin" || name == "target") {
			return filepath.SkipDir
		}
		if path != root {
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // another module
			}
		}
		job, ok, err := packageJob(path)
		if err != nil || !ok {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rows = append(rows, row{filepath.ToSlash(rel), job})
		return nil
	})
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("| package | job |\n|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| `%s` | %s |\n", r.path, strings.ReplaceAll(r.job, "|", "\\|"))
	}
	return b.String(), nil
}

// packageJob reads the package comment of the Go package in dir; ok is
// false when dir holds no non-test Go file.
func packageJob(dir string) (string, bool, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", false, err
	}
	fset := token.NewFileSet()
	name, text, generated, found := "", "", true, false
	for _, e := range entries {
		fn := e.Name()
		if e.IsDir() || !strings.HasSuffix(fn, ".go") || strings.HasSuffix(fn, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, fn), nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return "", false, err
		}
		found = true
		name = f.Name.Name
		if !strings.HasSuffix(fn, ".pb.go") {
			generated = false
		}
		if f.Doc != nil && text == "" {
			text = f.Doc.Text()
		}
	}
	if !found {
		return "", false, nil
	}
	if text == "" {
		if generated {
			return "the Go code generated from the .proto files beside it", true, nil
		}
		return "", false, fmt.Errorf("%s: package %s has no package comment (say what it is for in a doc.go)", dir, name)
	}
	var dp doc.Package
	s := dp.Synopsis(text)
	prefix := ""
	if rest, ok := strings.CutPrefix(s, "Command "); ok && name == "main" {
		_, rest, _ = strings.Cut(rest, " ")
		prefix, s = "(command) ", rest
	} else {
		s = strings.TrimPrefix(s, "Package "+name+" ")
	}
	return prefix + strings.TrimPrefix(s, "is "), true, nil
}
