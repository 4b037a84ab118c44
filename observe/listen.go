package observe

import (
	"context"
	"errors"
	"log/slog"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
)

// Listen mode: engines whose PUB socket connects to one endpoint the
// subscriber binds (llm-d's topology), instead of the subscriber dialling
// each engine. vLLM's ZmqEventPublisher binds when its endpoint contains
// "*" or "::" (or is ipc/inproc) and connects otherwise, and offsets the
// port by the data-parallel rank either way; so rank r of every engine
// arrives on the listen port + r, and the engine is told apart by its ZMQ
// topic. Each (engine, rank) keeps its own stream — sequencer, translator,
// replay through its own replay_endpoint — exactly as in dial mode; only
// where the live frames come from differs.

// DefaultTopicPattern is the topic_pattern used when listen is set and
// topic_pattern is not: llm-d's topic form kv@<pod>@<model>. llm-d's
// subscriber splits the topic on "@" and takes exactly three parts as
// ("kv", pod, model); see llm-d/llm-d-kv-cache
// pkg/kvevents/engineadapter/vllm_adapter.go, parseVLLMTopic (commit
// 0d2ae5460e64), and pkg/kvevents/zmq_subscriber.go (binds for a local
// endpoint, connects for a remote one). A pod such as "10.0.0.7:8000" and a
// model such as "Qwen/Qwen3-8B" both match.
const DefaultTopicPattern = `kv@(?P<pod>[^@]+)@(?P<model>[^@]+)`

// Bounds of listen mode.
const (
	// maxTopicBytes bounds an engine entry's topic and pod.
	maxTopicBytes = 1024
	// maxUnknownTopics bounds the unknown topics remembered (each logged
	// once); past it further unknown topics are counted, not logged, so a
	// misbehaving publisher cannot grow the set without bound.
	maxUnknownTopics = 1024
	// maxLoggedTopicBytes truncates a topic in log lines.
	maxLoggedTopicBytes = 256
)

// validateListen checks the listen-mode settings (listen, topic_pattern,
// and the topic/pod of engines without endpoint) after the per-engine
// checks of Validate, and compiles the pattern.
func (c *Config) validateListen(bad func(field, format string, a ...any) error) error {
	f := func(i int, name string) string { return "engines[" + strconv.Itoa(i) + "]." + name }
	c.topicRE = nil
	if c.Listen == "" {
		if c.TopicPattern != "" {
			return bad("topic_pattern", "only used with listen (engines that connect to the subscriber); set listen: tcp://HOST:PORT or remove it")
		}
		for i := range c.Engines {
			if c.Engines[i].Pod != "" {
				return bad(f(i, "pod"), "only for an engine served by listen (without endpoint); set listen: tcp://HOST:PORT or remove it")
			}
		}
		return nil
	}
	if err := checkTCPEndpoint(c.Listen); err != nil {
		return bad("listen", "%v", err)
	}
	if c.TopicPattern == "" {
		c.TopicPattern = DefaultTopicPattern
	}
	re, err := regexp.Compile(`^(?:` + c.TopicPattern + `)$`)
	if err != nil {
		return bad("topic_pattern", "%q is not an RE2 regular expression: %v", c.TopicPattern, err)
	}
	if re.SubexpIndex("pod") < 0 {
		return bad("topic_pattern", "%q has no named group (?P<pod>...) naming the pod", c.TopicPattern)
	}
	c.topicRE = re
	topics, pods := map[string]int{}, map[string]int{}
	for i := range c.Engines {
		e := &c.Engines[i]
		if e.Endpoint != "" {
			if e.Pod != "" {
				return bad(f(i, "pod"), "only for an engine served by listen (without endpoint); an engine with an endpoint is dialled, and its topic is a subscription prefix")
			}
			continue
		}
		switch {
		case e.Topic == "" && e.Pod == "":
			return bad(f(i, "topic"), "required for an engine served by listen (without endpoint): the exact topic it publishes on, or set pod to match topic_pattern's pod group (the engine's own topic must not be empty: every engine on the listen socket needs its own)")
		case e.Topic != "" && e.Pod != "":
			return bad(f(i, "pod"), "set topic or pod, not both")
		}
		for name, v := range map[string]string{"topic": e.Topic, "pod": e.Pod} {
			if len(v) > maxTopicBytes {
				return bad(f(i, name), "%d bytes, over the limit of %d", len(v), maxTopicBytes)
			}
		}
		if e.Topic != "" {
			if j, dup := topics[e.Topic]; dup {
				return bad(f(i, "topic"), "%q is also engines[%d]: a topic on the listen socket names one engine", e.Topic, j)
			}
			topics[e.Topic] = i
		}
		if e.Pod != "" {
			if j, dup := pods[e.Pod]; dup {
				return bad(f(i, "pod"), "%q is also engines[%d]: a pod on the listen socket names one engine", e.Pod, j)
			}
			pods[e.Pod] = i
		}
		if e.DataParallelSize > 1 {
			if _, err := offsetEndpoint(c.Listen, e.DataParallelSize-1); err != nil {
				return bad(f(i, "data_parallel_size"), "rank r connects to listen's port + r: %v", err)
			}
		}
	}
	// A topic that is one entry's and whose pod is another's would name
	// two engines.
	for i := range c.Engines {
		e := &c.Engines[i]
		if e.Endpoint != "" || e.Topic == "" {
			continue
		}
		if p, ok := podOf(re, e.Topic); ok {
			if j, dup := pods[p]; dup {
				return bad(f(max(i, j), "topic"), "engines[%d].topic %q has pod %q, which is engines[%d].pod: set one of them", i, e.Topic, p, j)
			}
		}
	}
	return nil
}

