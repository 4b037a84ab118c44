package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inference-cache/inference-cache/internal/fixtures"
)

// copyReports copies the committed bench reports into a temporary
// directory, for a test to change.
func copyReports(t *testing.T, root string) string {
	t.Helper()
	dir := t.TempDir()
	// The frozen copies (testdata/reports/README.md), not docs/eval/json:
	// the expected figures were read by hand from them.
	files, err := filepath.Glob(filepath.Join(root, "internal", "docfacts", "testdata", "reports", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no frozen reports: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// setP50 sets one strategy's modelled TTFT p50 in a report.
func setP50(t *testing.T, path, strategy string, p50 float64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r map[string]any
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range r["strategies"].([]any) {
		if m := s.(map[string]any); m["name"] == strategy {
			m["ttft_model_p50_ms"], found = p50, true
		}
	}
	if !found {
		t.Fatalf("%s: no strategy %s", path, strategy)
	}
	if b, err = json.Marshal(r); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// A headline block renders the committed figures; a changed figure in a
// report, shown in the table or only counted in the targets, fails the
// check naming the file and the block, and the write mode repairs it.
// The expected figures are read by hand from the committed reports
// (conversation-10000-1.json: lookuproute-sdk 584.x ms p50 and 32.0 %
// hit rate, round-robin 1047 ms and 11.6 %, dynamo-sync 874 ms) and
// evaltable's counts for these reports (65 and 72 of 102).
func TestHeadline_FailsOnAChangedReportAndWriteRepairsIt(t *testing.T) {
	root := fixtures.Root(t)
	reports := copyReports(t, root)
	doc := filepath.Join(t.TempDir(), "doc.md")
	spec := "headline +dynamo-sync conversation-10000-1"
	if err := os.WriteFile(doc, []byte("# doc\n<!-- facts:"+spec+" -->\n<!-- /facts:headline -->\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := func(check bool) []string {
		a := []string{"-root", root, "-eval", reports, doc}
		if check {
			a = append([]string{"-check"}, a...)
		}
		return a
	}
	write := func(want ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if code := run(args(false), &stdout, &stderr); code != 0 {
			t.Fatalf("write: exit %d (%s)", code, stderr.String())
		}
		b, _ := os.ReadFile(doc)
		for _, w := range want {
			if !strings.Contains(string(b), w) {
				t.Errorf("block misses %q:\n%s", w, b)
			}
		}
		if code := run(args(true), &stdout, &stderr); code != 0 {
			t.Fatalf("check after the write: exit %d (%s)", code, stderr.String())
		}
		return string(b)
	}
	checkFails := func() {
		t.Helper()
		before, _ := os.ReadFile(doc)
		var stdout, stderr bytes.Buffer
		if code := run(args(true), &stdout, &stderr); code != 1 {
			t.Fatalf("check of a changed report: exit %d (%s), want 1", code, stderr.String())
		}
		if !strings.Contains(stderr.String(), doc) || !strings.Contains(stderr.String(), spec) {
			t.Fatalf("message %q: want the file and the block named", stderr.String())
		}
		if after, _ := os.ReadFile(doc); !bytes.Equal(before, after) {
			t.Fatal("-check changed the file")
		}
	}

	write("| conversation, 10,000 tok/s, 1 gateway | 584 ms / 1047 ms (0.56×) | 32.0 / 11.6 % | 874 ms | 3 of 5 (missed: ",
		"**65 of 102**", "`picker-indexer` 72 of 102", "[conversation-10000-1.json](")

	// A figure of the table: lookuproute-sdk's p50 from 584 to 700 ms, over
	// sglang's 619 ms, so one more target is missed there.
	setP50(t, filepath.Join(reports, "conversation-10000-1.json"), "lookuproute-sdk", 700)
	checkFails()
	write("| 700 ms / 1047 ms (0.67×) |", "| 2 of 5 (missed: p50 ≤ best peer, 700 ms vs 619 ms (sglang); ", "**64 of 102**")

	// A run the table does not show: the generator's p50 at 7,000 tok/s
	// with one gateway from 129 to 120 ms, under llm-d's 128 ms, so one
	// more target is met and only the count changes.
	setP50(t, filepath.Join(reports, "generator-7000-1.json"), "lookuproute-sdk", 120)
	checkFails()
	write("**65 of 102**")
}

func TestHeadline_RefusesWhatTheReportsDoNotHold(t *testing.T) {
	root := fixtures.Root(t)
	for spec, want := range map[string]string{
		"headline":           "name the runs to show",
		"headline nope-1":    "nope-1.json",
		"headline ../README": "by its file name",
		"headline +no-such-strategy synthetic-7000-4": "no strategy no-such-strategy",
	} {
		doc := filepath.Join(t.TempDir(), "doc.md")
		text := "<!-- facts:" + spec + " -->\n<!-- /facts:headline -->\n"
		if err := os.WriteFile(doc, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		if code := run([]string{"-check", "-root", root, doc}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), want) {
			t.Errorf("%s: exit %d (%s), want 2 and %q", spec, code, stderr.String(), want)
		}
	}
}

// parseTargets reads evaltable's targets table and count; an output
// without them (a changed format) is an error, not an empty headline.
func TestParseTargets(t *testing.T) {
	out := "### a, prefill 1 tok/s, 1 gateway(s)\n\n| strategy | hit rate |\n|---|---:|\n| x | 1 % |\n\n" +
		"### Targets of x\n\n| run | p50 ≤ best peer | p50 ≤ 1.1 × 1 gateway |\n|---|---|---|\n" +
		"| a, prefill 1 tok/s, 1 gateway(s) | met: 1 ms vs 2 ms (y) | – |\n" +
		"| a, prefill 1 tok/s, 4 gateway(s) | missed: 3 ms vs 2 ms (y) | met: 3 ms vs 4 ms |\n\n2 of 3 targets met.\n"
	tg, err := parseTargets(out)
	if err != nil {
		t.Fatal(err)
	}
	if tg.met != 2 || tg.total != 3 || strings.Join(tg.columns, ",") != "p50 ≤ best peer,p50 ≤ 1.1 × 1 gateway" || len(tg.rows) != 2 ||
		strings.Join(tg.rows["a, prefill 1 tok/s, 4 gateway(s)"], ",") != "missed: 3 ms vs 2 ms (y),met: 3 ms vs 4 ms" {
		t.Fatalf("got %+v", tg)
	}
	for _, bad := range []string{"", "| run | a |\n|---|---|\n| r | met: x |\n", "3 of 4 targets met.\n",
		"| run | a |\n|---|---|\n| r | met: x | extra |\n1 of 1 targets met.\n"} {
		if _, err := parseTargets(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// eval-tables and eval-targets render evaltable's tables of the committed
// reports; a changed report fails the check. The expected row is read by
// hand from synthetic-7000-4.json (lookuproute-sdk: 44.2 % hit rate, 67.9 %
// of ideal, max/mean 1.11, p50 1323 ms, p90 5116 ms, p99 8973 ms, mean
// 1986 ms).
func TestEvalTables_RenderTheReportsAndFailOnAChange(t *testing.T) {
	root := fixtures.Root(t)
	reports := copyReports(t, root)
	doc := filepath.Join(t.TempDir(), "doc.md")
	text := "<!-- facts:eval-tables synthetic-7000-4 -->\n<!-- /facts:eval-tables -->\n" +
		"<!-- facts:eval-targets picker-indexer -->\n<!-- /facts:eval-targets -->\n"
	if err := os.WriteFile(doc, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-root", root, "-eval", reports, doc}, &stdout, &stderr); code != 0 {
		t.Fatalf("write: exit %d (%s)", code, stderr.String())
	}
	b, _ := os.ReadFile(doc)
	for _, want := range []string{
		"<!-- facts:eval-tables synthetic-7000-4 -->\n#### synthetic_trace.jsonl, prefill 7000 tok/s, 4 gateway(s)\n\n3993 requests, 8 engines × 1372 blocks",
		"| **lookuproute-sdk** | 44.2 % | 67.9 % | 1.11 | 1323 ms | 5116 ms | 8973 ms | 1986 ms |\n",
		"| synthetic_trace.jsonl, prefill 7000 tok/s, 4 gateway(s) | missed: 1266 ms vs 915 ms (llm-d) |",
		"\n\n72 of 102 targets met.\n<!-- /facts:eval-targets -->\n",
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("missing %q in\n%s", want, b)
		}
	}
	setP50(t, filepath.Join(reports, "synthetic-7000-4.json"), "lookuproute-sdk", 900)
	stderr.Reset()
	if code := run([]string{"-check", "-root", root, "-eval", reports, doc}, &stdout, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), "eval-tables synthetic-7000-4") || strings.Contains(stderr.String(), "eval-targets") {
		t.Fatalf("check after lookuproute-sdk's p50 changed: exit %d (%s), want 1 naming eval-tables only", code, stderr.String())
	}
}

func TestSelectReports_PatternsInTheirOrder(t *testing.T) {
	dir := t.TempDir()
	var files []string
	for _, n := range []string{"a-10000-1", "a-7000-1", "b-10000-1"} {
		files = append(files, filepath.Join(dir, n+".json"))
	}
	got, err := selectReports(dir, files, []string{"b-*", "a-*"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range got {
		names = append(names, strings.TrimSuffix(filepath.Base(f), ".json"))
	}
	if strings.Join(names, ",") != "b-10000-1,a-10000-1,a-7000-1" {
		t.Fatalf("got %v", names)
	}
	if all, _ := selectReports(dir, files, nil); len(all) != 3 {
		t.Fatalf("no args: %v, want every report", all)
	}
	for _, bad := range []string{"c-*", "a-1", "../a-10000-1", "["} {
		if _, err := selectReports(dir, files, []string{bad}); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
