package bench

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/inference-cache/inference-cache/internal/vllmpub"
	"github.com/inference-cache/inference-cache/observe"
)

// A published admission is a vLLM batch the observe decoder reads back:
// BlockRemoved with the evicted blocks' engine hashes, then BlockStored
// per run with its parent and 512 token ids per block, in both encodings.
func TestPublisher_BatchesDecodeAsVLLMEvents(t *testing.T) {
	for _, enc := range []Encoding{EncodingPositional, EncodingMap} {
		t.Run(string(enc), func(t *testing.T) {
			p, err := newEnginePublisher(enc, 99)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			sub := zmq4.NewSub(t.Context())
			defer sub.Close()
			if err := sub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
				t.Fatal(err)
			}
			if err := sub.Dial(p.Endpoint()); err != nil {
				t.Fatal(err)
			}
			if err := p.WaitSubscribed(t.Context(), 10*time.Second); err != nil {
				t.Fatal(err)
			}
			blocks := []uint64{1, 5, 6, 7}
			a := &Admission{Evicted: []uint64{3}, Stored: []BlockRun{{Start: 0, End: 1}, {Start: 2, End: 4}}}
			n, err := p.publishAdmission(blocks, a, time.Unix(1700000000, 0))
			if err != nil || n != 4 {
				t.Fatalf("published %d hashes, err %v; want 4 (1 removed + 3 stored)", n, err)
			}
			msg, err := sub.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if len(msg.Frames) != 3 || !bytes.Equal(msg.Frames[1], vllmpub.Seq(0)) {
				t.Fatalf("frames %d, seq %x: want [topic, seq 0, payload]", len(msg.Frames), msg.Frames[1])
			}
			b, err := observe.DecodeBatch(msg.Frames[2])
			if err != nil {
				t.Fatal(err)
			}
			if b.TS != 1700000000 || len(b.Events) != 3 || !b.HasDPRank || b.DPRank != 0 {
				t.Fatalf("batch ts %v, %d events, rank %v/%d", b.TS, len(b.Events), b.HasDPRank, b.DPRank)
			}
			rm, s1, s2 := b.Events[0], b.Events[1], b.Events[2]
			if rm.Kind != observe.EventBlockRemoved || !slices.Equal(rm.BlockHashes, []uint64{p.engineHash(3)}) {
				t.Fatalf("first event %+v, want BlockRemoved of block 3", rm)
			}
			if s1.Kind != observe.EventBlockStored || s1.HasParent || !slices.Equal(s1.BlockHashes, []uint64{p.engineHash(1)}) ||
				s1.BlockSize != 512 || !slices.Equal(s1.TokenIDs, AppendBlockTokens(nil, 1, 512)) {
				t.Fatalf("second event: kind %v parent %v hashes %x size %d tokens %d", s1.Kind, s1.HasParent, s1.BlockHashes, s1.BlockSize, len(s1.TokenIDs))
			}
			want := AppendBlockTokens(AppendBlockTokens(nil, 6, 512), 7, 512)
			if !s2.HasParent || s2.Parent != p.engineHash(5) || !slices.Equal(s2.BlockHashes, []uint64{p.engineHash(6), p.engineHash(7)}) ||
				!slices.Equal(s2.TokenIDs, want) || s2.Medium != "GPU" {
				t.Fatalf("third event: parent %v %x, hashes %x, %d tokens, medium %q", s2.HasParent, s2.Parent, s2.BlockHashes, len(s2.TokenIDs), s2.Medium)
			}
			// Nothing to publish: no batch, no seq used.
			if n, err := p.publishAdmission(blocks, &Admission{}, time.Now()); n != 0 || err != nil {
				t.Fatalf("empty admission published %d, %v", n, err)
			}
		})
	}
}

