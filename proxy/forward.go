package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/inference-cache/inference-cache/gateway"
	"github.com/inference-cache/inference-cache/openai"
)

// Upstream error kinds (upstream_errors_total).
const (
	kindRefused     = "refused"
	kindUnavailable = "unavailable"
	kindTimeout     = "timeout"
	kindFirstByte   = "first_byte"
	kindIdle        = "idle"
	kindBroken      = "broken"
	kindOther       = "other"
)

// copies recycles the buffers responses are copied through.
var copies = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// Causes of an attempt's end that the proxy itself decided
// (context.Cause of the attempt's context).
var (
	errFirstByte  = errors.New("no response headers within the first-byte timeout")
	errStreamIdle = errors.New("no response bytes within the stream idle timeout")
)

// forward sends the request to d's replica, and once to the next-best
// when that one refuses the connection, answers 503, or sends no
// response headers within the first-byte timeout (nothing has reached the
// client in all three cases), and relays the answer. It returns the
// status counted and whether the response must be aborted (a broken
// answer whose headers were already sent).
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, body []byte, stream bool, d *gateway.Decision, start time.Time, sent func()) (int, bool) {
	ctx := r.Context()
	if p.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.timeout)
		defer cancel()
	}
	replica, retriedFrom := d.Replica, ""
	for attempt := 0; ; attempt++ {
		b := p.pool.backend(replica)
		f := d.Start(replica)
		if attempt == 0 {
			p.m.AddedLatency.Observe(time.Since(start).Seconds())
		}
		actx, cancel := context.WithCancelCause(ctx)
		var resp *http.Response
		var err error = errBackendRemoved
		if b != nil {
			resp, err = p.send(actx, cancel, r, b, body, stream)
		}
		retry := attempt == 0 && len(d.Fallbacks) > 0
		if err != nil {
			f.Fail()
			cause := context.Cause(actx)
			cancel(nil)
			if r.Context().Err() != nil {
				return statusClientClosed, false
			}
			kind := classify(ctx, cause, err)
			p.m.UpstreamErrors.WithLabelValues(replica, kind).Inc()
			if kind == kindRefused {
				p.pool.MarkDown(replica, err)
			}
			if retry && (kind == kindRefused || kind == kindFirstByte) {
				p.m.Retries.WithLabelValues(kind).Inc()
				retriedFrom, replica = replica, d.Fallbacks[0]
				continue
			}
			p.log.Warn("forward failed", "replica", replica, "kind", kind, "err", err)
			switch kind {
			case kindTimeout:
				return p.refuse(w, &openai.Error{Status: http.StatusGatewayTimeout, Message: fmt.Sprintf("backend %s did not answer within the request timeout of %s", replica, p.timeout)}), false
			case kindFirstByte:
				return p.refuse(w, &openai.Error{Status: http.StatusGatewayTimeout, Message: fmt.Sprintf("backend %s sent no response within the first-byte timeout of %s", replica, p.firstByte)}), false
			}
			return p.refuse(w, &openai.Error{Status: http.StatusBadGateway, Message: fmt.Sprintf("backend %s: %v", replica, err)}), false
		}
		if resp.StatusCode == http.StatusServiceUnavailable && retry {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			cancel(nil)
			f.Fail()
			p.m.UpstreamErrors.WithLabelValues(replica, kindUnavailable).Inc()
			p.m.Retries.WithLabelValues(kindUnavailable).Inc()
			retriedFrom, replica = replica, d.Fallbacks[0]
			continue
		}
		sent()
		code, abort := p.relay(actx, cancel, w, r, resp, f, d, replica, retriedFrom, start)
		cancel(nil)
		return code, abort
	}
}

// errBackendRemoved is the forward error of a replica a reload removed
// between the decision and the send: treated as a refused connection.
var errBackendRemoved = &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("backend removed from the configuration")}

// send forwards the request to b, with the client's headers (not the
// hop-by-hop ones) and X-Forwarded-For. For a stream, the response
// headers must come within the first-byte timeout, else ctx is canceled
// with errFirstByte (a non-streamed answer's headers follow its whole
// generation, so only the request timeout bounds them).
func (p *Proxy) send(ctx context.Context, cancel context.CancelCauseFunc, r *http.Request, b *backend, body []byte, stream bool) (*http.Response, error) {
	target := b.base.String() + r.URL.Path
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	out, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	copyHeaders(out.Header, r.Header)
	out.Header.Del("Content-Length") // the transport sets it
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		if prior := r.Header.Get("X-Forwarded-For"); prior != "" {
			host = prior + ", " + host
		}
		out.Header.Set("X-Forwarded-For", host)
	}
	if stream && p.firstByte > 0 {
		t := time.AfterFunc(p.firstByte, func() { cancel(errFirstByte) })
		defer t.Stop()
	}
	return p.transport.RoundTrip(out)
}

// classify names a forward error's kind. A dial failure (refused, no
// route, the connect timeout) is kindRefused and no headers within the
// first-byte timeout kindFirstByte: nothing reached the client, so the
// request may go elsewhere.
func classify(ctx context.Context, cause, err error) string {
	var op *net.OpError
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return kindTimeout
	case errors.Is(cause, errFirstByte):
		return kindFirstByte
	case errors.As(err, &op) && op.Op == "dial":
		return kindRefused
	}
	return kindOther
}

