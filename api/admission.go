package api

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Default admission bounds on write work in flight (Ingest, IngestStream,
// ReportReplicaStats): a write holds its share from decoded to committed.
// Every write admitted joins the next group commit, so the work in flight
// sets how long a commit takes for everyone: one connection may hold 16
// writes (with group commit that is over a thousand writes a second per
// connection), so a client flooding many streams on a few connections
// keeps the commits small and others' writes quick; the bytes bounds cap
// the memory writes can pin.
const (
	DefaultMaxInflightWrites         = 512
	DefaultMaxInflightWriteBytes     = 128 << 20
	DefaultMaxConnInflightWrites     = 16
	DefaultMaxConnInflightWriteBytes = 16 << 20
	// AdmissionWait is how long a write waits for room before it is
	// refused with RESOURCE_EXHAUSTED: a stream that waits stops reading,
	// which is backpressure on its client through HTTP/2 flow control.
	AdmissionWait = 500 * time.Millisecond
	// AdmissionRetryAfter is the retry delay a refusal advertises
	// (google.rpc.RetryInfo).
	AdmissionRetryAfter = 100 * time.Millisecond
)

// AdmissionLimits bounds write work in flight on one node; zero fields
// take the defaults above.
type AdmissionLimits struct {
	// MaxWrites and MaxBytes bound the whole node (requests, and their
	// encoded protobuf bytes).
	MaxWrites, MaxBytes int64
	// MaxConnWrites and MaxConnBytes bound one client connection (its
	// peer address), whatever the number of streams on it.
	MaxConnWrites, MaxConnBytes int64
}

func (l AdmissionLimits) withDefaults() AdmissionLimits {
	if l.MaxWrites <= 0 {
		l.MaxWrites = DefaultMaxInflightWrites
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxInflightWriteBytes
	}
	if l.MaxConnWrites <= 0 {
		l.MaxConnWrites = min(DefaultMaxConnInflightWrites, l.MaxWrites)
	}
	if l.MaxConnBytes <= 0 {
		l.MaxConnBytes = min(DefaultMaxConnInflightWriteBytes, l.MaxBytes)
	}
	return l
}

// load is write work in flight: requests and bytes.
type load struct{ writes, bytes int64 }

// admission is the node's write admission control. A request larger than
// a bound counts as the bound's size, so it is admitted once the others
// have drained, never refused forever (the size limits of contract §9.1 refuse
// the truly oversized ones before this).
type admission struct {
	lim   AdmissionLimits
	mu    sync.Mutex
	total load
	conns map[string]*load
	freed chan struct{} // closed and replaced whenever work is released
}

func newAdmission(l AdmissionLimits) *admission {
	return &admission{lim: l.withDefaults(), conns: map[string]*load{}, freed: make(chan struct{})}
}

// tryLocked admits n bytes from conn if the bounds allow it.
func (a *admission) tryLocked(conn string, n int64) bool {
	c := a.conns[conn]
	if c == nil {
		c = &load{}
	}
	if a.total.writes >= a.lim.MaxWrites || a.total.bytes+n > a.lim.MaxBytes ||
		c.writes >= a.lim.MaxConnWrites || c.bytes+n > a.lim.MaxConnBytes {
		return false
	}
	c.writes++
	c.bytes += n
	a.conns[conn] = c
	a.total.writes++
	a.total.bytes += n
	return true
}

// acquire admits a write of n bytes from ctx's connection, waiting up to
// AdmissionWait for room. It returns the release function, or a
// RESOURCE_EXHAUSTED status error carrying a RetryInfo of
// AdmissionRetryAfter. ctx ending while it waits returns ctx's error.
func (a *admission) acquire(ctx context.Context, n int64) (func(), error) {
	conn := "local"
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		conn = p.Addr.String()
	}
	n = min(n, a.lim.MaxBytes, a.lim.MaxConnBytes)
	timer := time.NewTimer(AdmissionWait)
	defer timer.Stop()
	for {
		a.mu.Lock()
		if a.tryLocked(conn, n) {
			a.mu.Unlock()
			return func() { a.release(conn, n) }, nil
		}
		freed := a.freed
		var c load
		if cl := a.conns[conn]; cl != nil {
			c = *cl
		}
		tot := a.total
		a.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timer.C:
			return nil, a.refusal(c, tot, n)
		}
	}
}

func (a *admission) release(conn string, n int64) {
	a.mu.Lock()
	c := a.conns[conn]
	c.writes--
	c.bytes -= n
	if c.writes == 0 {
		delete(a.conns, conn)
	}
	a.total.writes--
	a.total.bytes -= n
	close(a.freed)
	a.freed = make(chan struct{})
	a.mu.Unlock()
}

// refusal names the bound that was full and how long to wait.
func (a *admission) refusal(c, tot load, n int64) error {
	var what string
	switch {
	case c.writes >= a.lim.MaxConnWrites:
		what = fmt.Sprintf("this connection has %d writes in flight (limit %d per connection)", c.writes, a.lim.MaxConnWrites)
	case tot.writes >= a.lim.MaxWrites:
		what = fmt.Sprintf("the node has %d writes in flight (limit %d)", tot.writes, a.lim.MaxWrites)
	case c.bytes+n > a.lim.MaxConnBytes:
		what = fmt.Sprintf("this connection has %d bytes of writes in flight (limit %d per connection)", c.bytes, a.lim.MaxConnBytes)
	default:
		what = fmt.Sprintf("the node has %d bytes of writes in flight (limit %d)", tot.bytes, a.lim.MaxBytes)
	}
	st := status.New(codes.ResourceExhausted, "write not admitted within "+AdmissionWait.String()+": "+what+"; retry after "+AdmissionRetryAfter.String())
	if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(AdmissionRetryAfter)}); err == nil {
		st = d
	}
	return st.Err()
}

// inflight is the node's write work in flight now (for tests and
// metrics).
func (a *admission) inflight() (writes, bytes int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.total.writes, a.total.bytes
}
