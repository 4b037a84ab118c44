package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/inference-cache/inference-cache/bench"
)

// Defaults and bounds of Config.
const (
	// DefaultTimeout bounds one request, connect to [DONE].
	DefaultTimeout = 2 * time.Minute
	// DefaultMaxInFlight bounds the requests in flight at once; a record
	// due while that many are open waits (and is reported late).
	DefaultMaxInFlight = 2048
	// MaxSpeedup bounds Config.Speedup: beyond it the arrivals of a whole
	// trace would be one burst.
	MaxSpeedup = 10000
)

// Config is one replay. The zero values of the optional fields take the
// defaults in parentheses.
type Config struct {
	// Target is the base URL of an OpenAI-compatible API on loopback,
	// http://HOST:PORT (a path prefix before /v1 is kept); the load goes
	// to <Target>/v1/chat/completions. A host that is not a loopback
	// address is refused: the load generator never leaves the machine.
	Target string
	// MoreTargets are further gateways in front of the same fleet (each
	// checked as Target): record i goes to the (i mod n)-th of Target
	// and MoreTargets, round robin by arrival as a Service in front of n
	// gateway replicas spreads new requests (kube-proxy's IPVS default
	// scheduler), with no session affinity: a conversation's turns reach
	// different gateways.
	MoreTargets []string
	// Model is the request's model (required).
	Model string
	// ModelFor, when set, is each record's model instead (a LoRA
	// adapter per conversation, say); "" falls back to Model.
	ModelFor func(rec *bench.Request) string
	// Speedup divides the trace's timestamps: 2 replays it twice as fast
	// (1; at most MaxSpeedup).
	Speedup float64
	// Limit stops after that many records (0 = all of them).
	Limit int
	// Duration stops sending new requests after this much wall time (0 =
	// no limit); the requests in flight then finish.
	Duration time.Duration
	// MaxTokens caps each request's max_tokens, which is the record's
	// output_length (0 = no cap). A record with output_length 0 asks
	// for 1 token.
	MaxTokens int
	// Timeout bounds one request (DefaultTimeout).
	Timeout time.Duration
	// MaxInFlight bounds the requests in flight (DefaultMaxInFlight).
	MaxInFlight int
	// Client sends the requests (a client with enough idle connections
	// per host for MaxInFlight).
	Client *http.Client
	// Epoch is the time the first record is due and every Result's times
	// count from (zero = when Replay is called), so a caller can time
	// other events on the same axis.
	Epoch time.Time
	// TextSalt draws the prompts' words under this salt
	// (SaltedPromptText; 0 = PromptText's), so that a second replay of
	// the same records on the same engines finds none of the first's
	// prefixes in their caches.
	TextSalt uint64
	// OnResult, when set, is called with every request's result as it
	// ends, from the request's goroutine (it must be safe for concurrent
	// use).
	OnResult func(Result)
}

// Result is one request's measurement. Times are in ms; TTFT is measured
// at the client, from handing the request to the transport to the first
// streamed event that carries content text (vLLM's first chat chunk, a
// role with empty content, does not count).
type Result struct {
	// Index is the record's position in the replayed slice.
	Index int `json:"index"`
	// DueMs is when the trace says it arrives (its timestamp over the
	// speed-up, from the first record), StartMs when it was sent (later
	// when MaxInFlight held it back), both from the run's start.
	DueMs   float64 `json:"due_ms"`
	StartMs float64 `json:"start_ms"`
	// TTFTMs is the time to first content (0 when none came); E2EMs the
	// time to the end of the stream or the failure.
	TTFTMs float64 `json:"ttft_ms"`
	E2EMs  float64 `json:"e2e_ms"`
	// Status is the HTTP status (0 when none was received).
	Status int `json:"status"`
	// ErrKind (one of the Err constants) and Err say why it failed; both
	// empty for a request answered in full.
	ErrKind string `json:"error_kind,omitempty"`
	Err     string `json:"error,omitempty"`
	// Replica, Reason, MatchedTokens and RetriedFrom are the proxy's
	// response headers (empty and 0 without a proxy in front).
	Replica       string `json:"replica,omitempty"`
	Reason        string `json:"reason,omitempty"`
	MatchedTokens int    `json:"matched_tokens"`
	RetriedFrom   string `json:"retried_from,omitempty"`
	// PromptTokens, CachedTokens and OutputTokens are the engine's usage
	// (prompt_tokens, prompt_tokens_details.cached_tokens,
	// completion_tokens) from the stream's usage chunk.
	PromptTokens int `json:"prompt_tokens"`
	CachedTokens int `json:"cached_tokens"`
	OutputTokens int `json:"output_tokens"`
	// OutputChunks counts the events that carried content text.
	OutputChunks int `json:"output_chunks"`
	// TraceInputLength is the record's input_length (the words sent).
	TraceInputLength int `json:"trace_input_length"`
}

