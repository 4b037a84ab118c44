package vllmpub

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/inference-cache/inference-cache/internal/poll"
)

// ReplyStyle is the frame layout of replay replies: older vLLM releases
// send [seq, payload], newer ones [topic, seq, payload].
type ReplyStyle int

// Reply styles.
const (
	ReplyTwoFrames   ReplyStyle = iota // [seq, payload]
	ReplyThreeFrames                   // [topic, seq, payload]
)

// DefaultReplayBuffer is how many batches a publisher keeps for replay
// unless Options.ReplayBuffer says otherwise: vLLM's buffer size.
const DefaultReplayBuffer = 10000

// Options configure New.
type Options struct {
	// Connect, when set, makes the PUB socket connect to this endpoint
	// (tcp://HOST:PORT, a subscriber's listen socket), as vLLM's does for
	// an endpoint without a wildcard host and as every engine does in
	// llm-d's topology. Empty: the PUB socket listens on a random
	// loopback port.
	Connect string
	// Bind, when set and Connect is not, is the endpoint the PUB socket
	// listens on, tcp://HOST:PORT ("*" for every interface, as in vLLM's
	// default tcp://*:5557). Empty: a random loopback port.
	Bind string
	// ReplayBind is the replay ROUTER socket's endpoint, like Bind (empty:
	// a random loopback port). Only with Replay.
	ReplayBind string
	// Topic is the first frame of every message and of three-frame replay
	// replies (vLLM's kv_events_config topic, "" by default).
	Topic string
	// Replay adds the replay ROUTER socket, on a random loopback port.
	Replay bool
	// ReplayBuffer is how many recent batches are kept for replay; a
	// subscriber that misses more than this must clear the replica, as
	// with a real engine. 0 = DefaultReplayBuffer.
	ReplayBuffer int
}

type stored struct {
	seq     uint64
	payload []byte
}

// Publisher is one engine's KV-event publisher. Every Publish is numbered
// and kept for replay, like vLLM's ZmqEventPublisher. Publish, Skip,
// Resend and SendRaw are called from one goroutine; the ROUTER is served
// in the background.
type Publisher struct {
	// Topic is the first frame of every message (Options.Topic). Set it
	// before publishing.
	Topic string

	pub     zmq4.Socket
	router  zmq4.Socket
	connect string        // the endpoint the PUB socket dials ("" = it listens)
	dialed  chan struct{} // closed when the background dial returned (connecting only)
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	keep    int

	mu     sync.Mutex
	seq    uint64
	buf    []stored
	style  ReplyStyle
	delay  time.Duration
	silent bool // replay answers nothing (tests the replay timeout)
}

// New starts a publisher. A listening one has bound its ports when New
// returns. A connecting one, like libzmq's connect, returns at once and
// keeps dialling in the background (every 20 ms) until it reaches
// Options.Connect or is closed, so it may start before the subscriber
// binds; messages published before then are dropped, as a PUB socket
// without peers drops them: call WaitSubscribed first. Close it when
// done.
func New(o Options) (*Publisher, error) {
	ctx, cancel := context.WithCancel(context.Background())
	quiet := zmq4.WithLogger(log.New(io.Discard, "", 0))
	p := &Publisher{Topic: o.Topic, cancel: cancel, connect: o.Connect, keep: o.ReplayBuffer}
	if p.keep <= 0 {
		p.keep = DefaultReplayBuffer
	}
	if o.Connect == "" {
		p.pub = zmq4.NewPub(ctx, quiet)
		if err := p.pub.Listen(orLoopback(o.Bind)); err != nil {
			cancel()
			return nil, fmt.Errorf("vllmpub: listen on %s: %w", orLoopback(o.Bind), err)
		}
	} else {
		p.pub = zmq4.NewPub(ctx, quiet, zmq4.WithDialerRetry(20*time.Millisecond), zmq4.WithDialerMaxRetries(-1))
	}
	if o.Replay {
		p.router = zmq4.NewRouter(ctx, quiet)
		if err := p.router.Listen(orLoopback(o.ReplayBind)); err != nil {
			p.Close()
			return nil, fmt.Errorf("vllmpub: replay socket on %s: %w", orLoopback(o.ReplayBind), err)
		}
		p.wg.Add(1)
		go p.serveReplay()
	}
	if o.Connect != "" {
		p.dialed = make(chan struct{})
		go func() {
			defer close(p.dialed)
			// Returns when connected, or with an error once Close cancels it.
			_ = p.pub.Dial(o.Connect)
		}()
	}
	return p, nil
}

