package observe

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/internal/syncbuf"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	ot "github.com/inference-cache/inference-cache/observe/observetest"
)

// freeListen returns tcp://127.0.0.1:PORT with PORT..PORT+n-1 free when
// checked (the subscriber binds them a moment later).
func freeListen(t *testing.T, n int) string {
	t.Helper()
	for try := 0; try < 50; try++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		ok := port+n-1 <= 65535
		for r := 1; r < n && ok; r++ {
			x, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+r))
			if err != nil {
				ok = false
				break
			}
			x.Close()
		}
		if ok {
			return "tcp://127.0.0.1:" + strconv.Itoa(port)
		}
	}
	t.Fatal("no free loopback port range")
	return ""
}

// connecting is a publisher in connect mode (llm-d's topology) publishing
// on topic to the subscriber's listen endpoint.
func connecting(t *testing.T, endpoint, topic string, replay bool) *ot.Publisher {
	t.Helper()
	p, err := ot.NewConnectingPublisher(endpoint, topic, replay)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func waitSubscribed(t *testing.T, ps ...*ot.Publisher) {
	t.Helper()
	for _, p := range ps {
		if err := p.WaitSubscribed(t.Context(), 10*time.Second); err != nil {
			t.Fatalf("topic %q: %v", p.Topic, err)
		}
	}
}

// listenEngine is an engine entry without endpoint, served by listen.
func listenEngine(id string) EngineConfig {
	return EngineConfig{ReplicaID: id, ModelID: "m", TenantID: "t", HashScheme: "vllm", BlockSize: 4}
}

func textLog(buf *syncbuf.Buffer) *slog.Logger { return slog.New(slog.NewTextHandler(buf, nil)) }

// waitUnknown waits until m counts want listen-socket messages of no
// engine.
func waitUnknown(t *testing.T, m *Metrics, want float64) {
	t.Helper()
	poll.Eventually(t, 10*time.Second, 5*time.Millisecond, func() (bool, string) {
		n := testutil.ToFloat64(m.ListenUnknownMessages)
		return n == want, fmt.Sprintf("%v messages of no engine counted, want %v", n, want)
	})
}

// eventsOf returns the events of replica id, in order, once there are n.
func eventsOf(t *testing.T, sink *fakeSink, id string, n int) []*pb.BlockEvent {
	t.Helper()
	var got []*pb.BlockEvent
	poll.Eventually(t, 10*time.Second, 5*time.Millisecond, func() (bool, string) {
		got = got[:0]
		for _, e := range sink.snapshot() {
			if e.GetReplicaId() == id {
				got = append(got, e)
			}
		}
		return len(got) >= n, fmt.Sprintf("replica %s: %d events, want %d: %v", id, len(got), n, kinds(got))
	})
	return got
}

// Engines connect their PUB sockets to the subscriber's one listen socket
// and are told apart by topic: pod-a by topic_pattern's pod group (llm-d's
// kv@<pod>@<model>), pod-b by its exact topic. Each keeps its own sequence
// (both start at seq 0: no restart is seen), and pod-b's gap is replayed
// from pod-b's own replay socket. A third, unlisted publisher is counted
// and logged once, and its events reach no replica.
func TestListen_ConnectingEnginesAreIndexedPerEngineAndUnknownCounted(t *testing.T) {
	listen := freeListen(t, 1)
	a := connecting(t, listen, "kv@pod-a@qwen3-8b", false)
	b := connecting(t, listen, "kv@pod-b@qwen3-8b", true)
	b.SetReplyStyle(ot.ReplyThreeFrames)
	z := connecting(t, listen, "kv@pod-z@qwen3-8b", false)
	ea, eb := listenEngine("a"), listenEngine("b")
	ea.Pod = "pod-a"
	eb.Topic, eb.ReplayEndpoint = "kv@pod-b@qwen3-8b", b.ReplayEndpoint()
	sink := &fakeSink{}
	var logs syncbuf.Buffer
	_, m := startSubscriberLog(t, &Config{Listen: listen, Engines: []EngineConfig{ea, eb}}, sink, textLog(&logs))
	waitSubscribed(t, a, b, z)

	x, y := ot.Tokens(0, 8), ot.Tokens(100, 8)
	mustPublish(t, a, ot.Batch(tTS, -1, ot.Stored(ot.Hashes(1), nil, x[:4], 4, nil, nil, nil)))         // a seq 0
	mustPublish(t, b, ot.Batch(tTS, -1, ot.Stored(ot.Hashes(11), nil, y[:4], 4, nil, nil, nil)))        // b seq 0
	mustPublish(t, a, ot.Batch(tTS, -1, ot.Stored(ot.Hashes(2), uint64(1), x[4:], 4, nil, nil, nil)))   // a seq 1
	b.Skip(ot.Batch(tTS, -1, ot.Stored(ot.Hashes(12), uint64(11), y[4:], 4, nil, nil, nil)))            // b seq 1: lost live
	mustPublish(t, b, ot.Batch(tTS, -1, ot.Removed(ot.Hashes(11), nil)))                                // b seq 2
	mustPublish(t, z, ot.Batch(tTS, -1, ot.Stored(ot.Hashes(91), nil, x[:4], 4, nil, nil, nil)))        // unknown
	mustPublish(t, z, ot.Batch(tTS, -1, ot.Stored(ot.Hashes(92), uint64(91), x[4:], 4, nil, nil, nil))) // unknown

	evA := eventsOf(t, sink, "a", 3)
	if got, want := kinds(evA), []string{"CLEARED:a", "STORED:a", "STORED:a"}; !equalStrings(got, want) {
		t.Fatalf("engine a: %v, want %v", got, want)
	}
	if got := evA[2].GetBlockHashes(); len(got) != 1 || got[0] != fps(t, x, 1)[0] {
		t.Fatalf("engine a's second block %x, want %x (chained on its first)", got, fps(t, x, 1))
	}
	evB := eventsOf(t, sink, "b", 4)
	if got, want := kinds(evB), []string{"CLEARED:b", "STORED:b", "STORED:b", "REMOVED:b"}; !equalStrings(got, want) {
		t.Fatalf("engine b: %v, want %v (seq 1 replayed before seq 2)", got, want)
	}
	if got := evB[2].GetBlockHashes(); len(got) != 1 || got[0] != fps(t, y, 1)[0] {
		t.Fatalf("engine b's replayed block %x, want %x", got, fps(t, y, 1))
	}
	for _, id := range []string{"a", "b"} {
		if r := testutil.ToFloat64(m.Restarts.WithLabelValues(id)); r != 0 {
			t.Errorf("engine %s: %v restarts: the engines' sequences were mixed", id, r)
		}
	}
	poll.Eventually(t, 10*time.Second, 5*time.Millisecond, func() (bool, string) {
		n := testutil.ToFloat64(m.Replays.WithLabelValues("b", "complete"))
		return n == 1, fmt.Sprintf("engine b: %v complete replays counted, want 1", n)
	})
	if g := testutil.ToFloat64(m.Clears.WithLabelValues("b", "gap")); g != 0 {
		t.Errorf("engine b: %v gap clears, want 0 (the gap was replayed)", g)
	}
	waitUnknown(t, m, 2)
	if n := testutil.ToFloat64(m.ListenUnknownTopics); n != 1 {
		t.Errorf("unknown topics = %v, want 1", n)
	}
	l := logs.String()
	if n := strings.Count(l, `topic=kv@pod-z@qwen3-8b`); n != 1 || !strings.Contains(l, "level=WARN") || !strings.Contains(l, "pod=pod-z") {
		t.Errorf("unknown topic logged %d times, want once at WARN naming topic and pod:\n%s", n, l)
	}
	for _, e := range sink.snapshot() {
		if id := e.GetReplicaId(); id != "a" && id != "b" {
			t.Errorf("event for replica %q reached the sink", id)
		}
	}
}

// A connecting publisher that sends parent_block_hash = 0 for a chain's
// first block (llm-d's vLLM simulator does) starts a chain: the block is
// indexed with no tokens before it, and its child chains on it.
func TestListen_ParentZeroStartsAChainEndToEnd(t *testing.T) {
	listen := freeListen(t, 1)
	p := connecting(t, listen, "kv@sim-0@qwen3-8b", false)
	e := listenEngine("sim")
	e.Pod = "sim-0"
	sink := &fakeSink{}
	_, m := startSubscriber(t, &Config{Listen: listen, Engines: []EngineConfig{e}}, sink)
	waitSubscribed(t, p)
	x := ot.Tokens(500, 8)
	mustPublish(t, p, ot.Batch(tTS, -1, ot.Stored(ot.Hashes(7001), uint64(0), x[:4], 4, nil, "GPU", nil)))
	mustPublish(t, p, ot.Batch(tTS, -1, ot.Stored(ot.Hashes(7002), uint64(7001), x[4:], 4, nil, "GPU", nil)))
	evs := eventsOf(t, sink, "sim", 3)
	if got, want := kinds(evs), []string{"CLEARED:sim", "STORED:sim", "STORED:sim"}; !equalStrings(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	want := fps(t, x, 0)
	if got := evs[1].GetBlockHashes(); len(got) != 1 || got[0] != want[0] || evs[1].GetPrefixTokensBefore() != 0 {
		t.Fatalf("first block %x after %d tokens, want %x after 0 (parent 0 starts a chain)", got, evs[1].GetPrefixTokensBefore(), want[:1])
	}
	if got := evs[2].GetBlockHashes(); len(got) != 1 || got[0] != want[1] || evs[2].GetPrefixTokensBefore() != 4 {
		t.Fatalf("second block %x after %d tokens, want %x after 4", got, evs[2].GetPrefixTokensBefore(), want[1:])
	}
	if u := testutil.ToFloat64(m.UnknownParent.WithLabelValues("sim")); u != 0 {
		t.Fatalf("unknown parent = %v, want 0", u)
	}
}

// An engine of data_parallel_size 2 in connect mode: rank r connects to
// the listen port + r with the same topic, and each rank is its own
// replica with its own sequence.
func TestListen_DataParallelRanksConnectToPortPlusRank(t *testing.T) {
	listen := freeListen(t, 2)
	i := strings.LastIndexByte(listen, ':')
	port, _ := strconv.Atoi(listen[i+1:])
	r0 := connecting(t, listen, "kv@pod-d@m", false)
	r1 := connecting(t, listen[:i+1]+strconv.Itoa(port+1), "kv@pod-d@m", false)
	e := listenEngine("d")
	e.Pod, e.DataParallelSize = "pod-d", 2
	sink := &fakeSink{}
	_, m := startSubscriber(t, &Config{Listen: listen, Engines: []EngineConfig{e}}, sink)
	waitSubscribed(t, r0, r1)
	x := ot.Tokens(0, 4)
	mustPublish(t, r0, ot.Batch(tTS, -1, ot.Stored(ot.Hashes(1), nil, x, 4, nil, nil, nil)))
	mustPublish(t, r1, ot.Batch(tTS, -1, ot.Stored(ot.Hashes(1), nil, x, 4, nil, nil, nil)))
	mustPublish(t, r1, ot.Batch(tTS, -1, ot.Removed(ot.Hashes(1), nil)))
	if got, want := kinds(eventsOf(t, sink, "d", 2)), []string{"CLEARED:d", "STORED:d"}; !equalStrings(got, want) {
		t.Fatalf("rank 0: %v, want %v", got, want)
	}
	if got, want := kinds(eventsOf(t, sink, "d-dp1", 3)), []string{"CLEARED:d-dp1", "STORED:d-dp1", "REMOVED:d-dp1"}; !equalStrings(got, want) {
		t.Fatalf("rank 1: %v, want %v", got, want)
	}
	if r := testutil.ToFloat64(m.Restarts.WithLabelValues("d")); r != 0 {
		t.Fatalf("restarts = %v: the ranks' sequences were mixed", r)
	}
}

// Reload (SIGHUP) in listen mode: an entry added for a publisher that was
// unknown starts indexing it; an entry removed has its replica cleared and
// its publisher becomes unknown; an unchanged entry keeps running.
func TestListen_ReloadMapsAndUnmapsPublishers(t *testing.T) {
	listen := freeListen(t, 1)
	a := connecting(t, listen, "kv@pod-a@m", false)
	c := connecting(t, listen, "kv@pod-c@m", false)
	ea, ec := listenEngine("a"), listenEngine("c")
	ea.Pod, ec.Topic = "pod-a", "kv@pod-c@m"
	sink := &fakeSink{}
	var logs syncbuf.Buffer
	s, m := startSubscriberLog(t, &Config{Listen: listen, Engines: []EngineConfig{ea}}, sink, textLog(&logs))
	waitSubscribed(t, a, c)
	x := ot.Tokens(0, 4)
	mustPublish(t, c, ot.Batch(tTS, -1, ot.Stored(ot.Hashes(1), nil, x, 4, nil, nil, nil)))
	waitUnknown(t, m, 1) // c's message
	mustPublish(t, a, ot.Batch(tTS, -1, ot.Stored(ot.Hashes(1), nil, x, 4, nil, nil, nil)))
	eventsOf(t, sink, "a", 2)

	cfg := &Config{Listen: listen, Engines: []EngineConfig{ea, ec}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	s.Reload(cfg)
	poll.Eventually(t, 10*time.Second, 5*time.Millisecond, func() (bool, string) {
		l := logs.String()
		return strings.Contains(l, "engine=c"), "no log of engine c added by the reload:\n" + l
	})
	// seq 1, the first c's new stream sees: the replica starts cleared.
	mustPublish(t, c, ot.Batch(tTS, -1, ot.Stored(ot.Hashes(2), nil, x, 4, nil, nil, nil)))
	if got, want := kinds(eventsOf(t, sink, "c", 2)), []string{"CLEARED:c", "STORED:c"}; !equalStrings(got, want) {
		t.Fatalf("engine c after the reload: %v, want %v", got, want)
	}
	if got := kinds(eventsOf(t, sink, "a", 2)); len(got) != 2 {
		t.Fatalf("unchanged engine a restarted on reload: %v", got)
	}

	cfg = &Config{Listen: listen, Engines: []EngineConfig{ec}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	s.Reload(cfg)
	if got, want := kinds(eventsOf(t, sink, "a", 3)), []string{"CLEARED:a", "STORED:a", "CLEARED:a"}; !equalStrings(got, want) {
		t.Fatalf("engine a after its removal: %v, want %v", got, want)
	}
	if n := testutil.ToFloat64(m.Clears.WithLabelValues("a", "config_removed")); n != 1 {
		t.Fatalf("config_removed clears of a = %v, want 1", n)
	}
	mustPublish(t, a, ot.Batch(tTS, -1, ot.Removed(ot.Hashes(1), nil)))
	waitUnknown(t, m, 2) // a's message once a is removed
	if n := testutil.ToFloat64(m.ListenUnknownTopics); n != 2 {
		t.Fatalf("unknown topics = %v, want 2 (c before the reload, a after)", n)
	}
}

// A reload that moves listen to another address rebinds: the engines
// served by the old socket are stopped and cleared, and start again on the
// new one, where their publishers now connect.
func TestListen_ReloadToAnotherAddressRebinds(t *testing.T) {
	old, moved := freeListen(t, 1), freeListen(t, 1)
	for moved == old {
		moved = freeListen(t, 1)
	}
	p := connecting(t, old, "kv@pod-a@m", false)
	e := listenEngine("a")
	e.Pod = "pod-a"
	sink := &fakeSink{}
	s, m := startSubscriber(t, &Config{Listen: old, Engines: []EngineConfig{e}}, sink)
	waitSubscribed(t, p)
	x := ot.Tokens(0, 4)
	mustPublish(t, p, ot.Batch(tTS, -1, ot.Stored(ot.Hashes(1), nil, x, 4, nil, nil, nil)))
	eventsOf(t, sink, "a", 2)

	cfg := &Config{Listen: moved, Engines: []EngineConfig{e}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	s.Reload(cfg)
	if got, want := kinds(eventsOf(t, sink, "a", 3)), []string{"CLEARED:a", "STORED:a", "CLEARED:a"}; !equalStrings(got, want) {
		t.Fatalf("after the move: %v, want %v", got, want)
	}
	q := connecting(t, moved, "kv@pod-a@m", false) // the engine, reconfigured
	waitSubscribed(t, q)
	mustPublish(t, q, ot.Batch(tTS, -1, ot.Stored(ot.Hashes(2), nil, x, 4, nil, nil, nil)))
	if got, want := kinds(eventsOf(t, sink, "a", 5)[3:]), []string{"CLEARED:a", "STORED:a"}; !equalStrings(got, want) {
		t.Fatalf("on the new address: %v, want %v", got, want)
	}
	if n := testutil.ToFloat64(m.ListenUnknownMessages); n != 0 {
		t.Fatalf("unknown messages = %v, want 0", n)
	}
}

// A flood of messages that are not [topic, seq, payload] is counted one
// by one and logged once per 10 s per stream (contract §6.9), not once
// per message.
func TestListen_MalformedMessagesAreCountedEachAndLoggedOnce(t *testing.T) {
	var logs syncbuf.Buffer
	m := NewMetrics(prometheus.NewRegistry())
	em := m.forEngine("e1")
	live := make(chan liveMsg, 1)
	r := &route{ch: live, done: make(chan struct{}), m: em, log: slog.New(slog.NewTextHandler(&logs, nil)), drops: &dropLog{}}
	l := &listener{topics: map[routeKey]*route{{0, "kv"}: r}}
	for i := 0; i < 500; i++ {
		l.dispatch(0, [][]byte{[]byte("kv"), []byte("not an 8-byte seq")})
	}
	if n := testutil.ToFloat64(em.decodeErrors); n != 500 {
		t.Errorf("decode_errors_total %v, want 500", n)
	}
	if n := strings.Count(logs.String(), "is not [topic, seq, payload]"); n != 1 {
		t.Errorf("%d log lines for 500 malformed messages, want 1:\n%s", n, logs.String())
	}
}
