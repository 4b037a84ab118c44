package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inference-cache/inference-cache/admission"
	"github.com/inference-cache/inference-cache/connlimit"
	"github.com/inference-cache/inference-cache/gateway"
	"github.com/inference-cache/inference-cache/openai"
)

// The headers every completion response carries.
const (
	// HeaderReplica is the replica id that served the request ("" when
	// the proxy answered itself).
	HeaderReplica = "X-Inference-Cache-Replica"
	// HeaderReason is why that replica: a hint's reason code
	// (PREFIX_MATCH, AFFINITY_HINT, TENANT_HOT), LOAD (picked without a
	// usable hint), ROUND_ROBIN or LEAST_LOADED (those strategies), or
	// NONE when the proxy answered itself.
	HeaderReason = "X-Inference-Cache-Reason"
	// HeaderMatchedTokens is the prompt tokens the hint said the replica
	// holds (0 without a PREFIX_MATCH hint for it).
	HeaderMatchedTokens = "X-Inference-Cache-Matched-Tokens"
	// HeaderRetriedFrom, present only after a retry, is the replica that
	// refused the connection or answered 503 first.
	HeaderRetriedFrom = "X-Inference-Cache-Retried-From"
)

// ReasonNone is HeaderReason of a response the proxy made itself.
const ReasonNone = "NONE"

// DefaultMaxBodyBytes bounds a request body (vLLM has no limit of its
// own; 32 MiB holds a 4-million-token chat).
const DefaultMaxBodyBytes = 32 << 20

// statusClientClosed is the status counted for a request whose client
// went away before its answer (nginx's 499); nothing is written.
const statusClientClosed = 499

// Options configure a Proxy.
type Options struct {
	// Gateway decides where each request goes (required).
	Gateway *gateway.Gateway
	// Pool is the backends (required).
	Pool *Pool
	// Metrics are the proxy's metrics; nil = registered nowhere.
	Metrics *Metrics
	// MetricsHandler serves GET /metrics; nil = no /metrics.
	MetricsHandler http.Handler
	// MaxBodyBytes bounds a request body (a larger one gets a 413 before
	// anything is decoded); 0 = DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// RequestTimeout bounds a request from its arrival to the end of its
	// response, streams included (504 when no answer came by then, the
	// stream cut when it ran past it); 0 = no bound.
	RequestTimeout time.Duration
	// MaxBodyBytesInFlight bounds the bytes of the request bodies held at
	// once, from their first byte until their answer starts (a body is
	// kept for a retry until then): a body that does not fit gets a 429
	// with Retry-After; 0 = DefaultMaxBodyBytesInFlight. Bodies of at
	// least admission.LargeBody are keyed a few at a time
	// (admission.Controller.KeyLarge), and the heap is returned to the
	// system after them.
	MaxBodyBytesInFlight int64
	// BodyTimeout bounds the reading of a request body, first byte to
	// last, and BodyIdleTimeout the wait for its next bytes: past either
	// the request gets a 408 and its connection is closed; 0 =
	// DefaultBodyTimeout, DefaultBodyIdleTimeout.
	BodyTimeout, BodyIdleTimeout time.Duration
	// FirstByteTimeout bounds the wait for a stream's response headers
	// (vLLM sends them before the first token): a backend silent that
	// long is given up, and the request goes once to the next-best
	// backend, as nothing has reached the client; the last one's silence
	// is a 504. A non-streamed answer's headers follow its whole
	// generation, so RequestTimeout alone bounds them. 0 = no bound.
	FirstByteTimeout time.Duration
	// StreamIdleTimeout bounds the wait for the next bytes of an answer
	// once it started: past it the answer ends as broken (an error event
	// for a stream, then the response is aborted). 0 = no bound.
	StreamIdleTimeout time.Duration
	// Transport forwards to the backends; nil = NewTransport(0).
	Transport http.RoundTripper
	// Logger logs upstream failures; nil = slog.Default().
	Logger *slog.Logger
}

// Proxy is an OpenAI-compatible reverse proxy over a Gateway: POST
// /v1/completions and /v1/chat/completions (streamed or not) go to the
// replica the gateway picks; GET /v1/models is the union of the
// backends'; GET /health says whether a backend is healthy; GET /metrics
// is Options.MetricsHandler. Safe for concurrent use.
type Proxy struct {
	gw         *gateway.Gateway
	pool       *Pool
	m          *Metrics
	maxBody    int64
	timeout    time.Duration
	bodyTotal  time.Duration
	bodyIdle   time.Duration
	firstByte  time.Duration
	streamIdle time.Duration
	adm        *admission.Controller
	draining   atomic.Bool
	transport  http.RoundTripper
	log        *slog.Logger
	refused    gateway.RefusedLog
	mux        *http.ServeMux
	decodeGW   *gateway.Gateway // decode picks of disaggregated requests (disagg.go)
}

