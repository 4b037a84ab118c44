package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/inference-cache/inference-cache/connlimit"
	"github.com/inference-cache/inference-cache/openai"
)

// Defaults of the bounds on request bodies.
const (
	// DefaultMaxBodyBytesInFlight bounds the bytes of the request bodies
	// the proxy holds at once (read, being decoded and keyed, or kept
	// for a retry until the answer starts): past it a request gets a 429
	// with Retry-After. Three bodies at the 32 MiB limit fit.
	DefaultMaxBodyBytesInFlight = 96 << 20
	// DefaultBodyTimeout bounds the reading of one request body, start to
	// end: a client that trickles it gets a 408.
	DefaultBodyTimeout = 60 * time.Second
	// DefaultBodyIdleTimeout bounds the wait for the next bytes of a
	// request body: a client that stops sending it gets a 408.
	DefaultBodyIdleTimeout = 10 * time.Second
)

// Large bodies: keying one (decode, render, tokenize) takes several times
// its size in transient memory, so bodies of at least largeBody bytes are
// keyed a few at a time, within largeBodyBudget bytes together, while
// ordinary bodies never wait. After a large body's request the heap is
// returned to the system (freeAfterLarge).
const (
	largeBody       = 1 << 20
	largeBodyBudget = 40 << 20
)

// retryAfterSeconds is the Retry-After of a 429 for bodies in flight.
const retryAfterSeconds = "1"

// admission bounds the request bodies in flight and the keying of large
// ones.
type admission struct {
	gcMu       sync.Mutex
	gcHolders  int
	gcPrevious int
	inFlight   *semaphore.Weighted
	maxBytes   int64
	large      *semaphore.Weighted
	freeing    atomic.Bool
	freeMu     sync.Mutex
	freeOSHook func() // debug.FreeOSMemory; replaced in tests
}

func newAdmission(maxBytes int64) *admission {
	return &admission{inFlight: semaphore.NewWeighted(maxBytes), maxBytes: maxBytes,
		large: semaphore.NewWeighted(largeBodyBudget), freeOSHook: debug.FreeOSMemory}
}

// errBusy is the 429 of a body that does not fit in the bytes in flight.
func (a *admission) errBusy(n int64) *openai.Error {
	return &openai.Error{Status: http.StatusTooManyRequests, Message: fmt.Sprintf(
		"the proxy holds its limit of %d bytes of request bodies in flight; this body of %d bytes does not fit: retry after %s s",
		a.maxBytes, n, retryAfterSeconds)}
}

// keyingGCPercent is the collector's GOGC while a large body is keyed:
// rendering it makes several transient copies of its text, which the
// default GOGC of 100 would let grow to twice the live heap before a
// collection.
const keyingGCPercent = 20

// tightenGC sets the collector to keyingGCPercent until the matching
// relaxGC (nested calls share one setting), restoring the previous
// GOGC after the last.
func (a *admission) tightenGC() {
	a.gcMu.Lock()
	defer a.gcMu.Unlock()
	if a.gcHolders == 0 {
		a.gcPrevious = debug.SetGCPercent(keyingGCPercent)
	}
	a.gcHolders++
}

// relaxGC ends a tightenGC.
func (a *admission) relaxGC() {
	a.gcMu.Lock()
	defer a.gcMu.Unlock()
	if a.gcHolders--; a.gcHolders == 0 {
		debug.SetGCPercent(a.gcPrevious)
	}
}

// freeAfterLarge returns the heap to the system once the large request
// that called it is done, at most one at a time (a spike of large bodies
// does not queue full collections).
func (a *admission) freeAfterLarge() {
	if !a.freeing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		a.freeMu.Lock()
		defer a.freeMu.Unlock()
		a.freeing.Store(false)
		a.freeOSHook()
	}()
}

// errBodyTimeout is the read error of a body past its timeouts.
var errBodyTimeout = errors.New("request body read timed out")

// bodyReader reads a request body within an idle and a total timeout by
// moving the connection's read deadline before each read, and takes the
// bytes it reads from the in-flight budget as they arrive (a body
// without a Content-Length).
type bodyReader struct {
	ctx      context.Context // the request's: its connection waits while a read blocks
	r        io.Reader
	rc       *http.ResponseController
	idle     time.Duration
	deadline time.Time           // the total timeout's end; zero = none
	budget   *semaphore.Weighted // nil: the bytes were taken up front
	taken    int64               // bytes taken from budget
}

// errOverBudget is the read error of a body without a Content-Length
// whose bytes no longer fit in the bytes in flight.
var errOverBudget = errors.New("request body over the bytes in flight")

// errDeadline is the error of a read past the connection's deadline.
var errDeadline = os.ErrDeadlineExceeded

func (b *bodyReader) Read(p []byte) (int, error) {
	if b.idle > 0 || !b.deadline.IsZero() {
		d := b.deadline
		if b.idle > 0 {
			if next := time.Now().Add(b.idle); d.IsZero() || next.Before(d) {
				d = next
			}
		}
		_ = b.rc.SetReadDeadline(d)
	}
	connlimit.Waiting(b.ctx, true)
	n, err := b.r.Read(p)
	if err != nil && errors.Is(err, errDeadline) {
		return n, errBodyTimeout
	}
	if n > 0 && b.budget != nil {
		if !b.budget.TryAcquire(int64(n)) {
			return n, errOverBudget
		}
		b.taken += int64(n)
	}
	return n, err
}
