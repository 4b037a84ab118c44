package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/inference-cache/inference-cache/api"
	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/fingerprint"
)

// lookupServer is a LookupRoute that records the requests it gets.
type lookupServer struct {
	pb.UnimplementedInferenceCacheServer
	mu   sync.Mutex
	reqs []*pb.LookupRouteRequest
	resp *pb.LookupRouteResponse // nil: NO_HINT
}

func (s *lookupServer) LookupRoute(_ context.Context, req *pb.LookupRouteRequest) (*pb.LookupRouteResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = append(s.reqs, req)
	if s.resp != nil {
		return s.resp, nil
	}
	return &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_NO_HINT, ServedBy: "fake"}, nil
}

func (s *lookupServer) requests() []*pb.LookupRouteRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*pb.LookupRouteRequest(nil), s.reqs...)
}

// startLookupServer serves s on a loopback port and returns its address.
func startLookupServer(t *testing.T, s *lookupServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	pb.RegisterInferenceCacheServer(g, s)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// Bad lookup input is refused before any call, naming the flag and the
// limit or the position of the bad item (fault trial: -5 was taken as 0,
// a negative timeout was accepted, "1,,2" lost an item, and a model id
// that is not UTF-8 failed inside gRPC's marshalling).
func TestLookupCmd_RefusesBadFlagsBeforeAnyCall(t *testing.T) {
	s := &lookupServer{}
	addr := startLookupServer(t, s)
	cases := []struct {
		name, stdin string
		args        []string
		want        []string
	}{
		{"negative block size", "", []string{"--tokens", "1,2", "--block-size", "-5"}, []string{"--block-size -5", "between 1 and 4096"}},
		{"block size over the limit", "", []string{"--tokens", "1,2", "--block-size", "4097"}, []string{"--block-size 4097", "4096"}},
		{"negative timeout", "", []string{"--tokens", "1", "--timeout", "-1s"}, []string{"--timeout -1s", "positive"}},
		{"zero timeout", "", []string{"--tokens", "1", "--timeout", "0s"}, []string{"--timeout 0s", "positive"}},
		{"empty hash between commas", "", []string{"--block-hashes", "1,,2"}, []string{"--block-hashes", "item 2 is empty"}},
		{"trailing comma", "", []string{"--block-hashes", "1,2,"}, []string{"--block-hashes", "item 3 is empty"}},
		{"leading comma in tokens", "", []string{"--tokens", ",1"}, []string{"--tokens", "item 1 is empty"}},
		{"bad token names its position", "", []string{"--tokens", "1 2,x"}, []string{"--tokens", `item 3 "x"`, "4294967295"}},
		{"model not UTF-8", "", []string{"--model", "\xff"}, []string{"--model", "UTF-8", "offset 0"}},
		{"tenant not UTF-8", "", []string{"--tenant", "ok\xc3"}, []string{"--tenant", "UTF-8", "offset 2"}},
		{"prompt not UTF-8", "", []string{"--prompt", "a\xffb"}, []string{"--prompt", "UTF-8", "offset 1"}},
		{"prompt and prompt file", "x", []string{"--prompt", "a", "--prompt-file", "-"}, []string{"--prompt and --prompt-file"}},
		{"prompt file missing", "", []string{"--prompt-file", "/nonexistent/p.txt"}, []string{"--prompt-file", "/nonexistent/p.txt", "no such file"}},
		{"prompt file not UTF-8", "ab\xffc", []string{"--prompt-file", "-"}, []string{"--prompt-file stdin", "UTF-8", "offset 2"}},
		{"prompt file empty", "", []string{"--prompt-file", "-"}, []string{"--prompt-file stdin", "empty"}},
		{"prompt file over the limit", strings.Repeat("a", api.MaxPromptBytes+1), []string{"--prompt-file", "-"}, []string{"--prompt-file stdin", "1048576"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"lookup", "--addr", addr, "--model", "m"}, c.args...)
			_, err := runCLI(t, c.stdin, args...)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err = %q, want it to contain %q", err, w)
				}
			}
		})
	}
	if n := len(s.requests()); n != 0 {
		t.Errorf("%d lookups reached the server; bad input must be refused before any call", n)
	}
}

// --prompt-file carries a prompt longer than a command line takes
// (~128 KiB per argument) verbatim, from a file or stdin.
func TestLookupCmd_PromptFileSendsThePromptVerbatim(t *testing.T) {
	s := &lookupServer{}
	addr := startLookupServer(t, s)
	long := strings.Repeat("You are a helpful assistant. ", 10000) + "\n" // 290 KB
	file := t.TempDir() + "/prompt.txt"
	if err := os.WriteFile(file, []byte(long), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, stdin, path string }{{"file", "", file}, {"stdin", long, "-"}} {
		if _, err := runCLI(t, c.stdin, "lookup", "--addr", addr, "--model", "m", "--prompt-file", c.path); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
	}
	reqs := s.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d lookups, want 2", len(reqs))
	}
	for i, r := range reqs {
		if r.PromptText != long {
			t.Errorf("lookup %d: prompt of %d bytes, want the file's %d verbatim", i, len(r.PromptText), len(long))
		}
	}
}