// New returns a Proxy.
func New(opts Options) (*Proxy, error) {
	if opts.Gateway == nil || opts.Pool == nil {
		return nil, errors.New("proxy: Gateway and Pool are required")
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.MaxBodyBytesInFlight <= 0 {
		opts.MaxBodyBytesInFlight = DefaultMaxBodyBytesInFlight
	}
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = DefaultBodyTimeout
	}
	if opts.BodyIdleTimeout <= 0 {
		opts.BodyIdleTimeout = DefaultBodyIdleTimeout
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(prometheus.NewRegistry(), nil)
	}
	if opts.Transport == nil {
		opts.Transport = NewTransport(0)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	p := &Proxy{gw: opts.Gateway, pool: opts.Pool, m: opts.Metrics, maxBody: opts.MaxBodyBytes, timeout: opts.RequestTimeout,
		bodyTotal: opts.BodyTimeout, bodyIdle: opts.BodyIdleTimeout, firstByte: opts.FirstByteTimeout, streamIdle: opts.StreamIdleTimeout,
		adm: admission.New(opts.MaxBodyBytesInFlight), transport: opts.Transport, log: opts.Logger, mux: http.NewServeMux()}
	var err error
	if p.decodeGW, err = gateway.New(gateway.Config{Strategy: gateway.StrategyLeastLoaded}); err != nil {
		return nil, err
	}
	p.mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { p.completion(w, r, openai.KindCompletion) })
	p.mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { p.completion(w, r, openai.KindChat) })
	p.mux.HandleFunc("GET /v1/models", p.models)
	p.mux.HandleFunc("GET /health", p.health)
	if opts.MetricsHandler != nil {
		p.mux.Handle("GET /metrics", opts.MetricsHandler)
	}
	p.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		openai.WriteError(w, &openai.Error{Status: http.StatusNotFound, Message: fmt.Sprintf("no route %s %s: the proxy serves POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /health and GET /metrics", r.Method, r.URL.Path)})
	})
	return p, nil
}

// DefaultConnectTimeout bounds the connection to a backend: one that
// does not accept within it is treated as refusing, and the request
// moves to the next-best backend.
const DefaultConnectTimeout = 2 * time.Second

// NewTransport is the transport to the backends: keep-alive connections
// (many per backend, as streams hold theirs for a response's whole life),
// no compression added (bytes pass through as the backend sent them),
// HTTP/1.1, a connect timeout (0 = DefaultConnectTimeout) and no bound on
// the wait for response headers (a prefill can take seconds).
func NewTransport(connectTimeout time.Duration) *http.Transport {
	if connectTimeout <= 0 {
		connectTimeout = DefaultConnectTimeout
	}
	return &http.Transport{
		DialContext:         (&net.Dialer{Timeout: connectTimeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        4096,
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		WriteBufferSize:     32 << 10,
		ReadBufferSize:      32 << 10,
	}
}

// ServeHTTP implements http.Handler. A panic in a handler becomes a 500
// error body (when nothing was written yet) instead of a dropped
// connection.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			p.log.Error("handler panic", "path", r.URL.Path, "panic", fmt.Sprint(v))
			openai.WriteError(w, errors.New("internal error"))
		}
	}()
	if p.draining.Load() {
		// Each connection ends after its answer, so that its client opens
		// the next one through its load balancer; idle connections are
		// not closed under the client, which may be sending on one.
		w.Header().Set("Connection", "close")
	}
	p.mux.ServeHTTP(w, r)
}

// bodies recycles request body buffers up to maxPooledBody (a larger
// body gets a buffer of its own, garbage once its answer starts).
var bodies = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledBody is the largest buffer put back in the pool.
const maxPooledBody = 1 << 20

// completion serves one completion or chat request. A request whose
// answer broke after its headers were sent is aborted here, after it is
// counted, so that the client sees a broken transfer.
func (p *Proxy) completion(w http.ResponseWriter, r *http.Request, kind openai.Kind) {
	start := time.Now()
	p.m.InFlight.Inc()
	code, abort, large := p.serveCompletion(w, r, kind, start)
	p.m.InFlight.Dec()
	p.m.Requests.WithLabelValues(kind.String(), statusLabel(code)).Inc()
	if large {
		p.adm.AfterLarge()
	}
	if abort {
		panic(http.ErrAbortHandler)
	}
}

