package observe

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-zeromq/zmq4"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// Reconnect backoff of the SUB socket.
const (
	minReconnect = 100 * time.Millisecond
	// maxReconnect is short: the reconnect after an engine restart is
	// when the restart is noticed (resume.go), and a dial is cheap.
	maxReconnect = time.Second
	dialTimeout  = 2 * time.Second
)

// endSeq is the replay end marker: seq = -1 (eight 0xFF bytes).
const endSeq = -1

// liveMsg is one live message off the SUB socket.
type liveMsg struct {
	seq     int64
	payload []byte
}

// replayMsg is one reply of replay gen, or its end (done).
type replayMsg struct {
	gen      uint64
	seq      int64
	payload  []byte
	done     bool
	complete bool
}

// stream is the subscriber of one engine socket (one data-parallel rank):
// a reader goroutine (SUB socket, reconnecting) and the loop that owns the
// sequencer and translator and feeds the forwarder.
type stream struct {
	cfg            *EngineConfig
	rank           int64
	endpoint       string
	replayEndpoint string
	replayTimeout  time.Duration
	m              *engineMetrics
	log            *slog.Logger
	fw             *Forwarder
	now            func() time.Time

	tr  *translator
	seq *sequencer
	// frameDrops rate-limits the log of messages that are not [topic,
	// seq, payload], from read or the listener.
	frameDrops dropLog
	// live carries the live messages: from read (the stream dials its
	// endpoint) or, for an engine served by listen, from the listener.
	live chan liveMsg
	// conns tells run of each connection read makes (true after the
	// first): a reconnect may follow an engine restart (resume.go).
	conns chan bool
	// store is the cluster's position record; nil = none (start empty).
	// fetch: resume from the position it holds (false for an engine
	// whose replicas were just cleared).
	store PositionStore
	fetch bool
	// recorded is the last position handed to the forwarder.
	recorded Position
}

func newStream(cfg *EngineConfig, rank int64, replayTimeout time.Duration, m *engineMetrics, log *slog.Logger, fw *Forwarder, now func() time.Time) *stream {
	ep, _ := offsetEndpoint(cfg.Endpoint, int(rank))
	rep, _ := offsetEndpoint(cfg.ReplayEndpoint, int(rank))
	where := []any{"engine", cfg.ReplicaID, "endpoint", ep}
	if cfg.servedByListen() {
		where = []any{"engine", cfg.ReplicaID, "listen_topic", cfg.Topic, "rank", rank}
		if cfg.Pod != "" {
			where[3] = "listen_pod"
			where[4] = cfg.Pod
		}
	}
	s := &stream{cfg: cfg, rank: rank, endpoint: ep, replayEndpoint: rep, replayTimeout: replayTimeout, m: m,
		log: log.With(where...), fw: fw, now: now, live: make(chan liveMsg, 256), conns: make(chan bool, 4), recorded: Position{Seq: -1}}
	s.tr = newTranslator(cfg, rank, m, s.log)
	s.seq = newSequencer(s.tr, m, s.log, rep != "")
	return s
}

// run subscribes until ctx ends. The translator's state stays valid after
// it returns (the caller clears the replicas of a removed engine).
func (s *stream) run(ctx context.Context) {
	live := s.live
	replies := make(chan replayMsg, 256)
	if !s.cfg.servedByListen() {
		go s.read(ctx, live)
	}
	s.fetchPosition(ctx)
	var out []*pb.BlockEvent
	for {
		out = out[:0]
		var req *replayRequest
		select {
		case <-ctx.Done():
			return
		case again := <-s.conns:
			out, req = s.seq.connected(out, again, s.now())
		case msg := <-live:
			out, req = s.seq.live(out, msg.seq, msg.payload, s.now())
		case r := <-replies:
			if r.done {
				out, req = s.seq.replayDone(out, r.gen, r.complete, s.now())
			} else {
				out, req = s.seq.replayed(out, r.gen, r.seq, r.payload, s.now())
			}
		}
		if req != nil {
			go s.replay(ctx, *req, replies)
		}
		if len(out) > 0 {
			if err := s.fw.Enqueue(ctx, out); err != nil {
				return
			}
			// The forwarder holds the events now; do not reuse their slots.
			out = nil
		}
		if p := s.seq.position(); s.store != nil && p != nil && *p != s.recorded {
			if err := s.fw.EnqueuePosition(ctx, s.tr.cfg.ReplicaForRank(s.rank), *p); err != nil {
				return
			}
			s.recorded = *p
		}
	}
}

// fetchPosition asks the cluster for the stream's position, within
// positionFetchTimeout, and hands it to the sequencer; without an answer
// the stream starts from empty.
func (s *stream) fetchPosition(ctx context.Context) {
	if s.store == nil || !s.fetch {
		return
	}
	id := s.tr.cfg.ReplicaForRank(s.rank)
	fctx, cancel := context.WithTimeout(ctx, positionFetchTimeout)
	defer cancel()
	ps, err := s.store.StreamPositions(fctx, []string{id})
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("stream position not read from the cluster: starting the replica from empty", "replica", id, "err", err)
		}
		return
	}
	if p, ok := ps[id]; ok {
		s.seq.setResume(&p)
		s.recorded = p
		s.log.Info("stream position read from the cluster", "replica", id, "seq", p.Seq)
	}
}

