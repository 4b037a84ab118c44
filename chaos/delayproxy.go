package chaos

import (
	"math"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// DelayProxy is a userspace TCP proxy that delays every byte by a one-way
// latency in each direction and emulates packet loss, for kernels without
// netem (sch_netem). A lost TCP segment is retransmitted after the
// retransmission timeout, and TCP delivers in order, so loss shows to the
// application as a stall of that segment and everything behind it: each
// chunk read is held back by an extra LossPenalty with the probability
// that at least one of its MSS-sized segments was lost. Delivery times
// never go backwards on a connection.
//
// Zero Delay and Loss forward unchanged. The fields may be changed while
// the proxy runs (SetImpairment).
type DelayProxy struct {
	ln     net.Listener
	target string

	delay   atomic.Int64 // one-way, ns
	loss    atomic.Uint64
	penalty atomic.Int64 // ns

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
	done  chan struct{}
}

// mss is the segment size the loss model counts (Ethernet MTU 1500 minus
// the IPv4 and TCP headers with timestamps).
const mss = 1448

// NewDelayProxy listens on listen (host:port, port 0 = any) and forwards
// every accepted connection to target.
func NewDelayProxy(listen, target string) (*DelayProxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	p := &DelayProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}, done: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listen address.
func (p *DelayProxy) Addr() string { return p.ln.Addr().String() }

// SetImpairment sets the one-way delay, the per-segment loss probability
// (0..1) and the stall a loss adds; penalty 0 = twice the delay plus
// 200 ms (a round trip plus Linux's minimum retransmission timeout).
func (p *DelayProxy) SetImpairment(delay time.Duration, loss float64, penalty time.Duration) {
	if penalty == 0 {
		penalty = 2*delay + 200*time.Millisecond
	}
	p.delay.Store(int64(delay))
	p.loss.Store(math.Float64bits(loss))
	p.penalty.Store(int64(penalty))
}

// Close stops accepting, closes every proxied connection and waits for
// the copiers.
func (p *DelayProxy) Close() {
	close(p.done)
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *DelayProxy) track(c net.Conn, add bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		select {
		case <-p.done:
			return false
		default:
		}
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
	return true
}

func (p *DelayProxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			in.Close()
			continue
		}
		if !p.track(in, true) || !p.track(out, true) {
			in.Close()
			out.Close()
			return
		}
		p.wg.Add(2)
		go p.pipe(in, out)
		go p.pipe(out, in)
	}
}

// chunk is data read at one time, due for delivery at due.
type chunk struct {
	b   []byte
	due time.Time
}

// pipe copies src to dst through a delay line: a reader stamps each chunk
// with its delivery time, a writer sleeps until then. Closing either side
// closes both.
func (p *DelayProxy) pipe(src, dst net.Conn) {
	defer p.wg.Done()
	line := make(chan chunk, 4096)
	go func() {
		defer close(line)
		var last time.Time
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				due := time.Now().Add(time.Duration(p.delay.Load()))
				if loss := math.Float64frombits(p.loss.Load()); loss > 0 {
					segs := (n + mss - 1) / mss
					if rand.Float64() < 1-math.Pow(1-loss, float64(segs)) {
						due = due.Add(time.Duration(p.penalty.Load()))
					}
				}
				if due.Before(last) {
					due = last
				}
				last = due
				line <- chunk{b: buf[:n], due: due}
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		src.Close()
		dst.Close()
		p.track(src, false)
		p.track(dst, false)
		for range line { // let the reader finish
		}
	}()
	for c := range line {
		if d := time.Until(c.due); d > 0 {
			select {
			case <-time.After(d):
			case <-p.done:
				return
			}
		}
		if _, err := dst.Write(c.b); err != nil {
			return
		}
	}
}