// The engine's /metrics parses as Prometheus text with the vLLM names the
// subscriber's stats scraper reads.
func TestEngine_MetricsUseVLLMNames(t *testing.T) {
	e := NewEngine(0, FleetConfig{Engines: 1, CacheBlocks: 10, PrefillTPS: 1000, DecodeTPS: 10})
	e.Serve(&Request{InputLength: 1100, OutputLength: 10, HashIDs: []uint64{1, 2, 3}}, 0)
	e.Serve(&Request{InputLength: 600, OutputLength: 10, HashIDs: []uint64{1, 4}}, 0)
	// /metrics reports the last scrape. At 0.5 s the first request is
	// prefilling (1100 tokens in [0, 1.1]) and the second waits for it.
	e.Scrape(0.5)
	var b strings.Builder
	if err := e.WriteMetrics(&b, "m"); err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(b.String()))
	if err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	val := func(name string) float64 {
		f, ok := fams[name]
		if !ok || len(f.GetMetric()) != 1 {
			t.Fatalf("no %s in\n%s", name, b.String())
		}
		m := f.GetMetric()[0]
		if m.GetGauge() != nil {
			return m.GetGauge().GetValue()
		}
		return m.GetCounter().GetValue()
	}
	// Queries are prompt tokens (1100 + 600) of the requests admitted so
	// far; hits the cached prefix (block 1).
	if q, h := val("vllm:prefix_cache_queries_total"), val("vllm:prefix_cache_hits_total"); q != 1700 || h != 512 {
		t.Fatalf("queries %v hits %v, want 1700, 512", q, h)
	}
	// The running request holds its 2 full prompt blocks and 1 output
	// block (ceil(10/512)): 3 of 10.
	if u := val("vllm:kv_cache_usage_perc"); u != 0.3 {
		t.Fatalf("usage %v, want 0.3", u)
	}
	if r, w := val("vllm:num_requests_running"), val("vllm:num_requests_waiting"); r != 1 || w != 1 {
		t.Fatalf("running %v waiting %v, want 1, 1", r, w)
	}
}

// The replay socket answers [identity, "", start] with every buffered
// batch from start, in order, then the end marker (seq −1), as vLLM's does.
func TestPublisher_ReplaySocket(t *testing.T) {
	p, err := newEnginePublisher(EncodingPositional, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	blocks := []uint64{1, 2, 3}
	for i := range blocks {
		a := &Admission{Stored: []BlockRun{{Start: i, End: i + 1}}}
		if _, err := p.publishAdmission(blocks, a, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	d := zmq4.NewDealer(t.Context())
	defer d.Close()
	if err := d.Dial(p.ReplayEndpoint()); err != nil {
		t.Fatal(err)
	}
	if err := d.SendMulti(zmq4.NewMsgFrom([]byte{}, vllmpub.Seq(1))); err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for {
		msg, err := d.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if len(msg.Frames) != 2 {
			t.Fatalf("reply of %d frames, want [seq, payload]", len(msg.Frames))
		}
		seq := binary.BigEndian.Uint64(msg.Frames[0])
		if seq == ^uint64(0) {
			break
		}
		b, err := observe.DecodeBatch(msg.Frames[1])
		if err != nil || len(b.Events) != 1 || b.Events[0].BlockHashes[0] != p.engineHash(blocks[seq]) {
			t.Fatalf("replayed seq %d: %+v, %v", seq, b, err)
		}
		seqs = append(seqs, seq)
	}
	if !slices.Equal(seqs, []uint64{1, 2}) {
		t.Fatalf("replayed %v, want [1 2]", seqs)
	}
}

// The published frames stay byte for byte what they were when they were
// checked against vLLM's msgspec layout: bench/testdata holds the frames
// (hex, one message a line) of three admissions in both encodings. A
// deliberate change of the layout rewrites it with
// GOLDEN_UPDATE=1 go test ./bench -run TestPublisher_FramesMatchGolden.
func TestPublisher_FramesMatchGolden(t *testing.T) {
	var out strings.Builder
	for _, enc := range []Encoding{EncodingPositional, EncodingMap} {
		p, err := newEnginePublisher(enc, 99)
		if err != nil {
			t.Fatal(err)
		}
		sub := zmq4.NewSub(t.Context())
		if err := sub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
			t.Fatal(err)
		}
		if err := sub.Dial(p.Endpoint()); err != nil {
			t.Fatal(err)
		}
		if err := p.WaitSubscribed(t.Context(), 10*time.Second); err != nil {
			t.Fatal(err)
		}
		blocks := []uint64{1, 5, 6, 7, 0, 3}
		for _, a := range []*Admission{
			{Evicted: []uint64{3, 0}, Stored: []BlockRun{{Start: 0, End: 1}, {Start: 2, End: 4}}},
			{Stored: []BlockRun{{Start: 4, End: 6}}},
			{Evicted: []uint64{9}},
		} {
			if _, err := p.publishAdmission(blocks, a, time.Unix(1700000000, 123456789)); err != nil {
				t.Fatal(err)
			}
			msg, err := sub.Recv()
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range msg.Frames {
				out.WriteString(hex.EncodeToString(f) + " ")
			}
			out.WriteString("\n")
		}
		sub.Close()
		p.Close()
	}
	const golden = "testdata/published-batches.golden"
	if os.Getenv("GOLDEN_UPDATE") != "" {
		if err := os.WriteFile(golden, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != string(want) {
		t.Fatalf("published frames differ from %s:\n got %.300s…\nwant %.300s…", golden, out.String(), want)
	}
}