// read owns the SUB socket: it dials, subscribes, receives, and on any
// error closes the socket and dials again with backoff. A fresh socket per
// connection keeps the state simple; messages lost meanwhile show up as a
// sequence gap.
func (s *stream) read(ctx context.Context, out chan<- liveMsg) {
	backoff := minReconnect
	again := false
	for ctx.Err() == nil {
		sub := zmq4.NewSub(ctx, zmq4.WithDialerMaxRetries(0), zmq4.WithDialerTimeout(dialTimeout),
			zmq4.WithLogger(slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)))
		err := sub.SetOption(zmq4.OptionSubscribe, s.cfg.Topic)
		if err == nil {
			err = sub.Dial(s.endpoint)
		}
		if err != nil {
			sub.Close()
			s.log.Debug("engine not reachable; retrying", "err", err, "in", backoff)
			if !sleep(ctx, backoff) {
				return
			}
			backoff = min(backoff*2, maxReconnect)
			continue
		}
		s.m.reconnects.Inc()
		s.log.Info("subscribed to engine events", "topic", s.cfg.Topic)
		backoff = minReconnect
		select {
		case s.conns <- again:
		case <-ctx.Done():
		}
		again = true
		for {
			msg, err := sub.Recv()
			if err != nil {
				if ctx.Err() == nil {
					s.log.Warn("engine connection lost; reconnecting", "err", err)
				}
				break
			}
			seq, payload, ok := liveFrames(msg.Frames)
			if !ok {
				s.m.decodeErrors.Inc()
				if s.frameDrops.allow(time.Now(), dropFrames) {
					s.log.Warn("engine message is not [topic, seq, payload]; skipped (logged at most once per 10 s; decode_errors_total counts each)", "frames", len(msg.Frames))
				}
				continue
			}
			select {
			case out <- liveMsg{seq: seq, payload: payload}:
			case <-ctx.Done():
			}
		}
		sub.Close()
		if !sleep(ctx, backoff) {
			return
		}
	}
}

// liveFrames splits a live message: exactly [topic, seq (8 bytes
// big-endian), payload].
func liveFrames(f [][]byte) (int64, []byte, bool) {
	if len(f) != 3 || len(f[1]) != 8 {
		return 0, nil, false
	}
	seq := int64(binary.BigEndian.Uint64(f[1]))
	if seq < 0 {
		return 0, nil, false
	}
	return seq, f[2], true
}

// replayFrames splits a replay reply: [seq, payload] (older vLLM) or
// [topic, seq, payload] (newer), with or without a leading empty delimiter
// frame: the last two frames are seq and payload.
func replayFrames(f [][]byte) (int64, []byte, bool) {
	if len(f) < 2 || len(f) > 4 || len(f[len(f)-2]) != 8 {
		return 0, nil, false
	}
	return int64(binary.BigEndian.Uint64(f[len(f)-2])), f[len(f)-1], true
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// replay runs one replay exchange on a fresh DEALER socket: it sends an
// empty delimiter frame and the 8-byte big-endian start seq, forwards every
// reply to out tagged with req.Gen, and ends with a done message (complete
// when the end marker, seq = -1, arrived). The whole exchange is bounded by
// replayTimeout.
func (s *stream) replay(ctx context.Context, req replayRequest, out chan<- replayMsg) {
	rctx, cancel := context.WithTimeout(ctx, s.replayTimeout)
	defer cancel()
	complete, err := s.replayExchange(rctx, req, out)
	if err != nil && ctx.Err() == nil {
		s.log.Warn("replay failed", "from", req.From, "replay_endpoint", s.replayEndpoint, "err", err)
	}
	select {
	case out <- replayMsg{gen: req.Gen, done: true, complete: complete}:
	case <-ctx.Done():
	}
}

func (s *stream) replayExchange(ctx context.Context, req replayRequest, out chan<- replayMsg) (bool, error) {
	dealer := zmq4.NewDealer(ctx, zmq4.WithDialerMaxRetries(0), zmq4.WithDialerTimeout(dialTimeout),
		zmq4.WithLogger(slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)))
	defer dealer.Close()
	if err := dealer.Dial(s.replayEndpoint); err != nil {
		return false, err
	}
	var start [8]byte
	binary.BigEndian.PutUint64(start[:], uint64(req.From))
	if err := dealer.SendMulti(zmq4.NewMsgFrom([]byte{}, start[:])); err != nil {
		return false, fmt.Errorf("send replay request: %w", err)
	}
	for {
		msg, err := dealer.Recv()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return false, fmt.Errorf("no end marker within %v", s.replayTimeout)
			}
			return false, err
		}
		seq, payload, ok := replayFrames(msg.Frames)
		if !ok {
			s.m.decodeErrors.Inc()
			return false, fmt.Errorf("replay reply with %d frames is not [topic?, seq, payload]", len(msg.Frames))
		}
		if seq == endSeq {
			return true, nil
		}
		if seq < 0 {
			return false, fmt.Errorf("replay reply with negative seq %d", seq)
		}
		select {
		case out <- replayMsg{gen: req.Gen, seq: seq, payload: payload}:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}
