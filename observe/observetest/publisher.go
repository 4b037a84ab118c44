// Package observetest is a test kit for the observation path: a Go ZMQ
// publisher that speaks the vLLM KV-event wire format (live PUB socket and
// replay ROUTER socket) and helpers that encode batches, so tests can drive
// the real subscriber over loopback TCP without Python or an engine.
//
// It does not import observe, so observe's own tests can use it.
package observetest

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"
)

// ReplyStyle is the frame layout of replay replies (older vLLM
// sends [seq, payload], newer [topic, seq, payload]).
type ReplyStyle int

// Reply styles.
const (
	ReplyTwoFrames   ReplyStyle = iota // [seq, payload]
	ReplyThreeFrames                   // [topic, seq, payload]
)

// replayBufferSize is how many batches the engine keeps for replay (vLLM).
const replayBufferSize = 10000

type stored struct {
	seq     uint64
	payload []byte
}

// Publisher is a fake engine: a PUB socket on 127.0.0.1 (random port), or
// connected to a subscriber's listen socket, and, optionally, a replay
// ROUTER socket. Every Publish is numbered and kept for
// replay, like vLLM's ZmqEventPublisher. Safe for use by one test goroutine
// (the ROUTER is served in the background).
type Publisher struct {
	// Topic is the first frame of every message and of three-frame replay
	// replies (vLLM's kv_events_config topic, "" by default). Set it before
	// publishing.
	Topic string

	pub     zmq4.Socket
	router  zmq4.Socket
	connect string        // the endpoint the PUB socket dials ("" = it listens)
	dialed  chan struct{} // closed when the background dial returned (connecting only)
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	mu     sync.Mutex
	seq    uint64
	buf    []stored
	style  ReplyStyle
	delay  time.Duration
	silent bool // replay answers nothing (tests the replay timeout)
}

// NewPublisher listens on random loopback ports; withReplay adds the replay
// socket. Close it when done.
func NewPublisher(withReplay bool) (*Publisher, error) {
	ctx, cancel := context.WithCancel(context.Background())
	quiet := zmq4.WithLogger(log.New(io.Discard, "", 0))
	p := &Publisher{cancel: cancel, pub: zmq4.NewPub(ctx, quiet)}
	if err := p.pub.Listen("tcp://127.0.0.1:0"); err != nil {
		cancel()
		return nil, err
	}
	return p.withReplay(ctx, withReplay)
}

// NewConnectingPublisher is a fake engine in connect mode: its PUB socket
// connects to endpoint (tcp://HOST:PORT, a subscriber's listen socket), as
// vLLM's does for an endpoint without a wildcard host and as every engine
// does in llm-d's topology, and every message carries topic (for example
// "kv@pod-a@qwen3-8b"). Like libzmq's connect it returns at once and keeps
// dialling in the background (every 20 ms) until it reaches endpoint or is
// closed, so it may start before the subscriber binds; messages published
// before then are dropped, as a PUB socket without peers drops them: call
// WaitSubscribed first. withReplay adds the replay ROUTER, which binds a
// random loopback port like vLLM's. Close it when done.
func NewConnectingPublisher(endpoint, topic string, withReplay bool) (*Publisher, error) {
	ctx, cancel := context.WithCancel(context.Background())
	quiet := zmq4.WithLogger(log.New(io.Discard, "", 0))
	p := &Publisher{Topic: topic, cancel: cancel, connect: endpoint,
		pub: zmq4.NewPub(ctx, quiet, zmq4.WithDialerRetry(20*time.Millisecond), zmq4.WithDialerMaxRetries(-1))}
	if _, err := p.withReplay(ctx, withReplay); err != nil {
		return nil, err
	}
	p.dialed = make(chan struct{})
	go func() {
		defer close(p.dialed)
		// Returns when connected, or with an error once Close cancels it.
		_ = p.pub.Dial(endpoint)
	}()
	return p, nil
}

func (p *Publisher) withReplay(ctx context.Context, withReplay bool) (*Publisher, error) {
	quiet := zmq4.WithLogger(log.New(io.Discard, "", 0))
	if withReplay {
		p.router = zmq4.NewRouter(ctx, quiet)
		if err := p.router.Listen("tcp://127.0.0.1:0"); err != nil {
			p.Close()
			return nil, err
		}
		p.wg.Add(1)
		go p.serveReplay()
	}
	return p, nil
}

// Endpoint is the PUB socket's address, tcp://127.0.0.1:PORT, or for a
// connecting publisher the endpoint it connected to.
func (p *Publisher) Endpoint() string {
	if p.connect != "" {
		return p.connect
	}
	return "tcp://" + p.pub.Addr().String()
}

// ReplayEndpoint is the ROUTER socket ("" without replay).
func (p *Publisher) ReplayEndpoint() string {
	if p.router == nil {
		return ""
	}
	return "tcp://" + p.router.Addr().String()
}

// SetReplyStyle chooses the replay reply layout.
func (p *Publisher) SetReplyStyle(s ReplyStyle) { p.mu.Lock(); p.style = s; p.mu.Unlock() }

// SetReplayDelay delays each replay reply by d (to test live batches
// arriving while a replay runs).
func (p *Publisher) SetReplayDelay(d time.Duration) { p.mu.Lock(); p.delay = d; p.mu.Unlock() }