// orLoopback is ep, or a random loopback port when ep is empty.
func orLoopback(ep string) string {
	if ep == "" {
		return "tcp://127.0.0.1:0"
	}
	return ep
}

// Endpoint is the PUB socket's address, tcp://HOST:PORT as bound (the
// port chosen when it was 0), or for a connecting publisher the endpoint
// it connects to.
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

// SetReplyStyle chooses the replay reply layout, to test subscribers
// against both vLLM generations.
func (p *Publisher) SetReplyStyle(s ReplyStyle) { p.mu.Lock(); p.style = s; p.mu.Unlock() }

// SetReplayDelay delays each replay reply by d (to test live batches
// arriving while a replay runs).
func (p *Publisher) SetReplayDelay(d time.Duration) { p.mu.Lock(); p.delay = d; p.mu.Unlock() }

// SetReplaySilent makes the replay socket swallow requests without reply
// (to test a subscriber's replay timeout).
func (p *Publisher) SetReplaySilent(on bool) { p.mu.Lock(); p.silent = on; p.mu.Unlock() }

// WaitSubscribed waits until a subscriber's subscription reached the PUB
// socket: ZMQ drops what is published before (the slow joiner).
// It errors when ctx ends or timeout passes first (wrapping ctx's error
// or poll.ErrTimeout).
func (p *Publisher) WaitSubscribed(ctx context.Context, timeout time.Duration) error {
	err := poll.Until(ctx, timeout, 5*time.Millisecond, func() (bool, string) {
		return len(p.pub.(zmq4.Topics).Topics()) > 0, "no subscriber on " + p.Endpoint()
	})
	if err != nil {
		return fmt.Errorf("vllmpub: %w", err)
	}
	return nil
}

// Publish sends payload as the next batch and returns its seq. The
// publisher keeps payload for replay: do not modify it afterwards.
func (p *Publisher) Publish(payload []byte) (uint64, error) {
	seq := p.record(payload)
	if err := p.send(seq, payload); err != nil {
		return seq, fmt.Errorf("vllmpub: publish seq %d: %w", seq, err)
	}
	return seq, nil
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

// SendRaw sends arbitrary frames on the PUB socket (malformed messages).
func (p *Publisher) SendRaw(frames ...[]byte) error {
	return p.pub.SendMulti(zmq4.NewMsgFrom(frames...))
}

func (p *Publisher) record(payload []byte) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	seq := p.seq
	p.seq++
	p.buf = append(p.buf, stored{seq: seq, payload: payload})
	if len(p.buf) > p.keep {
		p.buf = p.buf[len(p.buf)-p.keep:]
	}
	return seq
}

// Seq is the 8-byte big-endian sequence frame of seq.
func Seq(seq uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], seq)
	return b[:]
}

func (p *Publisher) send(seq uint64, payload []byte) error {
	return p.pub.SendMulti(zmq4.NewMsgFrom([]byte(p.Topic), Seq(seq), payload))
}

// serveReplay answers replay requests: [identity, "", start seq] →
// [identity, (topic,) seq, payload]… then [identity, (topic,) −1, ""].
func (p *Publisher) serveReplay() {
	defer p.wg.Done()
	for {
		msg, err := p.router.Recv()
		if err != nil {
			return
		}
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
				if delay > 0 {
					time.Sleep(delay) // the slow replay this publisher was asked to play
				}
				if reply(Seq(s.seq), s.payload) != nil {
					return
				}
			}
		}
		_ = reply(Seq(^uint64(0)), []byte{})
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
