package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/inference-cache/inference-cache/bench"
	"github.com/inference-cache/inference-cache/internal/fixtures"
)

// The documents of the repository hold the facts the code and the
// committed bench results state: this is what `make lint` checks, on the
// Makefile's FACT_DOCS.
func TestRepositoryDocsMatchTheCode(t *testing.T) {
	root := fixtures.Root(t)
	docs := factDocs(t, root)
	for _, want := range []string{"README.md", "docs/contract.md", "EVALUATION.md"} {
		if !slices.Contains(docs, want) {
			t.Errorf("the Makefile's FACT_DOCS %v misses %s, which holds generated blocks", docs, want)
		}
	}
	args := []string{"-check", "-root", root}
	for _, d := range docs {
		args = append(args, filepath.Join(root, d))
	}
	var stdout, stderr bytes.Buffer
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s(run `make docs` and commit the result)", code, stderr.String())
	}
}

// factDocs is the Makefile's FACT_DOCS list: the files make lint checks.
func factDocs(t *testing.T, root string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if name, val, ok := strings.Cut(line, ":="); ok && strings.TrimSpace(name) == "FACT_DOCS" {
			return strings.Fields(val)
		}
	}
	t.Fatal("the Makefile sets no FACT_DOCS")
	return nil
}

// A planted drift (a strategy list that misses one of bench's) fails the
// check, naming the file and the block, and -check writes nothing; the
// write mode then repairs it.
func TestCheck_FailsOnAPlantedDriftAndWriteRepairsIt(t *testing.T) {
	root := fixtures.Root(t)
	stale := "The bench compares 2 routing strategies: `round-robin`, `oracle`.\n"
	doc := filepath.Join(t.TempDir(), "doc.md")
	text := "# doc\n<!-- facts:bench-strategies -->\n" + stale + "<!-- /facts:bench-strategies -->\n"
	if err := os.WriteFile(doc, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-check", "-root", root, doc}, &stdout, &stderr); code != 1 {
		t.Fatalf("check of a drifted block: exit %d (%s), want 1", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), doc) || !strings.Contains(stderr.String(), "bench-strategies") {
		t.Fatalf("message %q: want the file and the block named", stderr.String())
	}
	if b, _ := os.ReadFile(doc); string(b) != text {
		t.Fatal("-check changed the file")
	}
	if code := run([]string{"-root", root, doc}, &stdout, &stderr); code != 0 {
		t.Fatalf("write: exit %d (%s)", code, stderr.String())
	}
	b, _ := os.ReadFile(doc)
	for _, name := range bench.AllStrategies {
		if !strings.Contains(string(b), "`"+name+"`") {
			t.Errorf("repaired block misses strategy %s:\n%s", name, b)
		}
	}
	if code := run([]string{"-check", "-root", root, doc}, &stdout, &stderr); code != 0 {
		t.Fatalf("check after the repair: exit %d (%s)", code, stderr.String())
	}
}

func TestRun_RefusesAnUnknownBlockNamingTheGenerators(t *testing.T) {
	doc := filepath.Join(t.TempDir(), "doc.md")
	if err := os.WriteFile(doc, []byte("<!-- facts:nope -->\n<!-- /facts:nope -->\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-check", doc}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), `no generator "nope" (want one of bench-strategies, eval-tables, eval-targets, headline, packages, reason-codes)`) {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
}
