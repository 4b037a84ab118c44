package client

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/internal/poll"
)

// pausableProxy relays TCP connections to a backend and, while paused,
// stops passing bytes either way: to the client, the node behind it looks
// like a process under `kill -STOP` (connections open, nothing answered,
// health checks included).
type pausableProxy struct {
	mu     sync.Mutex
	cond   *sync.Cond
	paused bool
	closed bool
	conns  []net.Conn
}

func startProxy(t *testing.T, backend string) (string, *pausableProxy) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pausableProxy{}
	p.cond = sync.NewCond(&p.mu)
	go func() {
		for {
			in, err := lis.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", backend)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			go p.pipe(out, in)
			go p.pipe(in, out)
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		p.mu.Lock()
		p.closed = true
		p.cond.Broadcast()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
	})
	return lis.Addr().String(), p
}

func (p *pausableProxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.paused && !p.closed {
				p.cond.Wait()
			}
			p.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *pausableProxy) setPaused(v bool) {
	p.mu.Lock()
	p.paused = v
	p.cond.Broadcast()
	p.mu.Unlock()
}

// attemptLog records every Ingest attempt the client makes, as the
// client's own interceptor sees it.
type attemptLog struct {
	mu sync.Mutex
	as []attemptRec
}

type attemptRec struct {
	addr, id   string
	code       codes.Code
	start, end time.Time
}

func (l *attemptLog) interceptor() grpc.DialOption {
	return grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		start := time.Now()
		err := invoker(ctx, method, req, reply, cc, opts...)
		if r, ok := req.(*pb.IngestRequest); ok {
			l.mu.Lock()
			l.as = append(l.as, attemptRec{addr: cc.Target(), id: r.RequestId, code: status.Code(err), start: start, end: time.Now()})
			l.mu.Unlock()
		}
		return err
	})
}

func (l *attemptLog) snapshot() []attemptRec {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.as)
}

