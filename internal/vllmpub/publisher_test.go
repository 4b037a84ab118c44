package vllmpub

import (
	"encoding/binary"
	"slices"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/inference-cache/inference-cache/internal/freeport"
)

// A publisher keeps only the last ReplayBuffer batches: a replay from 0
// after four publishes into a buffer of two answers seqs 2 and 3 (in the
// three-frame layout, topic first) and the end marker.
func TestPublisher_ReplayKeepsOnlyTheLastReplayBufferBatches(t *testing.T) {
	p, err := New(Options{Replay: true, ReplayBuffer: 2, Topic: "kv"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.SetReplyStyle(ReplyThreeFrames)
	for i := range 4 {
		if _, err := p.Publish([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	d := zmq4.NewDealer(t.Context())
	defer d.Close()
	if err := d.Dial(p.ReplayEndpoint()); err != nil {
		t.Fatal(err)
	}
	if err := d.SendMulti(zmq4.NewMsgFrom([]byte{}, Seq(0))); err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for {
		msg, err := d.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if len(msg.Frames) != 3 || string(msg.Frames[0]) != "kv" {
			t.Fatalf("reply %q, want [topic, seq, payload]", msg.Frames)
		}
		seq := binary.BigEndian.Uint64(msg.Frames[1])
		if seq == ^uint64(0) {
			break
		}
		if len(msg.Frames[2]) != 1 || uint64(msg.Frames[2][0]) != seq {
			t.Fatalf("seq %d carries payload %x", seq, msg.Frames[2])
		}
		seqs = append(seqs, seq)
	}
	if !slices.Equal(seqs, []uint64{2, 3}) {
		t.Fatalf("replayed %v, want [2 3]", seqs)
	}
}

// An unknown encoding is refused when the encoder is made, not when a
// batch is half written.
func TestNewBatchEncoder_RefusesUnknownEncoding(t *testing.T) {
	if _, err := NewBatchEncoder("json"); err == nil {
		t.Fatal("encoding json accepted")
	}
}

// Bind puts the PUB socket on the endpoint given, where a subscriber
// dialling that address receives what is published.
func TestPublisher_BindListensOnTheGivenEndpoint(t *testing.T) {
	addr := freeport.MustAddr(t)
	p, err := New(Options{Bind: "tcp://" + addr, Topic: "kv"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Endpoint() != "tcp://"+addr {
		t.Fatalf("Endpoint %q, want tcp://%s", p.Endpoint(), addr)
	}
	sub := zmq4.NewSub(t.Context())
	defer sub.Close()
	if err := sub.Dial("tcp://" + addr); err != nil {
		t.Fatal(err)
	}
	if err := sub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitSubscribed(t.Context(), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Publish([]byte("batch")); err != nil {
		t.Fatal(err)
	}
	msg, err := sub.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.Frames) != 3 || string(msg.Frames[0]) != "kv" || string(msg.Frames[2]) != "batch" {
		t.Fatalf("received %q", msg.Frames)
	}
}
