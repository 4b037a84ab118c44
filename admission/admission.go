// Package admission bounds what a gateway's request bodies cost in
// memory: the bytes of the bodies held at once (a body that does not fit
// is refused, 429 with Retry-After for the proxy, RESOURCE_EXHAUSTED's
// HTTP twin for the picker), and the keying (decode, render, tokenize)
// of large bodies, which takes several times a body's size in transient
// copies: large bodies are keyed a few at a time, with the collector
// tightened meanwhile, and the heap is returned to the system after them.
// The proxy and the endpoint picker share it (contract §12, proxy;
// §14, endpoint picker).
package admission

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/semaphore"
)

// Defaults and fixed bounds.
const (
	// DefaultMaxBytesInFlight is the default bound on the bytes of the
	// request bodies held at once: three bodies at the 32 MiB body limit
	// fit.
	DefaultMaxBytesInFlight = 96 << 20
	// LargeBody is the size from which a body's keying waits its turn
	// within LargeBudget: below it a body's keying costs little and never
	// waits.
	LargeBody = 1 << 20
	// LargeBudget is the bytes of large bodies keyed at once: one body at
	// the 32 MiB limit, or several smaller ones.
	LargeBudget = 40 << 20
	// KeyingGCPercent is the collector's GOGC while a large body is
	// keyed: rendering it makes several transient copies of its text,
	// which the default GOGC of 100 would let grow to twice the live heap
	// before a collection.
	KeyingGCPercent = 10
	// RetryAfterSeconds is the Retry-After of a refused body, in seconds.
	RetryAfterSeconds = 1
)

// Controller admits request bodies. Safe for concurrent use.
type Controller struct {
	max      int64
	inFlight *semaphore.Weighted
	large    *semaphore.Weighted

	gcMu       sync.Mutex
	gcHolders  int
	gcPrevious int

	freeing atomic.Bool
	freeMu  sync.Mutex
	// FreeOS returns the heap to the system after large bodies
	// (debug.FreeOSMemory); tests replace it before use.
	FreeOS func()
}

// New returns a Controller holding at most maxBytes of bodies at once
// (0 = DefaultMaxBytesInFlight).
func New(maxBytes int64) *Controller {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytesInFlight
	}
	return &Controller{max: maxBytes, inFlight: semaphore.NewWeighted(maxBytes), large: semaphore.NewWeighted(LargeBudget),
		FreeOS: debug.FreeOSMemory}
}

// Max is the bound on the bytes in flight.
func (c *Controller) Max() int64 { return c.max }

// Hold takes n bytes of the bound without waiting, reporting whether
// they fit; each successful Hold needs a Release of the same n.
func (c *Controller) Hold(n int64) bool { return n <= 0 || c.inFlight.TryAcquire(n) }

// Release gives back n bytes taken by Hold.
func (c *Controller) Release(n int64) {
	if n > 0 {
		c.inFlight.Release(n)
	}
}

// BusyMessage is the message of a refused body of n bytes.
func (c *Controller) BusyMessage(n int64) string {
	return fmt.Sprintf("the gateway holds its limit of %d bytes of request bodies in flight; this body of %d bytes does not fit: retry after %d s",
		c.max, n, RetryAfterSeconds)
}

// KeyLarge waits for the turn of a body of n bytes to be keyed, when it is
// large, and tightens the collector meanwhile; done ends the turn (once)
// and, for a large body, has the heap returned to the system. A small
// body never waits. The error is ctx's, when it ended first.
func (c *Controller) KeyLarge(ctx context.Context, n int) (done func(), err error) {
	if n < LargeBody {
		return func() {}, nil
	}
	w := min(int64(n), LargeBudget)
	if err := c.large.Acquire(ctx, w); err != nil {
		return nil, err
	}
	c.tightenGC()
	var once sync.Once
	return func() {
		once.Do(func() {
			c.relaxGC()
			c.large.Release(w)
		})
	}, nil
}

// Tighten sets the collector to KeyingGCPercent until release is called
// (once; nested holds share the setting): for the time a large body is
// gathered, its chunks (garbage once copied) are collected promptly.
func (c *Controller) Tighten() (release func()) {
	c.tightenGC()
	var once sync.Once
	return func() { once.Do(c.relaxGC) }
}

func (c *Controller) tightenGC() {
	c.gcMu.Lock()
	defer c.gcMu.Unlock()
	if c.gcHolders == 0 {
		c.gcPrevious = debug.SetGCPercent(KeyingGCPercent)
	}
	c.gcHolders++
}

func (c *Controller) relaxGC() {
	c.gcMu.Lock()
	defer c.gcMu.Unlock()
	if c.gcHolders--; c.gcHolders == 0 {
		debug.SetGCPercent(c.gcPrevious)
	}
}

// AfterLarge has the heap returned to the system once a request with a
// large body is done (debug.FreeOSMemory in the background), at most one
// at a time: a burst of large bodies does not queue full collections.
func (c *Controller) AfterLarge() {
	if !c.freeing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		c.freeMu.Lock()
		defer c.freeMu.Unlock()
		c.freeing.Store(false)
		c.FreeOS()
	}()
}
