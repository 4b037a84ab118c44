package api

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/fingerprint"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/internal/fixtures"
	"github.com/inference-cache/inference-cache/policy"
	"github.com/inference-cache/inference-cache/tokenizer"
)

// modelsDirWith makes a fresh models directory holding the reference qwen3
// tokenizer as model "qwen3" and an unsupported tokenizer as "wordpiece".
func modelsDirWith(t *testing.T) string {
	t.Helper()
	dir := fixtures.ModelsDir(t, "qwen3")
	// A model whose tokenizer.json uses a type the server refuses.
	bad := filepath.Join(dir, "wordpiece")
	if err := os.Mkdir(bad, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bad, "tokenizer.json"), []byte(`{"model":{"type":"WordPiece","vocab":{"a":0}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// The third key form must reach the same answer as the token ids it stands
// for: the server tokenizes with the model's own tokenizer and then takes the
// token_ids path (contract §5.1 key resolution).
func TestLookupRoute_PromptTextMatchesEquivalentTokenIDs(t *testing.T) {
	reg := tokenizer.NewRegistry(modelsDirWith(t), tokenizer.RegistryOptions{})
	prompt := strings.Repeat("You are a helpful assistant. Answer briefly and cite sources. ", 20)
	ids, err := reg.Encode("qwen3", prompt)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) < 64 {
		t.Fatalf("prompt gives only %d tokens; the test needs several blocks", len(ids))
	}
	p := policy.Default()
	p.BlockSize = map[string]uint32{"qwen3": 16}
	// The budget is the default's 10 ms; under -race on a loaded machine
	// tokenizing can take longer, and this test is about equal answers,
	// not the budget (TestLookupRoute_PromptTextTokenizingStopsAtTheBudget).
	p.LookupTimeout = 10 * time.Second
	ix := index.New(p)
	hashes, _ := fingerprint.AppendBlockHashes(nil, ids, 16)
	counts := make([]uint32, len(hashes))
	for i := range counts {
		counts[i] = 16
	}
	now := time.Now().UnixMilli()
	part := index.Partition{Scheme: "vllm", Model: "qwen3", Tenant: "t"}
	// r-long holds the whole prompt, r-short only its first four blocks.
	ix.ApplyEvents([]index.BlockEvent{
		{Kind: index.Stored, ReplicaID: "r-long", Partition: part, BlockHashes: hashes, BlockTokenCounts: counts, ObservedAtMs: now},
		{Kind: index.Stored, ReplicaID: "r-short", Partition: part, BlockHashes: hashes[:4], BlockTokenCounts: counts[:4], ObservedAtMs: now},
	})
	n := &indexNode{ix: ix}
	n.pol = p
	s := NewService(Config{Backend: n, Tokenizer: reg})

	base := &pb.LookupRouteRequest{HashScheme: "vllm", ModelId: "qwen3", TenantId: "t"}
	byIDs := cloneReq(base)
	byIDs.TokenIds = ids
	byText := cloneReq(base)
	byText.PromptText = prompt

	a, _ := s.LookupRoute(context.Background(), byIDs)
	b, _ := s.LookupRoute(context.Background(), byText)
	if a.GetReasonCode() != pb.ReasonCode_PREFIX_MATCH || len(a.GetReplicas()) == 0 || a.GetReplicas()[0].GetReplicaId() != "r-long" {
		t.Fatalf("token_ids lookup: %v %q %v, want PREFIX_MATCH led by r-long", a.GetReasonCode(), a.GetDetail(), a.GetReplicas())
	}
	if want := uint32(len(hashes) * 16); a.GetReplicas()[0].GetMatchedTokens() != want {
		t.Errorf("matched tokens %d, want %d (every full block)", a.GetReplicas()[0].GetMatchedTokens(), want)
	}
	// Scores include freshness, which moves between the two calls by at
	// most a millisecond of age: compare everything else exactly.
	ignore := protocmp.IgnoreFields(&pb.ReplicaHint{}, "score", "freshness", "age_ms")
	if d := cmp.Diff(a, b, protocmp.Transform(), ignore); d != "" {
		t.Errorf("prompt_text answer differs from token_ids answer (-ids +text):\n%s", d)
	}
}

func cloneReq(r *pb.LookupRouteRequest) *pb.LookupRouteRequest {
	return &pb.LookupRouteRequest{HashScheme: r.HashScheme, ModelId: r.ModelId, TenantId: r.TenantId}
}

func TestLookupRoute_PromptTextFailuresAreNoHintWithDetail(t *testing.T) {
	withDir := tokenizer.NewRegistry(modelsDirWith(t), tokenizer.RegistryOptions{})
	noDir := tokenizer.NewRegistry("", tokenizer.RegistryOptions{})
	cases := []struct {
		name   string
		tok    Tokenizer
		model  string
		prompt string
		want   string
	}{
		{"no tokenizer configured", nil, "qwen3", "hello", DetailNoTokenizer},
		{"registry without models dir", noDir, "qwen3", "hello", DetailNoTokenizer},
		{"model absent from models dir", withDir, "llama-9", "hello", DetailNoModelTokenizer},
		{"path escape in model id", withDir, "../qwen3", "hello", DetailNoModelTokenizer},
		{"unsupported tokenizer type", withDir, "wordpiece", "hello", DetailUnsupportedTok},
		{"invalid UTF-8", withDir, "qwen3", "ok \xff\xfe bad", DetailPromptUTF8},
		{"over MaxPromptBytes", withDir, "qwen3", strings.Repeat("a", MaxPromptBytes+1), DetailPromptTooLong},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeNode{lookup: match}
			s := newSvc(f, c.tok)
			if c.tok == nil {
				s = NewService(Config{Backend: f})
			}
			r, err := s.LookupRoute(context.Background(), &pb.LookupRouteRequest{HashScheme: "vllm", ModelId: c.model, PromptText: c.prompt})
			if err != nil {
				t.Fatalf("LookupRoute returned an error: %v", err)
			}
			if r.GetReasonCode() != pb.ReasonCode_NO_HINT || r.GetDetail() != c.want {
				t.Fatalf("got %v %q, want NO_HINT %q", r.GetReasonCode(), r.GetDetail(), c.want)
			}
			if strings.Contains(r.GetDetail(), "/") && c.want != DetailNoTokenizer {
				t.Errorf("detail leaks a path: %q", r.GetDetail())
			}
		})
	}
}

// BenchmarkLookupRoute_PromptText32KB measures the whole handler for a 32 KB
// prompt_text (tokenize with the real qwen3 tokenizer, fingerprint, match)
// next to the same lookup given as token_ids, in the same run. The first
// iteration warms the tokenizer's word cache, as a repeated system prompt
// would in production; the cold figure is the tokenizer's own benchmark.
func BenchmarkLookupRoute_PromptText32KB(b *testing.B) {
	reg := tokenizer.NewRegistry(fixtures.ModelsDir(b, "qwen3"), tokenizer.RegistryOptions{})
	var sb strings.Builder
	for i := 0; sb.Len() < 32<<10; i++ {
		sb.WriteString("The quick brown fox jumps over the lazy dog; request number ")
		sb.WriteString(strings.Repeat("x", i%7))
		sb.WriteString(". ")
	}
	prompt := sb.String()[:32<<10]
	ids, err := reg.Encode("qwen3", prompt)
	if err != nil {
		b.Fatal(err)
	}
	p := policy.Default()
	p.LookupTimeout = 10 * time.Second // measure, do not cut off
	ix := index.New(p)
	hashes, _ := fingerprint.AppendBlockHashes(nil, ids, 16)
	counts := make([]uint32, len(hashes))
	for i := range counts {
		counts[i] = 16
	}
	// A second replica in the serving set: with one replica, distinguishing
	// power is 1 − 1/1 = 0 and no prefix ever matches (contract §5.4).
	part := index.Partition{Scheme: "vllm", Model: "qwen3"}
	ix.ApplyEvents([]index.BlockEvent{
		{Kind: index.Stored, ReplicaID: "r", Partition: part, BlockHashes: hashes, BlockTokenCounts: counts, ObservedAtMs: time.Now().UnixMilli()},
		{Kind: index.Stored, ReplicaID: "other", Partition: part, BlockHashes: []uint64{42}, BlockTokenCounts: []uint32{16}, ObservedAtMs: time.Now().UnixMilli()},
	})
	n := &indexNode{ix: ix}
	n.pol = p
	s := NewService(Config{Backend: n, Tokenizer: reg})
	for _, mode := range []string{"prompt_text", "token_ids"} {
		req := &pb.LookupRouteRequest{HashScheme: "vllm", ModelId: "qwen3"}
		if mode == "prompt_text" {
			req.PromptText = prompt
		} else {
			req.TokenIds = ids
		}
		b.Run(mode, func(b *testing.B) {
			b.SetBytes(int64(len(prompt)))
			lat := make([]time.Duration, 0, 1024)
			for b.Loop() {
				t0 := time.Now()
				r, _ := s.LookupRoute(context.Background(), req)
				lat = append(lat, time.Since(t0))
				if r.GetReasonCode() != pb.ReasonCode_PREFIX_MATCH {
					b.Fatalf("%v %q", r.GetReasonCode(), r.GetDetail())
				}
			}
			reportQuantiles(b, lat)
		})
	}
}

// reportQuantiles adds p50 and p99 latency metrics (µs) to a benchmark.
func reportQuantiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	q := func(f float64) float64 { return float64(lat[int(f*float64(len(lat)-1))]) / 1e3 }
	b.ReportMetric(q(0.50), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
}

// Tokenizing prompt_text is bounded by the lookup's budget (contract §5.7: the
// policy's lookupTimeoutMs is the server's own budget for one lookup) and
// by the caller's context: a prompt that takes far longer to tokenize (a
// fault trial's 1 MiB of spaces took 0.35–0.87 s) is cut off and answered
// NO_HINT soon after the budget, and a prompt past MaxTokens tokens is
// answered NO_HINT naming the limit.
func TestLookupRoute_PromptTextTokenizingStopsAtTheBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("tokenizes megabyte prompts")
	}
	reg := tokenizer.NewRegistry(modelsDirWith(t), tokenizer.RegistryOptions{})
	spaces := strings.Repeat(" ", MaxPromptBytes)
	digits := strings.Repeat("1", MaxPromptBytes) // one token per byte: 4× MaxTokens
	full := time.Now()
	if _, err := reg.Encode("qwen3", spaces); err != nil { // also loads the tokenizer
		t.Fatal(err)
	}
	fullTook := time.Since(full)
	cases := []struct {
		name    string
		prompt  string
		budget  time.Duration
		callerT time.Duration // the caller's own deadline; 0 = none
		want    string
		fast    bool // must answer in well under the time a full tokenization takes
	}{
		{"1 MiB of spaces over a 5 ms budget", spaces, 5 * time.Millisecond, 0, DetailTokenizeTimeout, true},
		{"1 MiB of digits over a 5 ms budget", digits, 5 * time.Millisecond, 0, DetailTokenizeTimeout, true},
		{"caller's deadline before the budget", spaces, 10 * time.Second, 5 * time.Millisecond, DetailCanceled, true},
		{"more tokens than MaxTokens", digits, 10 * time.Second, 0, DetailTokenizeTooLong, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeNode{lookup: match}
			f.pol = policy.Default()
			f.pol.LookupTimeout = c.budget
			s := newSvc(f, reg)
			ctx := context.Background()
			if c.callerT > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, c.callerT)
				defer cancel()
			}
			start := time.Now()
			r, err := s.LookupRoute(ctx, &pb.LookupRouteRequest{HashScheme: "vllm", ModelId: "qwen3", PromptText: c.prompt})
			took := time.Since(start)
			if err != nil || r.GetReasonCode() != pb.ReasonCode_NO_HINT || r.GetDetail() != c.want {
				t.Fatalf("got %v %q (err %v) after %v, want NO_HINT %q", r.GetReasonCode(), r.GetDetail(), err, took, c.want)
			}
			if c.fast && took > fullTook/2 {
				t.Errorf("answered after %v; tokenizing the whole prompt takes %v: it was not cut off", took, fullTook)
			}
		})
	}

	// A first use waits for the tokenizer's load (a parse of an 11 MB
	// file) only as long as the budget.
	fresh := tokenizer.NewRegistry(modelsDirWith(t), tokenizer.RegistryOptions{})
	s := newSvc(&fakeNode{lookup: match}, fresh)
	start := time.Now()
	r, _ := s.LookupRoute(context.Background(), &pb.LookupRouteRequest{HashScheme: "vllm", ModelId: "qwen3", PromptText: "hello"})
	// The detail says the tokenizer is loading, not that the prompt was
	// too long for the budget (fault trial: it sent operators looking at
	// prompt lengths).
	if r.GetDetail() != DetailTokenizerLoading || time.Since(start) > 200*time.Millisecond {
		t.Errorf("first use while loading: %v %q after %v, want NO_HINT %q at the budget", r.GetReasonCode(), r.GetDetail(), time.Since(start), DetailTokenizerLoading)
	}
}

// recordingTok records what LookupRoute asks of its tokenizer.
type recordingTok struct {
	deadline  time.Time
	hasDL     bool
	maxTokens int
}

func (r *recordingTok) EncodeContext(ctx context.Context, _, text string, maxTokens int) ([]uint32, error) {
	r.deadline, r.hasDL = ctx.Deadline()
	r.maxTokens = maxTokens
	return make([]uint32, len(text)), nil
}

// The tokenizer gets the lookup's budget as its context's deadline and
// MaxTokens as its cap, so it can stop instead of finishing work the
// lookup cannot use.
func TestLookupRoute_PromptTextTokenizerGetsBudgetAndTokenCap(t *testing.T) {
	rec := &recordingTok{}
	s := newSvc(&fakeNode{lookup: match}, rec)
	start := time.Now()
	r, _ := s.LookupRoute(context.Background(), &pb.LookupRouteRequest{HashScheme: "vllm", ModelId: "m", PromptText: "hello"})
	if r.GetReasonCode() != pb.ReasonCode_PREFIX_MATCH {
		t.Fatalf("got %v %q", r.GetReasonCode(), r.GetDetail())
	}
	budget := policy.Default().LookupTimeout
	if !rec.hasDL || rec.deadline.Before(start.Add(budget)) || rec.deadline.After(time.Now().Add(budget)) {
		t.Errorf("tokenizer deadline %v (set %v), want start + %v", rec.deadline, rec.hasDL, budget)
	}
	if rec.maxTokens != MaxTokens {
		t.Errorf("maxTokens %d, want MaxTokens (%d)", rec.maxTokens, MaxTokens)
	}
}