// --cache-salt is sent, and a local --block-size fingerprint is computed in
// the salt's hash domain, not the unsalted one.
func TestLookupCmd_CacheSalt(t *testing.T) {
	s := &lookupServer{}
	addr := startLookupServer(t, s)
	if _, err := runCLI(t, "", "lookup", "--addr", addr, "--model", "m", "--cache-salt", "s1", "--tokens", "1,2,3,4"); err != nil {
		t.Fatal(err)
	}
	if _, err := runCLI(t, "", "lookup", "--addr", addr, "--model", "m", "--cache-salt", "s1", "--tokens", "1,2,3,4", "--block-size", "4"); err != nil {
		t.Fatal(err)
	}
	reqs := s.requests()
	if len(reqs) != 2 || reqs[0].CacheSalt != "s1" || len(reqs[0].TokenIds) != 4 {
		t.Fatalf("requests %v", reqs)
	}
	salted, _ := fingerprint.AppendSaltedBlockHashes(nil, []uint32{1, 2, 3, 4}, 4, "s1")
	if r := reqs[1]; r.CacheSalt != "s1" || len(r.BlockHashes) != 1 || r.BlockHashes[0] != salted[0] || len(r.TokenIds) != 0 {
		t.Fatalf("local fingerprint %v, want salted %v", r, salted)
	}
}

// Separators that do not lose values still work: commas, spaces, both.
func TestParseUints_AcceptsCommasAndSpaces(t *testing.T) {
	for _, in := range []string{"1,2,3", "1 2 3", "1, 2, 3", " 1,2 , 3 ", "1 2,3", "1\n2\t3"} {
		got, err := parseUints(in, 32)
		if err != nil || len(got) != 3 || got[0] != 1 || got[2] != 3 {
			t.Errorf("parseUints(%q) = %v, %v; want [1 2 3]", in, got, err)
		}
	}
}

// explainedMatch is a PREFIX_MATCH as the server answers with explain:
// a = 64 × 0.9 × 0.8 × 1.225 × (1 − 2/3) = 18.816.
var explainedMatch = &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_PREFIX_MATCH, ServedBy: "n1", Replicas: []*pb.ReplicaHint{
	{ReplicaId: "vllm-a", Score: 18.816, MatchedTokens: 64, MatchedBlocks: 4, Freshness: 0.9, AgeMs: 60000, Pressure: 0.4, WaitingRequests: 7, RunningRequests: 3,
		Factors: &pb.HintFactors{RankingVersion: "v2", Freshness: 0.9, PressureFactor: 0.8, SloBias: 1.225, DistinguishingPower: 1.0 / 3, MatchingAtDepth: 2, TotalReplicas: 3, StatsFresh: true}},
}}

// --explain asks for the factors and prints them per hint; --json prints
// them as each hint's factors object; without --explain the request does
// not ask and the table shows the queue.
func TestLookupCmd_ExplainPrintsFactors(t *testing.T) {
	s := &lookupServer{resp: explainedMatch}
	addr := startLookupServer(t, s)
	out, err := runCLI(t, "", "lookup", "--addr", addr, "--model", "m", "--tenant", "t", "--tokens", "1,2,3", "--explain")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"ranking v2: score = matched tokens × freshness × pressure factor × SLO bias × distinguishing power",
		"PRESSURE FACTOR", "SLO BIAS", "DISTINGUISHING POWER", "MATCHING/TOTAL", "WAITING", "RUNNING",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if row := fieldsOf(out, "vllm-a"); strings.Join(row, " ") != "vllm-a 18.8160 64 0.9000 0.8000 1.2250 0.3333 2/3 7 3 yes" {
		t.Errorf("vllm-a row %q", row)
	}

	out, err = runCLI(t, "", "lookup", "--addr", addr, "--model", "m", "--tenant", "t", "--tokens", "1,2,3", "--explain", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var got pb.LookupRouteResponse
	if err := protojson.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("--json output does not parse: %v\n%s", err, out)
	}
	if !proto.Equal(&got, explainedMatch) || !strings.Contains(out, `"factors"`) || !strings.Contains(out, `"waiting_requests"`) {
		t.Fatalf("--json output:\n%s", out)
	}

	out, err = runCLI(t, "", "lookup", "--addr", addr, "--model", "m", "--tokens", "1,2,3")
	if err != nil {
		t.Fatal(err)
	}
	if row := fieldsOf(out, "vllm-a"); strings.Join(row, " ") != "vllm-a 18.82 64 4 0.900 60000 0.40 7 3 confirmed" || strings.Contains(out, "PRESSURE FACTOR") {
		t.Errorf("plain table row %q:\n%s", row, out)
	}
	reqs := s.requests()
	if len(reqs) != 3 || !reqs[0].Explain || !reqs[1].Explain || reqs[2].Explain {
		t.Fatalf("%d lookups; explain must be sent with --explain only", len(reqs))
	}
}

