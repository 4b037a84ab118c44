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
	kindBroken      = "broken"
	kindOther       = "other"
)

// hopHeaders are the hop-by-hop headers a proxy does not forward
// (RFC 9110 7.6.1), and Content-Length, which the transport sets.
var hopHeaders = map[string]bool{
	"Connection": true, "Proxy-Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
}

// copies recycles the buffers responses are copied through.
var copies = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// forward sends the request to d's replica, and once to the next-best
// when that one refuses the connection or answers 503, and relays the
// answer. It returns the status counted.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, body []byte, d *gateway.Decision, start time.Time) int {
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
		var resp *http.Response
		var err error = errBackendRemoved
		if b != nil {
			resp, err = p.send(ctx, r, b, body)
		}
		retry := attempt == 0 && len(d.Fallbacks) > 0
		if err != nil {
			f.Fail()
			if r.Context().Err() != nil {
				return statusClientClosed
			}
			kind := classify(ctx, err)
			p.m.UpstreamErrors.WithLabelValues(replica, kind).Inc()
			if kind == kindRefused {
				p.pool.MarkDown(replica, err)
				if retry {
					p.m.Retries.WithLabelValues(kindRefused).Inc()
					retriedFrom, replica = replica, d.Fallbacks[0]
					continue
				}
			}
			p.log.Warn("forward failed", "replica", replica, "kind", kind, "err", err)
			if kind == kindTimeout {
				return p.refuse(w, &openai.Error{Status: http.StatusGatewayTimeout, Message: fmt.Sprintf("backend %s did not answer within the request timeout of %s", replica, p.timeout)})
			}
			return p.refuse(w, &openai.Error{Status: http.StatusBadGateway, Message: fmt.Sprintf("backend %s: %v", replica, err)})
		}
		if resp.StatusCode == http.StatusServiceUnavailable && retry {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			f.Fail()
			p.m.UpstreamErrors.WithLabelValues(replica, kindUnavailable).Inc()
			p.m.Retries.WithLabelValues(kindUnavailable).Inc()
			retriedFrom, replica = replica, d.Fallbacks[0]
			continue
		}
		return p.relay(ctx, w, r, resp, f, d, replica, retriedFrom, start)
	}
}

// errBackendRemoved is the forward error of a replica a reload removed
// between the decision and the send: treated as a refused connection.
var errBackendRemoved = &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("backend removed from the configuration")}

// send forwards the request to b, with the client's headers (not the
// hop-by-hop ones) and X-Forwarded-For.
func (p *Proxy) send(ctx context.Context, r *http.Request, b *backend, body []byte) (*http.Response, error) {
	target := b.base.String() + r.URL.Path
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	out, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, vs := range r.Header {
		if !hopHeaders[k] && k != "Content-Length" {
			out.Header[k] = vs
		}
	}
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		if prior := r.Header.Get("X-Forwarded-For"); prior != "" {
			host = prior + ", " + host
		}
		out.Header.Set("X-Forwarded-For", host)
	}
	return p.transport.RoundTrip(out)
}

// classify names a forward error's kind. A dial failure (refused, no
// route, the connect timeout) is kindRefused: nothing reached the
// backend, so the request may go elsewhere.
func classify(ctx context.Context, err error) string {
	var op *net.OpError
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return kindTimeout
	case errors.As(err, &op) && op.Op == "dial":
		return kindRefused
	}
	return kindOther
}

// relay writes the backend's answer to the client: its status and
// headers plus the routing headers, then its body as it arrives, each
// piece of a stream flushed at once. The first generated token of a
// stream is spotted on the way (openai.FirstTokenSpotter); a non-streamed answer's
// first token is its arrival.
func (p *Proxy) relay(ctx context.Context, w http.ResponseWriter, r *http.Request, resp *http.Response, f *gateway.Flight, d *gateway.Decision,
	replica, retriedFrom string, start time.Time) int {
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
	h := w.Header()
	for k, vs := range resp.Header {
		if !hopHeaders[k] {
			h[k] = vs
		}
	}
	reason, matched := d.ReasonFor(replica)
	h.Set(HeaderReplica, replica)
	h.Set(HeaderReason, reason)
	h.Set(HeaderMatchedTokens, strconv.Itoa(matched))
	if retriedFrom != "" {
		h.Set(HeaderRetriedFrom, retriedFrom)
	}
	w.WriteHeader(resp.StatusCode)

	stream := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	if !stream {
		first = true
		f.FirstToken()
		if ok {
			p.m.TTFT.Observe(time.Since(start).Seconds())
		}
	}
	rc := http.NewResponseController(w)
	if stream {
		_ = rc.Flush() // the client learns the request was accepted before the first token
	}
	bp := copies.Get().(*[]byte)
	defer copies.Put(bp)
	buf := *bp
	var spot openai.FirstTokenSpotter
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if stream && spot.Feed(buf[:n]) {
				first = true
				f.FirstToken()
				if ok {
					p.m.TTFT.Observe(time.Since(start).Seconds())
				}
			}
			if _, werr := w.Write(buf[:n]); werr != nil {
				return resp.StatusCode // the client went away; ctx's end stops the backend
			}
			if stream {
				if ferr := rc.Flush(); ferr != nil {
					return resp.StatusCode
				}
			}
		}
		if err == io.EOF {
			return resp.StatusCode
		}
		if err != nil {
			if r.Context().Err() == nil {
				kind := kindBroken
				if errors.Is(ctx.Err(), context.DeadlineExceeded) {
					kind = kindTimeout
				}
				p.m.UpstreamErrors.WithLabelValues(replica, kind).Inc()
				p.log.Warn("response from backend cut", "replica", replica, "kind", kind, "err", err)
			}
			return resp.StatusCode
		}
	}
}