// serveCompletion reads, decides and forwards one request, returning the
// status counted, whether to abort the response, and whether its body
// was large.
func (p *Proxy) serveCompletion(w http.ResponseWriter, r *http.Request, kind openai.Kind, start time.Time) (code int, abort, large bool) {
	if r.ContentLength > p.maxBody {
		return p.refuse(w, &openai.Error{Status: http.StatusRequestEntityTooLarge, Message: fmt.Sprintf("request body of %d bytes is over the limit of %d bytes", r.ContentLength, p.maxBody)}), false, false
	}
	// A body's bytes are held in the bound as they arrive, never as its
	// Content-Length declares them: a few clients declaring large bodies
	// and trickling them would otherwise hold the whole bound, and every
	// other request would be refused, until their body timeouts.
	br := &bodyReader{ctx: r.Context(), r: r.Body, rc: http.NewResponseController(w), idle: p.bodyIdle, deadline: start.Add(p.bodyTotal), adm: p.adm}
	relax := func() {}
	if r.ContentLength >= admission.LargeBody {
		relax = p.adm.Tighten() // a large body's copies are collected promptly until its answer starts
	}
	var release sync.Once
	free := func() { release.Do(func() { p.adm.Release(br.held); relax() }) }
	defer free()

	var buf *bytes.Buffer
	pooled := r.ContentLength >= 0 && r.ContentLength <= maxPooledBody
	if pooled {
		buf = bodies.Get().(*bytes.Buffer)
		buf.Reset()
		defer func() {
			if buf.Cap() <= maxPooledBody {
				bodies.Put(buf)
			}
		}()
	} else {
		// Grown as the bytes arrive (doubling), not allocated as declared:
		// a body declared large starts at the pooled size, one of unknown
		// length at the smallest read.
		size := bytes.MinRead
		if r.ContentLength > maxPooledBody {
			size += maxPooledBody
		}
		buf = bytes.NewBuffer(make([]byte, 0, size))
	}

	_, err := buf.ReadFrom(http.MaxBytesReader(w, io.NopCloser(br), p.maxBody))
	connlimit.Waiting(r.Context(), false)
	if err == nil {
		// The server's own reads after a whole body must not time out; after
		// a timeout the deadline stays, so that the server does not wait for
		// the rest of the body before closing the connection.
		_ = br.rc.SetReadDeadline(time.Time{})
	}
	if err != nil {
		return p.bodyFailed(w, r, err, buf.Len()), false, false
	}
	body := buf.Bytes()
	large = len(body) >= admission.LargeBody
	keyed, err := p.adm.KeyLarge(r.Context(), len(body)) // a large body waits its turn
	if err != nil {
		return statusClientClosed, false, large
	}
	var d *gateway.Decision
	var req *openai.Request
	var cands []string
	func() {
		defer keyed()
		d, req, cands, code = p.decide(w, r, kind, body, !pooled)
	}()
	if code != 0 {
		return code, false, large
	}
	if d == nil { // a disaggregated model: prefill, then decode (disagg.go)
		code, abort = p.serveDisaggregated(w, r, req, body, cands, start, free)
		return code, abort, large
	}
	code, abort = p.forward(w, r, body, req.Stream, d, start, free)
	return code, abort, large
}

// bodyFailed answers a request whose body could not be read (err, after
// read bytes): over the size limit, over the admission budget, past the
// body timeouts, the client gone, or another read error. It returns the
// status.
func (p *Proxy) bodyFailed(w http.ResponseWriter, r *http.Request, err error, read int) int {
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return p.refuse(w, &openai.Error{Status: http.StatusRequestEntityTooLarge, Message: fmt.Sprintf("request body over the limit of %d bytes", tooBig.Limit)})
	case errors.Is(err, errOverBudget):
		// The rest of the body is not read: the connection cannot carry
		// another request.
		w.Header().Set("Connection", "close")
		return p.shed(w, max(r.ContentLength, int64(read)))
	case errors.Is(err, errBodyTimeout):
		p.m.BodyTimeouts.Inc()
		w.Header().Set("Connection", "close")
		return p.refuse(w, &openai.Error{Status: http.StatusRequestTimeout, Message: fmt.Sprintf(
			"the request body did not arrive within the body timeouts (%s in all, %s between bytes)", p.bodyTotal, p.bodyIdle)})
	case r.Context().Err() != nil:
		return statusClientClosed
	}
	return p.refuse(w, openai.Errorf("", "reading the request body: %v", err))
}