// SetReplaySilent makes the replay socket swallow requests without reply.
func (p *Publisher) SetReplaySilent(on bool) { p.mu.Lock(); p.silent = on; p.mu.Unlock() }

// WaitSubscribed blocks until a subscriber's subscription reached the PUB
// socket (ZMQ drops messages published before that: the slow joiner).
func (p *Publisher) WaitSubscribed(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if len(p.pub.(zmq4.Topics).Topics()) > 0 {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Errorf("observetest: no subscriber on %s after %v", p.Endpoint(), timeout)
}

// Publish sends payload as the next batch and returns its seq.
func (p *Publisher) Publish(payload []byte) (uint64, error) {
	seq := p.record(payload)
	return seq, p.send(seq, payload)
}

// Skip numbers and keeps payload for replay without sending it live: the
// subscriber will see a gap.
func (p *Publisher) Skip(payload []byte) uint64 { return p.record(payload) }

// Restart simulates an engine restart: seq restarts at 0 and the replay
// buffer is emptied.
func (p *Publisher) Restart() {
	p.mu.Lock()
	p.seq, p.buf = 0, nil
	p.mu.Unlock()
}

// Resend sends an already numbered batch again live (tests duplicates).
func (p *Publisher) Resend(seq uint64) error {
	p.mu.Lock()
	var payload []byte
	for _, s := range p.buf {
		if s.seq == seq {
			payload = s.payload
		}
	}
	p.mu.Unlock()
	return p.send(seq, payload)
}

func (p *Publisher) record(payload []byte) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	seq := p.seq
	p.seq++
	p.buf = append(p.buf, stored{seq: seq, payload: payload})
	if len(p.buf) > replayBufferSize {
		p.buf = p.buf[1:]
	}
	return seq
}

func be64(v uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return b[:]
}

func (p *Publisher) send(seq uint64, payload []byte) error {
	return p.pub.SendMulti(zmq4.NewMsgFrom([]byte(p.Topic), be64(seq), payload))
}

// SendRaw sends arbitrary frames on the PUB socket (malformed messages).
func (p *Publisher) SendRaw(frames ...[]byte) error {
	return p.pub.SendMulti(zmq4.NewMsgFrom(frames...))
}

func (p *Publisher) serveReplay() {
	defer p.wg.Done()
	for {
		msg, err := p.router.Recv()
		if err != nil {
			return
		}
		// [identity, "", start seq]
		if len(msg.Frames) != 3 || len(msg.Frames[2]) != 8 {
			continue
		}
		id, start := msg.Frames[0], binary.BigEndian.Uint64(msg.Frames[2])
		p.mu.Lock()
		buf := append([]stored(nil), p.buf...)
		style, delay, silent := p.style, p.delay, p.silent
		p.mu.Unlock()
		if silent {
			continue
		}
		reply := func(seq, payload []byte) error {
			var frames [][]byte
			if style == ReplyThreeFrames {
				frames = [][]byte{id, []byte(p.Topic), seq, payload}
			} else {
				frames = [][]byte{id, seq, payload}
			}
			return p.router.SendMulti(zmq4.NewMsgFrom(frames...))
		}
		for _, s := range buf {
			if s.seq >= start {
				time.Sleep(delay)
				if reply(be64(s.seq), s.payload) != nil {
					return
				}
			}
		}
		_ = reply(be64(^uint64(0)), []byte{})
	}
}

// Close stops the sockets.
func (p *Publisher) Close() {
	p.cancel()
	if p.dialed != nil {
		<-p.dialed // the socket is not closed under a dial in progress
	}
	p.pub.Close()
	if p.router != nil {
		p.router.Close()
	}
	p.wg.Wait()
}

// Batch encodes a positional batch [ts, events, rank?]; rank < 0 omits it.
func Batch(ts float64, rank int, events ...any) []byte {
	v := []any{ts, events}
	if rank >= 0 {
		v = append(v, rank)
	}
	return mustMarshal(v)
}

// MapBatch encodes a batch in map form; rank < 0 omits it.
func MapBatch(ts float64, rank int, events ...any) []byte {
	v := map[string]any{"ts": ts, "events": events}
	if rank >= 0 {
		v["data_parallel_rank"] = rank
	}
	return mustMarshal(v)
}

// Stored is a positional BlockStored event with vLLM's fields up to
// lora_name; extra appends trailing fields (extra_keys, group_idx, …).
func Stored(hashes []any, parent any, tokens []uint32, blockSize int, loraID, medium, loraName any, extra ...any) []any {
	return append([]any{"BlockStored", hashes, parent, tokens, blockSize, loraID, medium, loraName}, extra...)
}

// Removed is a positional BlockRemoved event; extra appends group_idx.
func Removed(hashes []any, medium any, extra ...any) []any {
	return append([]any{"BlockRemoved", hashes, medium}, extra...)
}

// Cleared is a positional AllBlocksCleared event.
func Cleared() []any { return []any{"AllBlocksCleared"} }

// Hashes converts uint64 engine hashes to the []any the encoders take.
func Hashes(hs ...uint64) []any {
	out := make([]any, len(hs))
	for i, h := range hs {
		out[i] = h
	}
	return out
}

// Tokens returns n tokens start, start+1, ….
func Tokens(start, n int) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = uint32(start + i)
	}
	return t
}

func mustMarshal(v any) []byte {
	b, err := msgpack.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