// podOf returns the pod group of topic under re (ok false: no match).
func podOf(re *regexp.Regexp, topic string) (string, bool) {
	m := re.FindStringSubmatch(topic)
	if m == nil {
		return "", false
	}
	return m[re.SubexpIndex("pod")], true
}

// servedByListen reports whether the engine connects to the listen socket
// (it has no endpoint of its own to dial).
func (e *EngineConfig) servedByListen() bool { return e.Endpoint == "" }

// listenRanks is the number of listen sockets cfg needs: the largest
// data_parallel_size of the engines served by listen (0: none).
func listenRanks(cfg *Config) int {
	n := 0
	for i := range cfg.Engines {
		if cfg.Engines[i].servedByListen() {
			n = max(n, cfg.Engines[i].DataParallelSize)
		}
	}
	return n
}

// route is where the listener hands one (engine, rank) its live messages.
type route struct {
	ch   chan<- liveMsg
	done <-chan struct{} // the engine stopped: drop instead of blocking
	m    *engineMetrics
	log  *slog.Logger
	// drops is the stream's rate limit of message-level drop lines.
	drops *dropLog
}

// routeKey names a route: rank r's socket and an exact topic or a pod.
type routeKey struct {
	rank int
	name string
}

// listener owns the bound SUB sockets of listen mode, one per
// data-parallel rank (rank r on the listen port + r), subscribed to every
// topic so unknown publishers can be counted, and hands each message to
// the stream its topic names. A slow stream holds up its socket (the
// forwarder behind every stream is shared, so backpressure is global
// anyway); the engines' PUB sockets then drop at their high-water mark,
// which shows up as gaps.
type listener struct {
	addr    string
	pattern string
	re      *regexp.Regexp
	m       *Metrics
	log     *slog.Logger
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	mu     sync.RWMutex
	ranks  int                 // sockets started: ranks 0..ranks-1
	topics map[routeKey]*route // by exact topic
	pods   map[routeKey]*route // by topic_pattern's pod group

	unknownMu   sync.Mutex
	unknown     map[string]struct{} // unknown topics already logged
	unknownFull bool                // the "too many unknown topics" line was logged
}

// startListener starts the sockets of cfg's listen (validated, non-empty)
// for ranks 0..ranks-1; ensureRanks adds more later.
func startListener(ctx context.Context, cfg *Config, ranks int, m *Metrics, log *slog.Logger) *listener {
	lctx, cancel := context.WithCancel(ctx)
	l := &listener{addr: cfg.Listen, pattern: cfg.TopicPattern, re: cfg.topicRE, m: m,
		log: log.With("listen", cfg.Listen), ctx: lctx, cancel: cancel,
		topics: map[routeKey]*route{}, pods: map[routeKey]*route{}, unknown: map[string]struct{}{}}
	l.ensureRanks(max(ranks, 1))
	return l
}

// serves reports whether l is the listener cfg asks for (same address and
// pattern); otherwise the caller replaces it.
func (l *listener) serves(cfg *Config) bool {
	return l.addr == cfg.Listen && l.pattern == cfg.TopicPattern
}

// ensureRanks starts the sockets of ranks up to n-1 not yet started.
// Sockets are never closed before the listener is: a bound port that no
// engine uses only counts unknown messages, if any arrive.
func (l *listener) ensureRanks(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for ; l.ranks < n; l.ranks++ {
		addr, err := offsetEndpoint(l.addr, l.ranks)
		if err != nil { // validated; cannot happen
			l.log.Error("listen socket of a rank not started", "rank", l.ranks, "err", err)
			return
		}
		rank := l.ranks
		l.wg.Add(1)
		go func() { defer l.wg.Done(); l.serve(rank, addr) }()
	}
}