// Failed reports whether the request did not complete.
func (r *Result) Failed() bool { return r.ErrKind != "" }

func (r *Result) fail(kind, msg string) {
	if r.ErrKind == "" {
		r.ErrKind, r.Err = kind, msg
	}
}

// Run is a replay's outcome.
type Run struct {
	// Results holds one entry per request sent, in record order.
	Results []Result
	// Wall is the time from the first request's due time to the last
	// request's end.
	Wall time.Duration
}

// CheckTarget parses a --target URL: http (or https) on a loopback host
// (127.0.0.0/8, ::1 or localhost), a port, nothing after the path. The
// error names the flag as the user wrote it.
func CheckTarget(target string) (*url.URL, error) {
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("--target %q: want http://HOST:PORT of an OpenAI-compatible API", target)
	}
	host := u.Hostname()
	if ip := net.ParseIP(host); !(host == "localhost" || ip != nil && ip.IsLoopback()) {
		return nil, fmt.Errorf("--target %q: host %s is not a loopback address; the load generator only sends to this machine (127.0.0.1, ::1, localhost)", target, host)
	}
	if u.Port() == "" {
		return nil, fmt.Errorf("--target %q: no port", target)
	}
	return u, nil
}

// check validates cfg and fills its defaults; errors name the flag. It
// returns the chat URL of every target, Target first.
func (c *Config) check() ([]string, error) {
	var urls []string
	for _, t := range append([]string{c.Target}, c.MoreTargets...) {
		u, err := CheckTarget(t)
		if err != nil {
			return nil, err
		}
		u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/chat/completions"
		urls = append(urls, u.String())
	}
	switch {
	case c.Model == "":
		return nil, errors.New("--model: required (the model every request names)")
	case c.Speedup < 0 || c.Speedup > MaxSpeedup || c.Speedup != c.Speedup:
		return nil, fmt.Errorf("--speedup %v: want a number above 0, at most %d", c.Speedup, MaxSpeedup)
	case c.Limit < 0:
		return nil, fmt.Errorf("--limit %d: must be 0 (every record) or more", c.Limit)
	case c.Duration < 0:
		return nil, fmt.Errorf("--duration %v: must be 0 (no limit) or more", c.Duration)
	case c.MaxTokens < 0:
		return nil, fmt.Errorf("--max-tokens %d: must be 0 (no cap) or more", c.MaxTokens)
	case c.Timeout < 0:
		return nil, fmt.Errorf("--timeout %v: must be positive", c.Timeout)
	case c.MaxInFlight < 0:
		return nil, fmt.Errorf("--max-in-flight %d: must be positive", c.MaxInFlight)
	}
	if c.Speedup == 0 {
		c.Speedup = 1
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.Client == nil {
		c.Client = NewHTTPClient(c.MaxInFlight)
	}
	return urls, nil
}

// NewHTTPClient is a client for a replay with up to inFlight requests
// open: as many idle connections kept per host, so a steady load reuses
// them instead of dialling each request.
func NewHTTPClient(inFlight int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = inFlight, inFlight
	return &http.Client{Transport: tr}
}

type runner struct {
	cfg  Config
	urls []string // the targets' chat URLs; record i goes to urls[i mod len]
	t0   time.Time
}

// Replay sends the records of reqs (in order, each at its timestamp
// over cfg.Speedup from the first one's) as streamed chat requests to
// cfg.Target (and cfg.MoreTargets in turn) and waits for every one to end. It stops sending at
// cfg.Limit records, after cfg.Duration, or when ctx ends (the requests
// in flight are then canceled and reported so). Only a bad Config is an
// error; failed requests are Results.
func Replay(ctx context.Context, reqs []bench.Request, cfg Config) (*Run, error) {
	urls, err := cfg.check()
	if err != nil {
		return nil, err
	}
	if len(reqs) == 0 {
		return nil, errors.New("loadgen: no records to replay")
	}
	if cfg.Limit > 0 && cfg.Limit < len(reqs) {
		reqs = reqs[:cfg.Limit]
	}
	t0 := cfg.Epoch
	if t0.IsZero() {
		t0 = time.Now()
	}
	r := &runner{cfg: cfg, urls: urls, t0: t0}
	var stop <-chan time.Time
	if cfg.Duration > 0 {
		t := time.NewTimer(cfg.Duration)
		defer t.Stop()
		stop = t.C
	}
	results := make([]Result, len(reqs))
	sent := r.dispatch(ctx, reqs, results, stop)
	return &Run{Results: results[:sent], Wall: time.Since(r.t0)}, nil
}

// dispatch sends each record when it is due and a slot of MaxInFlight is
// free, into results[i], until the last record, stop or ctx's end; it
// waits for the requests sent and returns how many it sent.
func (r *runner) dispatch(ctx context.Context, reqs []bench.Request, results []Result, stop <-chan time.Time) int {
	sem := make(chan struct{}, r.cfg.MaxInFlight)
	var wg sync.WaitGroup
	defer wg.Wait()
	first := reqs[0].Timestamp
	timer := time.NewTimer(0)
	defer timer.Stop()
	for i := range reqs {
		due := time.Duration(float64(reqs[i].Timestamp-first) * float64(time.Millisecond) / r.cfg.Speedup)
		if !r.waitTurn(ctx, due, timer, sem, stop) {
			return i
		}
		res, rec := &results[i], &reqs[i]
		*res = Result{Index: i, DueMs: ms(due), TraceInputLength: rec.InputLength}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			r.replayOne(ctx, i, rec, res)
		}()
	}
	return len(reqs)
}

