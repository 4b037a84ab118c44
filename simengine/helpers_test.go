package simengine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/openai"
)

// manualClock is a Clock the test steps: timers fire only in Step or
// Advance, on the test's goroutine, in time order.
type manualClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*manualTimer
}

type manualTimer struct {
	c    *manualClock
	at   time.Time
	f    func()
	done bool
}

func newManualClock() *manualClock {
	return &manualClock{now: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &manualTimer{c: c, at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

func (t *manualTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.done
	t.done = true
	t.c.timers = slices.DeleteFunc(t.c.timers, func(x *manualTimer) bool { return x == t })
	return was
}

// next pops the earliest timer due by limit (zero limit: any), moving
// the clock to its time.
func (c *manualClock) next(limit time.Time) *manualTimer {
	c.mu.Lock()
	defer c.mu.Unlock()
	var best *manualTimer
	for _, t := range c.timers {
		if best == nil || t.at.Before(best.at) {
			best = t
		}
	}
	if best == nil || (!limit.IsZero() && best.at.After(limit)) {
		return nil
	}
	c.timers = slices.DeleteFunc(c.timers, func(x *manualTimer) bool { return x == best })
	best.done = true
	if best.at.After(c.now) {
		c.now = best.at
	}
	return best
}

// Step fires the earliest pending timer; false when none is pending.
func (c *manualClock) Step() bool {
	t := c.next(time.Time{})
	if t == nil {
		return false
	}
	t.f()
	return true
}

// Advance fires every timer due within d, in order, then sets the clock
// d later than it was.
func (c *manualClock) Advance(d time.Duration) {
	end := c.Now().Add(d)
	for t := c.next(end); t != nil; t = c.next(end) {
		t.f()
	}
	c.mu.Lock()
	c.now = end
	c.mu.Unlock()
}

func (c *manualClock) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// drive steps c whenever a timer is pending until stop is closed, so
// that requests run to completion in virtual time.
func drive(c *manualClock, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		if !c.Step() {
			time.Sleep(200 * time.Microsecond) // paces the virtual clock's driver; nothing is asserted after it
		}
	}
}

// testPrompter tokenizes without a tokenizer: token-id prompts as they
// are, a text prompt one id per byte, a chat request one id per byte of
// its messages' "role:text\n".
type testPrompter struct{}

func (testPrompter) PromptTokens(_ context.Context, _ string, req *openai.Request) ([]uint32, error) {
	var b []byte
	switch {
	case req.Kind == openai.KindChat:
		for _, m := range req.Messages {
			text, _ := openai.MessageText(m)
			role, _ := m.Get("role")
			b = append(append(append(append(b, role.(string)...), ':'), text...), '\n')
		}
	case len(req.Prompt.TokenIDs) > 0:
		return req.Prompt.TokenIDs[0], nil
	default:
		b = []byte(req.Prompt.Texts[0])
	}
	ids := make([]uint32, len(b))
	for i, c := range b {
		ids[i] = uint32(c)
	}
	return ids, nil
}

// fakePublisher keeps every published batch.
type fakePublisher struct {
	mu      sync.Mutex
	batches [][]byte
}

func (p *fakePublisher) Publish(b []byte) (uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.batches = append(p.batches, b)
	return uint64(len(p.batches) - 1), nil
}

func (p *fakePublisher) all() [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.batches)
}

// published waits until the engine's publisher goroutine has sent at
// least n batches and returns every batch sent so far.
func (te *testEngine) published(t *testing.T, n int) [][]byte {
	t.Helper()
	var bs [][]byte
	poll.Eventually(t, 10*time.Second, time.Millisecond, func() (bool, string) {
		bs = te.pub.all()
		return len(bs) >= n, fmt.Sprintf("%d batches published, want %d", len(bs), n)
	})
	return bs
}

type testEngine struct {
	*Engine
	clock *manualClock
	srv   *httptest.Server
	pub   *fakePublisher
}

// newTestEngine starts an engine on a manual clock (cfg.Clock set unless
// the test gave one) behind an HTTP server.
func newTestEngine(t *testing.T, cfg Config) *testEngine {
	t.Helper()
	te := &testEngine{pub: &fakePublisher{}}
	if cfg.Clock == nil {
		te.clock = newManualClock()
		cfg.Clock = te.clock
	}
	if cfg.Model == "" {
		cfg.Model = "sim-model"
	}
	if cfg.Events == nil {
		cfg.Events = te.pub
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	te.Engine = e
	te.srv = httptest.NewServer(NewServer(e, testPrompter{}, ServerOptions{Logger: cfg.Logger}))
	t.Cleanup(func() { te.srv.Close(); e.Close() })
	return te
}

// post sends body to path and returns the response (closed by cleanup).
func (te *testEngine) post(t *testing.T, ctx context.Context, path string, body any) *http.Response {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, te.srv.URL+path, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// postDriven is post with the clock driven until the response is read.
func (te *testEngine) postDriven(t *testing.T, path string, body any) (int, []byte) {
	t.Helper()
	stop := make(chan struct{})
	go drive(te.clock, stop)
	defer close(stop)
	resp := te.post(t, context.Background(), path, body)
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// scrape reads the engine's /metrics as the subscriber parses it.
func (te *testEngine) scrape(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(te.srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// metric is the value of the series of name whose labels include want
// (a histogram gives its sum), -1 when absent.
func metric(fams map[string]*dto.MetricFamily, name string, want ...string) float64 {
	f := fams[name]
	if f == nil {
		return -1
	}
next:
	for _, m := range f.GetMetric() {
		for i := 0; i+1 < len(want); i += 2 {
			found := false
			for _, l := range m.GetLabel() {
				found = found || (l.GetName() == want[i] && l.GetValue() == want[i+1])
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue()
		case m.GetHistogram() != nil:
			return m.GetHistogram().GetSampleSum()
		}
	}
	return -1
}

// seq is the token ids from..from+n-1.
func seq(from, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(from + i)
	}
	return out
}