// add routes the messages of engine ec's rank to r.
func (l *listener) add(ec *EngineConfig, rank int, r *route) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ec.Topic != "" {
		l.topics[routeKey{rank, ec.Topic}] = r
	} else {
		l.pods[routeKey{rank, ec.Pod}] = r
	}
}

// remove undoes add; the engine's messages are unknown from then on.
func (l *listener) remove(ec *EngineConfig, rank int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.topics, routeKey{rank, ec.Topic})
	delete(l.pods, routeKey{rank, ec.Pod})
}

// close stops every socket and waits for them.
func (l *listener) close() {
	l.cancel()
	l.wg.Wait()
}

// lookup resolves a topic received on rank's socket: an exact topic first,
// then topic_pattern's pod group (validation forbids a topic matching
// both).
func (l *listener) lookup(rank int, topic string) *route {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if r := l.topics[routeKey{rank, topic}]; r != nil {
		return r
	}
	if len(l.pods) == 0 {
		return nil
	}
	if p, ok := podOf(l.re, topic); ok {
		return l.pods[routeKey{rank, p}]
	}
	return nil
}

// serve owns rank's bound socket: it binds, receives and dispatches until
// the listener closes. A failed bind (the port is taken) is retried with
// backoff. A receive error is one connection ending (an engine went away:
// zmq4 reports it through Recv) and does not close the socket, which the
// other engines are still connected to.
func (l *listener) serve(rank int, addr string) {
	log := l.log.With("rank", rank, "bound", addr)
	backoff := minReconnect
	loggedBindError := false
	for l.ctx.Err() == nil {
		sub := zmq4.NewSub(l.ctx, zmq4.WithLogger(slog.NewLogLogger(log.Handler(), slog.LevelDebug)))
		err := sub.SetOption(zmq4.OptionSubscribe, "")
		if err == nil {
			err = sub.Listen(addr)
		}
		if err != nil {
			sub.Close()
			if !loggedBindError {
				log.Error("cannot bind the listen socket; retrying", "err", err)
				loggedBindError = true
			} else {
				log.Debug("cannot bind the listen socket; retrying", "err", err, "in", backoff)
			}
			if !sleep(l.ctx, backoff) {
				return
			}
			backoff = min(backoff*2, maxReconnect)
			continue
		}
		log.Info("listening for engines' KV events")
		for {
			msg, err := sub.Recv()
			if err != nil {
				if l.ctx.Err() != nil {
					break
				}
				if errors.Is(err, context.Canceled) {
					break // the socket is gone: bind a fresh one
				}
				log.Debug("an engine connection ended", "err", err)
				continue
			}
			l.dispatch(rank, msg.Frames)
		}
		sub.Close()
	}
}

// dispatch hands one message to its engine's stream, or counts it as
// coming from an unknown publisher.
func (l *listener) dispatch(rank int, frames [][]byte) {
	var topic string
	if len(frames) > 0 {
		topic = string(frames[0])
	}
	r := l.lookup(rank, topic)
	if r == nil {
		l.unknownTopic(rank, topic)
		return
	}
	seq, payload, ok := liveFrames(frames)
	if !ok {
		r.m.decodeErrors.Inc()
		if r.drops.allow(time.Now(), dropFrames) {
			r.log.Warn("engine message is not [topic, seq, payload]; skipped (logged at most once per 10 s; decode_errors_total counts each)", "frames", len(frames))
		}
		return
	}
	select {
	case r.ch <- liveMsg{seq: seq, payload: payload}:
	case <-r.done:
	case <-l.ctx.Done():
	}
}

// unknownTopic counts a message whose topic names no engine entry and logs
// each such topic once.
func (l *listener) unknownTopic(rank int, topic string) {
	l.m.ListenUnknownMessages.Inc()
	l.unknownMu.Lock()
	defer l.unknownMu.Unlock()
	if _, seen := l.unknown[topic]; seen {
		return
	}
	if len(l.unknown) >= maxUnknownTopics {
		if !l.unknownFull {
			l.unknownFull = true
			l.log.Warn("more unknown publishers than the bound; further unknown topics are counted but not logged",
				"bound", maxUnknownTopics)
		}
		return
	}
	l.unknown[topic] = struct{}{}
	l.m.ListenUnknownTopics.Inc()
	shown := topic
	if len(shown) > maxLoggedTopicBytes {
		shown = shown[:maxLoggedTopicBytes] + "…"
	}
	attrs := []any{"topic", shown, "rank", rank}
	if p, ok := podOf(l.re, topic); ok {
		attrs = append(attrs, "pod", p)
	} else {
		attrs = append(attrs, "topic_pattern", l.pattern)
	}
	l.log.Warn("events from an unknown publisher on the listen socket: its topic matches no engine entry's topic or pod; dropped (counted in listen_unknown_messages_total; each topic is logged once)", attrs...)
}
