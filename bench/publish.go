package bench

import (
	"bytes"
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

// Encoding is the msgpack form of the published batches (vLLM's msgspec
// encodes array_like structs positionally; map form is what engines with
// array_like off send).
type Encoding string

// Encodings.
const (
	EncodingPositional Encoding = "positional"
	EncodingMap        Encoding = "map"
)

// ReplayBufferBatches is how many recent batches each engine keeps for
// replay. vLLM keeps 10,000; a simulated batch carries up to a few hundred
// KiB of token ids, so the bench keeps fewer (a subscriber that misses more
// than this clears the replica, as it would with a real engine).
const ReplayBufferBatches = 256

type storedBatch struct {
	seq     uint64
	payload []byte
}

// Publisher is one engine's KV-event publisher in vLLM's wire format
// (vLLM's kv_events publisher): a ZMQ PUB socket sending [topic, seq (8 bytes big-endian),
// msgpack batch] and a ROUTER replay socket answering [identity, "",
// start seq] with every buffered batch from start and an end marker
// (seq −1). Publish is called from one goroutine.
type Publisher struct {
	enc    Encoding
	seed   uint64 // the engine's own block-hash seed (vLLM seeds per process)
	pub    zmq4.Socket
	router zmq4.Socket
	cancel context.CancelFunc
	wg     sync.WaitGroup

	buf  bytes.Buffer
	menc *msgpack.Encoder
	toks []uint32

	mu     sync.Mutex
	seq    uint64
	replay []storedBatch
}

// NewPublisher listens on random loopback ports. seed makes the engine's
// own block hashes (which the subscriber never trusts across processes)
// differ between engines.
func NewPublisher(enc Encoding, seed uint64) (*Publisher, error) {
	if enc == "" {
		enc = EncodingPositional
	}
	if enc != EncodingPositional && enc != EncodingMap {
		return nil, fmt.Errorf("bench: event encoding %q: want positional or map", enc)
	}
	ctx, cancel := context.WithCancel(context.Background())
	quiet := zmq4.WithLogger(log.New(io.Discard, "", 0))
	p := &Publisher{enc: enc, seed: seed, cancel: cancel, pub: zmq4.NewPub(ctx, quiet), router: zmq4.NewRouter(ctx, quiet)}
	p.menc = msgpack.NewEncoder(&p.buf)
	if err := p.pub.Listen("tcp://127.0.0.1:0"); err != nil {
		p.Close()
		return nil, fmt.Errorf("bench: publisher: %w", err)
	}
	if err := p.router.Listen("tcp://127.0.0.1:0"); err != nil {
		p.Close()
		return nil, fmt.Errorf("bench: replay socket: %w", err)
	}
	p.wg.Add(1)
	go p.serveReplay()
	return p, nil
}

// Endpoint is the PUB socket, tcp://127.0.0.1:PORT.
func (p *Publisher) Endpoint() string { return "tcp://" + p.pub.Addr().String() }

// ReplayEndpoint is the ROUTER socket.
func (p *Publisher) ReplayEndpoint() string { return "tcp://" + p.router.Addr().String() }

// WaitSubscribed waits until a subscriber's subscription reached the PUB
// socket (ZMQ drops what is published before: the slow joiner).
func (p *Publisher) WaitSubscribed(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if len(p.pub.(zmq4.Topics).Topics()) > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return fmt.Errorf("bench: no subscriber on %s after %v", p.Endpoint(), timeout)
}

// EngineHash is the engine's own hash of a trace block.
func (p *Publisher) EngineHash(hashID uint64) uint64 { return mix64(hashID ^ p.seed) }

// PublishAdmission publishes one batch for an admission: BlockRemoved for
// the evicted blocks, then one BlockStored per stored run (with its parent
// block's engine hash, the run's token ids and block size 512). It returns
// the number of block hashes the batch names (the observation path's
// expected work) — 0 when there was nothing to publish.
func (p *Publisher) PublishAdmission(blocks []uint64, a *Admission, now time.Time) (int, error) {
	nEv := len(a.Stored)
	if len(a.Evicted) > 0 {
		nEv++
	}
	if nEv == 0 {
		return 0, nil
	}
	p.buf.Reset()
	e := p.menc
	ts := float64(now.UnixNano()) / 1e9
	var err error
	put := func(e2 error) {
		if err == nil {
			err = e2
		}
	}
	if p.enc == EncodingMap {
		put(e.EncodeMapLen(3))
		put(e.EncodeString("ts"))
		put(e.EncodeFloat64(ts))
		put(e.EncodeString("events"))
	} else {
		put(e.EncodeArrayLen(3))
		put(e.EncodeFloat64(ts))
	}
	put(e.EncodeArrayLen(nEv))
	count := 0
	if len(a.Evicted) > 0 {
		count += len(a.Evicted)
		if p.enc == EncodingMap {
			put(e.EncodeMapLen(3))
			put(e.EncodeString("type"))
			put(e.EncodeString("BlockRemoved"))
			put(e.EncodeString("block_hashes"))
		} else {
			put(e.EncodeArrayLen(3))
			put(e.EncodeString("BlockRemoved"))
		}
		put(e.EncodeArrayLen(len(a.Evicted)))
		for _, h := range a.Evicted {
			put(e.EncodeUint64(p.EngineHash(h)))
		}
		if p.enc == EncodingMap {
			put(e.EncodeString("medium"))
		}
		put(e.EncodeString("GPU"))
	}
	for _, r := range a.Stored {
		count += r.End - r.Start
		if p.enc == EncodingMap {
			put(e.EncodeMapLen(8))
			put(e.EncodeString("type"))
			put(e.EncodeString("BlockStored"))
			put(e.EncodeString("block_hashes"))
		} else {
			put(e.EncodeArrayLen(8))
			put(e.EncodeString("BlockStored"))
		}
		put(e.EncodeArrayLen(r.End - r.Start))
		for _, h := range blocks[r.Start:r.End] {
			put(e.EncodeUint64(p.EngineHash(h)))
		}
		if p.enc == EncodingMap {
			put(e.EncodeString("parent_block_hash"))
		}
		if r.Start == 0 {
			put(e.EncodeNil())
		} else {
			put(e.EncodeUint64(p.EngineHash(blocks[r.Start-1])))
		}
		if p.enc == EncodingMap {
			put(e.EncodeString("token_ids"))
		}
		p.toks = p.toks[:0]
		for _, h := range blocks[r.Start:r.End] {
			p.toks = AppendBlockTokens(p.toks, h, TraceBlockTokens)
		}
		put(e.EncodeArrayLen(len(p.toks)))
		for _, t := range p.toks {
			put(e.EncodeUint(uint64(t)))
		}
		if p.enc == EncodingMap {
			put(e.EncodeString("block_size"))
		}
		put(e.EncodeInt(TraceBlockTokens))
		if p.enc == EncodingMap {
			put(e.EncodeString("lora_id"))
		}
		put(e.EncodeNil())
		if p.enc == EncodingMap {
			put(e.EncodeString("medium"))
		}
		put(e.EncodeString("GPU"))
		if p.enc == EncodingMap {
			put(e.EncodeString("lora_name"))
		}
		put(e.EncodeNil())
	}
	if p.enc == EncodingMap {
		put(e.EncodeString("data_parallel_rank"))
	}
	put(e.EncodeInt(0))
	if err != nil {
		return 0, fmt.Errorf("bench: encode batch: %w", err)
	}
	payload := append([]byte(nil), p.buf.Bytes()...)
	p.mu.Lock()
	seq := p.seq
	p.seq++
	p.replay = append(p.replay, storedBatch{seq: seq, payload: payload})
	if len(p.replay) > ReplayBufferBatches {
		p.replay = append(p.replay[:0], p.replay[len(p.replay)-ReplayBufferBatches:]...)
	}
	p.mu.Unlock()
	if err := p.pub.SendMulti(zmq4.NewMsgFrom([]byte{}, be64(seq), payload)); err != nil {
		return 0, fmt.Errorf("bench: publish: %w", err)
	}
	return count, nil
}

func be64(v uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return b[:]
}

// serveReplay answers replay requests: [identity, "", start seq] →
// [identity, seq, payload]… then [identity, −1, ""].
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
		buf := append([]storedBatch(nil), p.replay...)
		p.mu.Unlock()
		for _, s := range buf {
			if s.seq >= start {
				if p.router.SendMulti(zmq4.NewMsgFrom(id, be64(s.seq), s.payload)) != nil {
					return
				}
			}
		}
		_ = p.router.SendMulti(zmq4.NewMsgFrom(id, be64(^uint64(0)), []byte{}))
	}
}

// Close stops the sockets.
func (p *Publisher) Close() {
	p.cancel()
	p.pub.Close()
	p.router.Close()
	p.wg.Wait()
}
