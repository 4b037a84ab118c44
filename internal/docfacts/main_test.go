package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inference-cache/inference-cache/bench"
	"github.com/inference-cache/inference-cache/internal/fixtures"
)

// The documents of the repository hold the facts the code states: this
// is what `make lint` checks.
func TestRepositoryDocsMatchTheCode(t *testing.T) {
	root := fixtures.Root(t)
	var stdout, stderr bytes.Buffer
	args := []string{"-check", "-root", root, filepath.Join(root, "README.md"), filepath.Join(root, "docs", "contract.md")}
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s(run `make docs` and commit the result)", code, stderr.String())
	}
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
	if code := run([]string{"-check", doc}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), `no generator "nope" (want one of bench-strategies, packages, reason-codes)`) {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
}