// The fallbacks say what picked them: TENANT_HOT its tenant hit rate,
// AFFINITY_HINT the rendezvous pick.
func TestLookupCmd_ExplainFallbacks(t *testing.T) {
	for _, c := range []struct {
		reason      pb.ReasonCode
		explain     *pb.HintFactors
		score       float64
		column, row string
	}{
		{pb.ReasonCode_TENANT_HOT, &pb.HintFactors{RankingVersion: "v2", PressureFactor: 0.9, SloBias: 1, TotalReplicas: 4, TenantHitRate: 0.55, StatsFresh: true}, 0.55,
			"TENANT HIT RATE", "r1 0.5500 0 0.0000 0.9000 1.0000 0.0000 0/4 2 1 yes 0.5500"},
		{pb.ReasonCode_AFFINITY_HINT, &pb.HintFactors{RankingVersion: "v2", PressureFactor: 1, SloBias: 1, TotalReplicas: 4, AffinityPick: true}, 0,
			"RENDEZVOUS", "r1 0.0000 0 0.0000 1.0000 1.0000 0.0000 0/4 2 1 no true"},
	} {
		t.Run(c.reason.String(), func(t *testing.T) {
			s := &lookupServer{resp: &pb.LookupRouteResponse{ReasonCode: c.reason, Replicas: []*pb.ReplicaHint{
				{ReplicaId: "r1", Score: c.score, WaitingRequests: 2, RunningRequests: 1, Factors: c.explain}}}}
			out, err := runCLI(t, "", "lookup", "--addr", startLookupServer(t, s), "--model", "m", "--tokens", "1", "--explain")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out, c.column) || strings.Contains(out, "ranking v2:") {
				t.Errorf("output:\n%s", out)
			}
			if row := fieldsOf(out, "r1"); strings.Join(row, " ") != c.row {
				t.Errorf("row %q, want %q", strings.Join(row, " "), c.row)
			}
		})
	}
}

// fieldsOf returns the white-space fields of the first output line that
// starts with first.
func fieldsOf(out, first string) []string {
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == first {
			return f
		}
	}
	return nil
}

// A NO_HINT's detail names request fields; the lookup table names the
// flags the user typed instead (--json keeps the server's words).
func TestLookupCmd_DetailNamesTheFlagsTyped(t *testing.T) {
	prompt := filepath.Join(t.TempDir(), "prompt.txt")
	if err := os.WriteFile(prompt, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, detail string
		args         []string
		want         string
	}{
		{"no key", "no key: give block_hashes, prefix_hash, token_ids or prompt_text", nil,
			"no key: give --block-hashes, --prefix-hash, --tokens or --prompt"},
		{"ids", "model_id over MaxIDBytes (256); tenant_id too; hash_scheme is empty", nil,
			"--model over MaxIDBytes (256); --tenant too; --scheme is empty"},
		{"prompt file", "prompt_text tokenizes to more than MaxTokens (262144)", []string{"--prompt-file", prompt},
			"--prompt-file tokenizes to more than MaxTokens (262144)"},
		{"tokens fingerprinted locally", "block_hashes over MaxChainLength (8192)", []string{"--tokens", "1,2", "--block-size", "2"},
			"the blocks of --tokens (at --block-size 2) over MaxChainLength (8192)"},
		{"words that only contain a field name stay", "model_ids and xtoken_ids", nil, "model_ids and xtoken_ids"},
	} {
		addr := startLookupServer(t, &lookupServer{resp: &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_NO_HINT, Detail: c.detail, ServedBy: "n1"}})
		args := append([]string{"lookup", "--addr", addr, "--model", "m", "--tenant", "t"}, c.args...)
		if len(c.args) == 0 {
			args = append(args, "--block-hashes", "1")
		}
		out, err := runCLI(t, "", args...)
		if err != nil {
			t.Fatalf("%s: %v\n%s", c.name, err, out)
		}
		got := ""
		if f := fieldsOf(out, "detail"); len(f) > 0 {
			got = strings.Join(f[1:], " ")
		}
		if got != c.want {
			t.Errorf("%s: detail %q, want %q\n%s", c.name, got, c.want, out)
		}
		out, err = runCLI(t, "", append(args, "--json")...)
		var resp pb.LookupRouteResponse
		if err != nil || protojson.Unmarshal([]byte(out), &resp) != nil || resp.Detail != c.detail {
			t.Errorf("%s --json: %v\n%s\nwant the server's detail %q", c.name, err, out, c.detail)
		}
	}
}
