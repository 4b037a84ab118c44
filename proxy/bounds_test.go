package proxy

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/openai"
)

// RFC 9110 §7.6.1: the headers a Connection header names are hop-by-hop,
// both ways: neither the client's nor the engine's reach the other side.
func TestProxy_HeadersNamedInConnectionAreNotForwarded(t *testing.T) {
	e := newEngine(t, "qwen3")
	var got http.Header
	e.setHandler(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		w.Header().Set("Connection", "X-Engine-Hop")
		w.Header().Set("X-Engine-Hop", "secret")
		w.Header().Set("X-Engine-End", "kept")
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	})
	tp := newTestProxy(t, nil, Options{}, e)
	req, _ := http.NewRequest(http.MethodPost, tp.srv.URL+"/v1/chat/completions", strings.NewReader(tp.chat("hi", false)))
	req.Header.Set("Connection", "x-client-hop, keep-alive")
	req.Header.Set("X-Client-Hop", "secret")
	req.Header.Set("X-Client-End", "kept")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got.Get("X-Client-Hop") != "" || got.Get("X-Client-End") != "kept" {
		t.Errorf("engine saw X-Client-Hop %q, X-Client-End %q: want the first dropped, the second kept", got.Get("X-Client-Hop"), got.Get("X-Client-End"))
	}
	if resp.Header.Get("X-Engine-Hop") != "" || resp.Header.Get("X-Engine-End") != "kept" {
		t.Errorf("client saw X-Engine-Hop %q, X-Engine-End %q: want the first dropped, the second kept", resp.Header.Get("X-Engine-Hop"), resp.Header.Get("X-Engine-End"))
	}
}

// A body that does not fit in the bytes in flight gets a 429 with
// Retry-After, in OpenAI's shape, and reaches no engine.
func TestProxy_BodyOverTheBytesInFlightGets429(t *testing.T) {
	e := newEngine(t, "qwen3")
	// The stalled body must hold the bound for the whole test: no idle
	// time-out ends it early on a loaded machine.
	tp := newTestProxy(t, nil, Options{MaxBodyBytes: 1 << 10, MaxBodyBytesInFlight: 1 << 10, BodyIdleTimeout: time.Minute, BodyTimeout: 2 * time.Minute}, e)
	// Hold all but 24 bytes of the bound with 1,000 bytes of a body that
	// never ends: bytes are held as they arrive.
	c, err := net.Dial("tcp", strings.TrimPrefix(tp.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1024\r\n\r\n{\"x\": \""+strings.Repeat("a", 993))
	// Wait until the proxy holds the stalled body's bytes: a request sent
	// before would take them first and the stalled body get the 429.
	poll.Eventually(t, 30*time.Second, 5*time.Millisecond, func() (bool, string) {
		if tp.adm.Hold(25) {
			tp.adm.Release(25)
			return false, "the stalled body's bytes are not held"
		}
		return true, ""
	})
	resp, body := tp.post(t, "/v1/chat/completions", tp.chat("hi", false))
	var er openai.ErrorResponse
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" || json.Unmarshal(body, &er) != nil || er.Error.Code != 429 {
		t.Fatalf("%d %v %s: want a 429 with Retry-After in OpenAI's shape", resp.StatusCode, resp.Header, body)
	}
	if e.posts.Load() != 0 {
		t.Errorf("the engine got %d requests", e.posts.Load())
	}
}

// Bodies that declare the whole bound in their Content-Length and
// trickle a byte hold only the bytes that arrived: another request is
// served, not refused until their body timeouts end.
func TestProxy_DeclaredButUnsentBodiesHoldNothing(t *testing.T) {
	e := newEngine(t, "qwen3")
	tp := newTestProxy(t, nil, Options{MaxBodyBytes: 1 << 20, MaxBodyBytesInFlight: 1 << 20, BodyIdleTimeout: time.Minute, BodyTimeout: 2 * time.Minute}, e)
	for i := 0; i < 4; i++ {
		c, err := net.Dial("tcp", strings.TrimPrefix(tp.srv.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 262144\r\n\r\n{")
	}
	// Wait until the four bodies' first bytes are held.
	poll.Eventually(t, 30*time.Second, 5*time.Millisecond, func() (bool, string) {
		if tp.adm.Hold(1<<20 - 3) {
			tp.adm.Release(1<<20 - 3)
			return false, "the four bodies' first bytes are not held"
		}
		return true, ""
	})
	resp, body := tp.post(t, "/v1/chat/completions", tp.chat("hi", false))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s: want the request served beside four bodies that declare the whole bound and sent a byte each", resp.StatusCode, body)
	}
}

// A body whose bytes stop for the idle timeout gets a 408 and its
// connection is closed.
func TestProxy_StalledBodyGets408AndClose(t *testing.T) {
	e := newEngine(t, "qwen3")
	tp := newTestProxy(t, nil, Options{BodyIdleTimeout: 100 * time.Millisecond, BodyTimeout: time.Minute}, e)
	c, err := net.Dial("tcp", strings.TrimPrefix(tp.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, _ := io.ReadAll(c) // ends when the proxy closes the connection
	if !strings.HasPrefix(string(got), "HTTP/1.1 408") || !strings.Contains(string(got), "RequestTimeoutError") {
		t.Fatalf("answer %q: want a 408 in OpenAI's shape, then the connection closed", got)
	}
}

// A stream whose engine sends no headers within the first-byte timeout
// goes once to the next-best engine, which answers.
func TestProxy_SilentEngineStreamRetriedElsewhere(t *testing.T) {
	a, b := newEngine(t, "qwen3"), newEngine(t, "qwen3")
	release := make(chan struct{})
	defer close(release)
	a.setHandler(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	b.setHandler(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {}\n\ndata: [DONE]\n\n")
	})
	tp := newTestProxy(t, prefixMatch("a", 160), Options{FirstByteTimeout: 200 * time.Millisecond}, a, b)
	resp, got := tp.post(t, "/v1/chat/completions", tp.chat("hi", true))
	if resp.StatusCode != 200 || resp.Header.Get(HeaderReplica) != "b" || resp.Header.Get(HeaderRetriedFrom) != "a" || !strings.HasSuffix(string(got), "data: [DONE]\n\n") {
		t.Fatalf("%d %v %q: want b's stream after a's silence", resp.StatusCode, resp.Header, got)
	}
}

// A stream cut by its engine ends with vLLM's error event and [DONE], and
// the response is aborted: the client's read fails.
func TestProxy_CutStreamEndsWithAnErrorEventAndAnAbort(t *testing.T) {
	e := newEngine(t, "qwen3")
	e.setHandler(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"choices\": []}\n\n")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the engine dies mid-stream
	})
	tp := newTestProxy(t, nil, Options{}, e)
	resp, err := http.Post(tp.srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(tp.chat("hi", true)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err == nil {
		t.Errorf("the client read the cut stream to a clean end: %q", got)
	}
	want := `data: {"error":{"message":"the response from backend a was cut`
	if !strings.Contains(string(got), want) || !strings.Contains(string(got), `"type":"BadGatewayError","param":null,"code":502}}`+"\n\ndata: [DONE]\n\n") {
		t.Errorf("stream %q: want the error event then [DONE]", got)
	}
}
