package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"github.com/inference-cache/inference-cache/openai"
)

// Response headers of `inference-cache proxy`: which backend served the
// request, why it was picked, how many prompt tokens the hint said it
// holds, and, after a retry, the backend that refused it first.
const (
	HeaderReplica       = "x-inference-cache-replica"
	HeaderReason        = "x-inference-cache-reason"
	HeaderMatchedTokens = "x-inference-cache-matched-tokens"
	HeaderRetriedFrom   = "x-inference-cache-retried-from"
)

// Error kinds of Result.ErrKind.
const (
	ErrConnect  = "connect"   // the connection was refused or could not be made
	ErrStatus   = "status"    // an HTTP status other than 200
	ErrStream   = "stream"    // the stream broke or ended before data: [DONE]
	ErrTimeout  = "timeout"   // Config.Timeout passed
	ErrCanceled = "canceled"  // the run was stopped (ctx) while it was in flight
	ErrBadReply = "bad-reply" // a chunk that is not JSON, or an error event
	ErrOther    = "transport" // any other transport error
)

// chatBody is the request sent for one trace record: one user message,
// streamed, with the usage chunk vLLM sends when asked.
type chatBody struct {
	Model         string        `json:"model"`
	Messages      []chatMessage `json:"messages"`
	MaxTokens     int           `json:"max_tokens"`
	Stream        bool          `json:"stream"`
	StreamOptions streamOptions `json:"stream_options"`
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// chunk is what the client reads of one streamed event: the text of each
// choice (chat delta content or completion text), the usage of the last
// chunk, and an error object if the server streamed one.
type chunk struct {
	Choices []struct {
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
		Text string `json:"text"`
	} `json:"choices"`
	Usage *openai.Usage     `json:"usage"`
	Error *openai.ErrorInfo `json:"error"`
}

// send makes one streamed chat request and measures it into res. start
// is when the request was handed to the transport; TTFT is the first
// event that carries content text.
func (r *runner) send(ctx context.Context, url string, body []byte, res *Result) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		res.fail(ErrOther, err.Error())
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	start := time.Now()
	res.StartMs = ms(start.Sub(r.t0))
	defer func() { res.E2EMs = ms(time.Since(start)) }()
	resp, err := r.cfg.Client.Do(req)
	if err != nil {
		res.fail(classify(ctx, err), err.Error())
		return
	}
	defer resp.Body.Close()
	res.Status = resp.StatusCode
	res.Replica = resp.Header.Get(HeaderReplica)
	res.Reason = resp.Header.Get(HeaderReason)
	res.RetriedFrom = resp.Header.Get(HeaderRetriedFrom)
	if v := resp.Header.Get(HeaderMatchedTokens); v != "" {
		res.MatchedTokens, _ = strconv.Atoi(v)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		var e openai.ErrorResponse
		msg := string(b)
		if json.Unmarshal(b, &e) == nil && e.Error.Message != "" {
			msg = e.Error.Message
		}
		res.fail(ErrStatus, fmt.Sprintf("HTTP %d: %s", resp.StatusCode, msg))
		return
	}
	sr := openai.NewSSEReader(resp.Body)
	for {
		data, err := sr.Next()
		if err != nil {
			kind := ErrStream
			if ctx.Err() != nil {
				kind = classify(ctx, ctx.Err())
			}
			if errors.Is(err, io.EOF) {
				err = errors.New("stream ended before data: [DONE]")
			}
			res.fail(kind, err.Error())
			return
		}
		if string(data) == openai.Done {
			return
		}
		var c chunk
		if err := json.Unmarshal(data, &c); err != nil {
			res.fail(ErrBadReply, fmt.Sprintf("stream event is not JSON: %v", err))
			return
		}
		if c.Error != nil {
			res.fail(ErrBadReply, "error event: "+c.Error.Message)
			return
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != "" || ch.Text != "" {
				if res.TTFTMs == 0 {
					res.TTFTMs = ms(time.Since(start))
				}
				res.OutputChunks++
			}
		}
		if c.Usage != nil {
			res.PromptTokens = c.Usage.PromptTokens
			res.CachedTokens = c.Usage.CachedTokens()
			res.OutputTokens = c.Usage.CompletionTokens
		}
	}
}

// classify names a transport error: a refused or failed dial, the
// request's own timeout, the run being stopped, or another error.
func classify(ctx context.Context, err error) string {
	var op *net.OpError
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
		return ErrTimeout
	case errors.Is(err, context.Canceled) || ctx.Err() != nil:
		return ErrCanceled
	case errors.Is(err, syscall.ECONNREFUSED), errors.As(err, &op) && op.Op == "dial":
		return ErrConnect
	}
	return ErrOther
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
