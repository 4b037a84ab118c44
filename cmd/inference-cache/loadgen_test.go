package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/inference-cache/inference-cache/loadgen"
)

// writeTrace writes n Mooncake records, 10 ms apart.
func writeTrace(t *testing.T, n int) string {
	t.Helper()
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"timestamp": %d, "input_length": 600, "output_length": 100, "hash_ids": [0, %d]}`+"\n", 10*i, i+1)
	}
	p := filepath.Join(t.TempDir(), "trace.jsonl")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// The command replays the records after --skip up to --limit, leaves the
// --warmup ones out of the summary, writes every request to --results,
// and exits non-zero when a measured request failed.
func TestLoadgenCmd(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), loadgen.BlockText(6, 20)) { // record 5's own block
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"error":{"message":"overloaded","type":"x","param":null,"code":503}}`)
			return
		}
		w.Header().Set(loadgen.HeaderReplica, "sim-1")
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\" tok\"}}]}\n\n")
		fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":605,\"completion_tokens\":1,\"total_tokens\":606}}\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	trace := writeTrace(t, 10)
	results := filepath.Join(t.TempDir(), "r.jsonl")
	out, err := runCLI(t, "", "loadgen", "--target", srv.URL, "--model", "qwen3", "--trace", trace, "--skip", "2", "--limit", "5",
		"--warmup", "1", "--speedup", "10", "--json", "--quiet", "--results", results)
	if err == nil || !strings.Contains(err.Error(), "1 of 4 requests failed") {
		t.Fatalf("err %v, want the one 503 of the 4 measured requests reported\n%s", err, out)
	}
	var s loadgen.Summary
	if jerr := json.Unmarshal([]byte(out[:strings.LastIndex(out, "}")+1]), &s); jerr != nil {
		t.Fatalf("--json: %v\n%s", jerr, out)
	}
	if s.Requests != 4 || s.OK != 3 || s.Errors[loadgen.ErrStatus] != 1 || s.PromptTokens != 3*605 || s.Replicas["sim-1"] != 3 {
		t.Fatalf("summary %+v", s)
	}
	b, err := os.ReadFile(results)
	if err != nil || strings.Count(string(b), "\n") != 5 {
		t.Fatalf("--results: %d lines, %v; want all 5 requests sent", strings.Count(string(b), "\n"), err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--target", "http://10.1.2.3:80", "--model", "m"}, "not a loopback address"},
		{[]string{"--target", srv.URL}, "--model: required"},
		{[]string{"--target", srv.URL, "--model", "m", "--trace", trace, "--skip", "10"}, "--skip 10: the trace has 10 records"},
		{[]string{"--target", srv.URL, "--model", "m", "--trace", trace, "--speedup", "-2"}, "--speedup -2"},
	} {
		if _, err := runCLI(t, "", append([]string{"loadgen"}, c.args...)...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err %v, want %q", c.args, err, c.want)
		}
	}
}

// --compare replays the same records to the second target after the
// first, each under a salt of its own (no prompt text in common, the
// shape the same), and prints both columns and the ratios; --json gives
// both summaries. A --compare URL off this machine, or with --results, is
// refused naming the flag.
func TestLoadgenCmd_Compare(t *testing.T) {
	var mu sync.Mutex
	bodies := map[string][]string{}
	serve := func(name, reason string, cached int) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			var req struct {
				Messages []struct{ Content string } `json:"messages"`
			}
			_ = json.Unmarshal(body, &req)
			mu.Lock()
			bodies[name] = append(bodies[name], req.Messages[0].Content)
			mu.Unlock()
			w.Header().Set(loadgen.HeaderReplica, "sim-1")
			w.Header().Set(loadgen.HeaderReason, reason)
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\" tok\"}}]}\n\n")
			fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":600,\"completion_tokens\":1,\"total_tokens\":601,\"prompt_tokens_details\":{\"cached_tokens\":%d}}}\n\ndata: [DONE]\n\n", cached)
		}))
	}
	a, b := serve("a", "PREFIX_MATCH", 300), serve("b", "ROUND_ROBIN", 100)
	defer a.Close()
	defer b.Close()
	trace := writeTrace(t, 4)
	out, err := runCLI(t, "", "loadgen", "--target", a.URL, "--compare", b.URL, "--model", "qwen3", "--trace", trace, "--speedup", "10", "--quiet")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{a.URL + " and " + b.URL, "engines' cached tokens  50.0 %", "16.7 %", "PREFIX_MATCH 4", "ROUND_ROBIN 4",
		"first against second: engines' cached tokens 3.00×"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	if len(bodies["a"]) != 4 || len(bodies["b"]) != 4 {
		t.Fatalf("requests: %d to --target, %d to --compare; want 4 each", len(bodies["a"]), len(bodies["b"]))
	}
	for _, x := range bodies["a"] {
		for _, y := range bodies["b"] {
			if strings.Fields(x)[0] == strings.Fields(y)[0] && strings.Fields(x)[1] == strings.Fields(y)[1] && strings.Fields(x)[2] == strings.Fields(y)[2] {
				t.Fatalf("the two replays share a prompt's first words: %.40q / %.40q", x, y)
			}
		}
		if len(strings.Fields(x)) != 600 {
			t.Fatalf("a prompt of %d words, want the record's 600", len(strings.Fields(x)))
		}
	}

	out, err = runCLI(t, "", "loadgen", "--target", a.URL, "--compare", b.URL, "--model", "qwen3", "--trace", trace, "--speedup", "10", "--quiet", "--json")
	var both map[string]loadgen.Summary
	if err != nil || json.Unmarshal([]byte(out), &both) != nil || both["target"].Requests != 4 || both["compare"].CacheHitRate != 100.0/600 {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--compare", "http://10.1.2.3:80"}, `--compare "http://10.1.2.3:80"`},
		{[]string{"--compare", b.URL, "--results", "r.jsonl"}, "--results: not with --compare"},
	} {
		args := append([]string{"loadgen", "--target", a.URL, "--model", "m", "--trace", trace}, c.args...)
		if _, err := runCLI(t, "", args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err %v, want %q", c.args, err, c.want)
		}
	}
}