// With the default Config, a node that stops answering (paused, like
// `kill -STOP`) costs a write about a second, not the whole pause: the
// attempt on it is abandoned when it fails a health check and retried on
// a healthy node with the same request id; the node is then skipped, so
// writes keep being acknowledged throughout; after it resumes, a probe
// brings it back.
func TestIngest_PausedNodeFailsOverWithinASecond(t *testing.T) {
	a, b, p := &fake{name: "a"}, &fake{name: "b"}, &fake{name: "p"}
	paddr, proxy := startProxy(t, serve(t, p))
	var log attemptLog
	c := newClient(t, Config{Addrs: []string{serve(t, a), serve(t, b), paddr}, DialOptions: []grpc.DialOption{log.interceptor()}})
	ev := []*pb.BlockEvent{{}}
	for i := 0; i < 6; i++ { // connect to every node first, as a running gateway has
		if _, err := c.Ingest(context.Background(), &pb.IngestRequest{Events: ev}); err != nil {
			t.Fatalf("warm-up write %d: %v", i, err)
		}
	}
	if len(p.ingestIDs()) == 0 {
		t.Fatal("warm-up never reached the proxied node")
	}

	const pause = 4 * time.Second
	proxy.setPaused(true)
	paused := time.Now()
	type result struct {
		start, end time.Time
		err        error
	}
	var mu sync.Mutex
	var results []result
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(paused) < pause {
				start := time.Now()
				_, err := c.Ingest(context.Background(), &pb.IngestRequest{Events: ev})
				mu.Lock()
				results = append(results, result{start, time.Now(), err})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	proxy.setPaused(false)

	var slowest time.Duration
	var acks []time.Time
	for _, r := range results {
		if r.err != nil {
			t.Errorf("write started %v into the pause failed: %v", r.start.Sub(paused).Round(time.Millisecond), r.err)
			continue
		}
		slowest = max(slowest, r.end.Sub(r.start))
		acks = append(acks, r.end)
	}
	slices.SortFunc(acks, func(x, y time.Time) int { return x.Compare(y) })
	gap, last := time.Duration(0), paused
	for _, at := range acks {
		gap, last = max(gap, at.Sub(last)), at
	}
	t.Logf("%d writes during a %v pause; slowest %v; longest gap between acknowledgements %v; stats %+v",
		len(results), pause, slowest.Round(time.Millisecond), gap.Round(time.Millisecond), c.Stats())
	if slowest > 1800*time.Millisecond {
		t.Errorf("slowest write took %v; want about WriteProbeAfter+ProbeTimeout (1 s)", slowest)
	}
	if gap > 1500*time.Millisecond {
		t.Errorf("no write acknowledged for %v during the pause", gap)
	}

	// Every attempt that the paused node left unanswered was retried, with
	// the same request id, on a healthy node that acknowledged it.
	recs := log.snapshot()
	var hung int
	for i, r := range recs {
		// The interceptor sees the abandoned call as CANCELED (the client
		// cancels it) or DEADLINE_EXCEEDED (WriteAttemptTimeout).
		if r.addr != paddr || r.code == codes.OK || r.start.Before(paused) {
			continue
		}
		hung++
		t.Logf("attempt on the paused node abandoned after %v", r.end.Sub(r.start).Round(time.Millisecond))
		if !slices.ContainsFunc(recs[i+1:], func(x attemptRec) bool { return x.id == r.id && x.addr != paddr && x.code == codes.OK }) {
			t.Errorf("write %s timed out on the paused node and was not acknowledged under the same id elsewhere", r.id)
		}
	}
	if hung == 0 {
		t.Error("no attempt hit the paused node")
	}
	if hung > 8 {
		t.Errorf("%d attempts hit the paused node in %v; want it skipped after the first", hung, pause)
	}
	if st := c.Stats(); st.WriteTimeouts != uint64(hung) {
		t.Errorf("Stats.WriteTimeouts = %d, want %d", st.WriteTimeouts, hung)
	}

	// Resumed, the node is probed again and takes writes.
	before := len(p.ingestIDs())
	poll.Eventually(t, 15*time.Second, 20*time.Millisecond, func() (bool, string) {
		if _, err := c.Ingest(context.Background(), &pb.IngestRequest{Events: ev}); err != nil {
			t.Fatalf("write after resume: %v", err)
		}
		n := len(p.ingestIDs())
		return n > before, fmt.Sprintf("the resumed node took %d writes, as many as before its pause", n)
	})
}

// A node that answers health checks but never answers the write (a
// follower whose forward is stuck) is given WriteAttemptTimeout; the write
// is then retried elsewhere with the same id, and the node is skipped by
// later writes, as after UNAVAILABLE.
func TestIngest_AttemptTimeoutRetriesElsewhereAndSkipsNode(t *testing.T) {
	stuck, good := &fake{name: "stuck", hangIngest: true}, &fake{name: "good"}
	c := newClient(t, Config{Addrs: []string{serve(t, stuck), serve(t, good)},
		WriteAttemptTimeout: 300 * time.Millisecond, FailBackoff: time.Hour})
	for i := 0; i < 10; i++ {
		start := time.Now()
		if _, err := c.Ingest(context.Background(), &pb.IngestRequest{}); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		if el := time.Since(start); el > 2*time.Second {
			t.Fatalf("write %d took %v; attempt timeout 300ms", i, el)
		}
	}
	sids, gids := stuck.ingestIDs(), good.ingestIDs()
	if len(sids) != 1 {
		t.Fatalf("stuck node got %d attempts, want 1 (then skipped)", len(sids))
	}
	if len(gids) != 10 || !slices.Contains(gids, sids[0]) {
		t.Fatalf("good node ids %v: want all 10 writes, including the retried %s", gids, sids[0])
	}
	if st := c.Stats(); st.WriteTimeouts != 1 || st.WriteRetries != 1 {
		t.Errorf("stats %+v: want 1 timeout, 1 retry", st)
	}
}

// A refused request is not retried and does not make writes skip the node
// that refused it.
func TestIngest_RequestErrorDoesNotSkipNode(t *testing.T) {
	a := &fake{name: "a", ingestErr: []error{status.Error(codes.InvalidArgument, "too many events")}}
	b := &fake{name: "b", ingestErr: []error{status.Error(codes.InvalidArgument, "too many events")}}
	c := newClient(t, Config{Addrs: []string{serve(t, a), serve(t, b)}, FailBackoff: time.Hour})
	var refused int
	for i := 0; i < 6; i++ {
		_, err := c.Ingest(context.Background(), &pb.IngestRequest{})
		if status.Code(err) == codes.InvalidArgument {
			refused++
		} else if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if refused != 2 || len(a.ingestIDs()) != 3 || len(b.ingestIDs()) != 3 {
		t.Fatalf("refused %d, calls a=%d b=%d; want 2 refused, 3 calls each", refused, len(a.ingestIDs()), len(b.ingestIDs()))
	}
}

// The retry budget bounds the whole write: no attempt runs past it.
func TestIngest_AttemptNeverOutlivesRetryBudget(t *testing.T) {
	stuck := &fake{hangIngest: true}
	c := newClient(t, Config{Addrs: []string{serve(t, stuck)}, WriteRetry: 400 * time.Millisecond,
		WriteAttemptTimeout: time.Hour, WriteProbeAfter: -1})
	start := time.Now()
	_, err := c.Ingest(context.Background(), &pb.IngestRequest{})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("err = %v, want DEADLINE_EXCEEDED", err)
	}
	if el := time.Since(start); el < 400*time.Millisecond || el > 2*time.Second {
		t.Fatalf("gave up after %v, budget 400ms", el)
	}
}