// relay writes the backend's answer to the client: its status and
// headers plus the routing headers, then its body as it arrives, each
// piece of a stream flushed at once. The first generated token of a
// stream is spotted on the way (openai.FirstTokenSpotter); a non-streamed
// answer's first token is its arrival. No byte within the stream idle
// timeout cancels ctx (errStreamIdle). An answer cut by the backend or
// by a timeout ends as vLLM ends a failed stream (streamError), and
// relay then asks for the response to be aborted, so that the client's
// HTTP library also reports it.
func (p *Proxy) relay(ctx context.Context, cancel context.CancelCauseFunc, w http.ResponseWriter, r *http.Request, resp *http.Response, f *gateway.Flight, d *gateway.Decision,
	replica, retriedFrom string, start time.Time) (int, bool) {
	defer resp.Body.Close()
	// A request refused by the backend, or cut before its first token,
	// prefilled nothing there: its provisional residency is dropped
	// (contract §5.12). Once a token came, the prefix is cached.
	ok, first := resp.StatusCode == http.StatusOK, false
	defer func() {
		if ok && first {
			f.Done()
		} else {
			f.Fail()
		}
	}()
	writeRelayHeaders(w, resp, d, replica, retriedFrom)
	stream := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	if !stream {
		first = true
		p.firstToken(f, ok, start)
	}
	rc := http.NewResponseController(w)
	if stream {
		_ = rc.Flush() // the client learns the request was accepted before the first token
	}
	var idle *time.Timer
	if p.streamIdle > 0 {
		idle = time.AfterFunc(p.streamIdle, func() { cancel(errStreamIdle) })
		defer idle.Stop()
	}
	bp := copies.Get().(*[]byte)
	defer copies.Put(bp)
	buf := *bp
	var spot openai.FirstTokenSpotter
	for {
		n, err := resp.Body.Read(buf)
		if idle != nil {
			idle.Reset(p.streamIdle)
		}
		if n > 0 {
			if stream && spot.Feed(buf[:n]) {
				first = true
				p.firstToken(f, ok, start)
			}
			if _, werr := w.Write(buf[:n]); werr != nil {
				return resp.StatusCode, false // the client went away; ctx's end stops the backend
			}
			if stream {
				if ferr := rc.Flush(); ferr != nil {
					return resp.StatusCode, false
				}
			}
		}
		if err == io.EOF {
			return resp.StatusCode, false
		}
		if err != nil {
			if r.Context().Err() != nil {
				return resp.StatusCode, false
			}
			p.reportCut(ctx, w, rc, replica, err, stream)
			return resp.StatusCode, true
		}
	}
}

// writeRelayHeaders writes the backend's status and headers to w, with
// the proxy's own: the replica that answers, why it was picked, its
// matched tokens, and the replica a retry came from.
func writeRelayHeaders(w http.ResponseWriter, resp *http.Response, d *gateway.Decision, replica, retriedFrom string) {
	h := w.Header()
	copyHeaders(h, resp.Header)
	reason, matched := d.ReasonFor(replica)
	h.Set(HeaderReplica, replica)
	h.Set(HeaderReason, reason)
	h.Set(HeaderMatchedTokens, strconv.Itoa(matched))
	if retriedFrom != "" {
		h.Set(HeaderRetriedFrom, retriedFrom)
	}
	w.WriteHeader(resp.StatusCode)
}

// firstToken marks the flight's first token and, for a 200 response,
// observes the time to it since start.
func (p *Proxy) firstToken(f *gateway.Flight, ok bool, start time.Time) {
	f.FirstToken()
	if ok {
		p.m.TTFT.Observe(time.Since(start).Seconds())
	}
}

// reportCut counts and logs a response from replica cut by err (the
// request timeout, the stream idle timeout, or a broken connection, told
// apart by ctx's cause) and, on a stream, ends it with an error event.
func (p *Proxy) reportCut(ctx context.Context, w http.ResponseWriter, rc *http.ResponseController, replica string, err error, stream bool) {
	kind, status, what := kindBroken, http.StatusBadGateway, fmt.Sprintf("the response from backend %s was cut: %v", replica, err)
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, context.DeadlineExceeded):
		kind, status, what = kindTimeout, http.StatusGatewayTimeout, fmt.Sprintf("the response from backend %s ran past the request timeout of %s", replica, p.timeout)
	case errors.Is(cause, errStreamIdle):
		kind, status, what = kindIdle, http.StatusGatewayTimeout, fmt.Sprintf("backend %s sent nothing for the stream idle timeout of %s", replica, p.streamIdle)
	}
	p.m.UpstreamErrors.WithLabelValues(replica, kind).Inc()
	p.m.Broken.WithLabelValues(kind).Inc()
	p.log.Warn("response from backend cut", "replica", replica, "kind", kind, "err", err)
	if stream {
		writeStreamError(w, &openai.Error{Status: status, Message: what})
		_ = rc.Flush()
	}
}