// shed refuses a body of n bytes that does not fit in the bytes in
// flight: 429 with Retry-After.
func (p *Proxy) shed(w http.ResponseWriter, n int64) int {
	p.m.Shed.Inc()
	w.Header().Set("Retry-After", strconv.Itoa(admission.RetryAfterSeconds))
	return p.refuse(w, &openai.Error{Status: http.StatusTooManyRequests, Message: p.adm.BusyMessage(n)})
}

// decide decodes body and picks its replica. A non-zero code is the
// status of an answer already written (or of a client gone); a nil
// Decision with code 0 is a model served disaggregated, whose picks
// serveDisaggregated makes from req and its decode candidates cands. An
// owned body (not from the pool) is decoded without a copy.
func (p *Proxy) decide(w http.ResponseWriter, r *http.Request, kind openai.Kind, body []byte, owned bool) (d *gateway.Decision, req *openai.Request, cands []string, code int) {
	decode := openai.Decode
	if owned {
		decode = openai.DecodeOwned
	}
	req, err := decode(kind, body)
	if err != nil {
		return nil, nil, nil, p.refuse(w, err)
	}
	if _, ok := req.Raw["kv_transfer_params"]; ok {
		return nil, nil, nil, p.refuse(w, errClientTransferParams)
	}
	if !p.pool.Serves(req.Model) {
		return nil, nil, nil, p.refuse(w, &openai.Error{Status: http.StatusNotFound, Param: "model", Message: fmt.Sprintf("The model `%s` does not exist.", openai.Clip(req.Model))})
	}
	var arr [16]string
	cands = p.pool.Candidates(req.Model, arr[:0])
	if len(cands) == 0 {
		return nil, nil, nil, p.refuse(w, &openai.Error{Status: http.StatusServiceUnavailable, Message: fmt.Sprintf("no healthy backend serves the model `%s`", openai.Clip(req.Model))})
	}
	if p.pool.Disaggregated(req.Model) {
		return nil, req, cands, 0
	}
	d, err = p.gw.Decide(r.Context(), p.gatewayRequest(req, cands))
	if err != nil {
		if r.Context().Err() != nil {
			return nil, nil, nil, statusClientClosed
		}
		return nil, nil, nil, p.refuse(w, err)
	}
	p.record(d)
	return d, req, cands, 0
}

// refuse answers a request the proxy does not forward, with an
// OpenAI-style error body and the routing headers of no replica.
func (p *Proxy) refuse(w http.ResponseWriter, err error) int {
	h := w.Header()
	h.Set(HeaderReplica, "")
	h.Set(HeaderReason, ReasonNone)
	h.Set(HeaderMatchedTokens, "0")
	return openai.WriteError(w, err)
}

func (p *Proxy) models(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, openai.ModelList{Object: openai.ObjectList, Data: p.pool.Models()})
}

// healthBody is GET /health's answer.
type healthBody struct {
	Status   string          `json:"status"`
	Backends []BackendStatus `json:"backends"`
}

// Drain makes GET /health answer 503 {"status": "draining"} from now on,
// so that a load balancer or Kubernetes' readiness check stops sending
// new requests, while every request, in flight or arriving, is still
// served, each answer closing its connection. The caller stops the
// server after its drain time.
func (p *Proxy) Drain() { p.draining.Store(true) }

// health answers 200 while at least one backend is healthy, else 503;
// 503 at once after Drain.
func (p *Proxy) health(w http.ResponseWriter, _ *http.Request) {
	st := p.pool.Status()
	if p.draining.Load() {
		writeJSON(w, http.StatusServiceUnavailable, healthBody{Status: "draining", Backends: st})
		return
	}
	for _, s := range st {
		if s.Healthy {
			writeJSON(w, http.StatusOK, healthBody{Status: "ok", Backends: st})
			return
		}
	}
	writeJSON(w, http.StatusServiceUnavailable, healthBody{Status: "no healthy backend", Backends: st})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// statusLabels are the metric labels of the common statuses, made once.
var statusLabels = func() map[int]string {
	m := map[int]string{}
	for _, c := range []int{200, 400, 404, 413, 422, 429, 499, 500, 502, 503, 504} {
		m[c] = strconv.Itoa(c)
	}
	return m
}()

func statusLabel(code int) string {
	if s, ok := statusLabels[code]; ok {
		return s
	}
	return strconv.Itoa(code)
}