// waitTurn waits until due after t0 and then for a slot in sem; it
// reports false, holding no slot, when stop fires or ctx ends first.
func (r *runner) waitTurn(ctx context.Context, due time.Duration, timer *time.Timer, sem chan struct{}, stop <-chan time.Time) bool {
	if wait := time.Until(r.t0.Add(due)); wait > 0 {
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-stop:
			return false
		case <-ctx.Done():
			return false
		}
	}
	select {
	case sem <- struct{}{}:
	case <-stop:
		return false
	case <-ctx.Done():
		return false
	}
	select {
	case <-stop:
		<-sem
		return false
	default:
		return true
	}
}

// replayOne sends record i as a streamed chat request into res and hands
// res to OnResult. The body is built here, not in the dispatch loop, so a
// long prompt does not delay the records due after it.
func (r *runner) replayOne(ctx context.Context, i int, rec *bench.Request, res *Result) {
	cfg := &r.cfg
	model := cfg.Model
	if cfg.ModelFor != nil {
		if m := cfg.ModelFor(rec); m != "" {
			model = m
		}
	}
	body, err := json.Marshal(chatBody{Model: model, Messages: []chatMessage{{Role: "user", Content: SaltedPromptText(rec, cfg.TextSalt)}},
		MaxTokens: maxTokens(rec.OutputLength, cfg.MaxTokens), Stream: true, StreamOptions: streamOptions{IncludeUsage: true}})
	if err != nil {
		res.fail(ErrOther, err.Error())
	} else {
		r.send(ctx, r.urls[i%len(r.urls)], body, res)
	}
	if cfg.OnResult != nil {
		cfg.OnResult(*res)
	}
}

// maxTokens is a record's max_tokens: its output length, at least 1,
// capped by limit when limit > 0.
func maxTokens(outputLength, limit int) int {
	n := max(outputLength, 1)
	if limit > 0 {
		n = min(n, limit)
	}
	return n
}
