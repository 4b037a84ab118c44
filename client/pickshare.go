package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/provisional"
)

// Defaults and limits of pick sharing (contract §5.12).
const (
	// DefaultFullStateInterval is how often a PickShare sends its full
	// state: a push lost on its way (a node down, a full queue) is
	// repaired within it; a pick matters for the 0.1 to 0.7 s until the
	// engine's events confirm it, so repair is worth more often than
	// that would cost.
	DefaultFullStateInterval = time.Second
	// MinFullStateInterval and MaxFullStateInterval bound it.
	MinFullStateInterval = 50 * time.Millisecond
	MaxFullStateInterval = time.Minute
	// DefaultPushTimeout bounds one push: a pick older than this is worth
	// little to the other gateways, and the next full state repairs it.
	DefaultPushTimeout = 250 * time.Millisecond
	// pickShareQueue bounds the picks and removals waiting to be pushed;
	// past it the oldest waiting are dropped (counted): the next full
	// state repairs them.
	pickShareQueue = 4096
)

// SharePicks sends one picks push to one node (round robin, skipping
// nodes whose lookups failed recently) in a single attempt bounded by
// ctx: a lost push is repaired by the picker's next full state, so it is
// never retried. A node that does not answer is skipped for lookups and
// pushes as Config.FailBackoff says. Errors are the call's.
func (c *Client) SharePicks(ctx context.Context, req *pb.SharePicksRequest) (*pb.SharePicksResponse, error) {
	return softStateCall(c, func(n *node) (*pb.SharePicksResponse, error) { return n.ic.SharePicks(ctx, req) })
}

// PicksSender sends a picks push; *Client is one.
type PicksSender interface {
	SharePicks(ctx context.Context, req *pb.SharePicksRequest) (*pb.SharePicksResponse, error)
}

// PickShareConfig configures a PickShare.
type PickShareConfig struct {
	// PickerID names this picker: the id of its load reports
	// (LoadShareConfig.PickerID). Required.
	PickerID string
	// FullStateInterval is the time between full states; 0 =
	// DefaultFullStateInterval, else MinFullStateInterval to
	// MaxFullStateInterval.
	FullStateInterval time.Duration
	// PushTimeout bounds one push; 0 = DefaultPushTimeout.
	PushTimeout time.Duration
	// AfterDelta, when set, is called on the pushing goroutine after each
	// push of new picks or removals has been answered (or has failed),
	// with the ids of the picks it carried: a gateway counts those picks'
	// load in its reports from then on (LoadShareConfig.Load) and sends
	// a report at once, so that a node holds a pick before the load that
	// pick adds, and a lookup never sees a replica's new load without the
	// residency that explains it (contract §5.12).
	AfterDelta func(picked []uint64)
	// LoadFor, when set, is called on the pushing goroutine before each
	// push of new picks, with their ids; the load report it returns (nil
	// = none) rides in that push (SharePicksRequest.load): every node
	// holds it right after the picks, so the load the picks add, and the
	// turns their lookups took, are known where the picks are in one
	// push's delay (contract §5.13). LoadShare.Carried makes one; the
	// push is answered (or failed) when AfterDelta is called, which must
	// then call LoadShare.Answered.
	LoadFor func(picked []uint64) *pb.ReportPickerLoadRequest
	// Logger receives a warning when pushes fail, at most once a minute;
	// nil = slog.Default().
	Logger *slog.Logger
}

// PickShareStats are a PickShare's counters.
type PickShareStats struct {
	// Pushes counts pushes a node answered; Failed those that failed or
	// timed out; Full the full states among Pushes.
	Pushes, Failed, Full uint64
	// Dropped counts picks and removals dropped from a full queue before
	// they were pushed (the next full state repairs them).
	Dropped uint64
}

// PickShare pushes a picker's picks to the cluster as they are made
// (contract §5.12): each Add, Prefilled or Remove wakes one goroutine
// that sends everything waiting in one push, to every node at once when
// the sender is a PicksBroadcaster (a *Client is), so a pick reaches each
// node in about one round trip (else one node, and the others one hop
// later); and every FullStateInterval it sends the full state (Live) for
// repair. It fails open: Add and Remove
// never block, a push that fails is dropped, nothing of it delays or
// fails a request.
type PickShare struct {
	to   PicksSender
	live func(hashesWithin time.Duration) []provisional.Pick
	cfg  PickShareConfig
	// fullAt are the times of the last two full states sent (the run
	// goroutine's own): a full state carries the hashes of the picks made
	// since the one before the last, so each pick's hashes go out in two
	// full states besides its own push, and a full state's size follows
	// the recent picks, not every live one.
	fullAt [2]time.Time
	// quiet: the last full state was empty and no delta went out since,
	// so an empty full state would repair nothing and is not sent.
	quiet bool
	log   *slog.Logger

	mu        sync.Mutex
	adds      []provisional.Pick
	removed   []uint64
	prefilled []uint64
	wake      chan struct{}

	seq  atomic.Uint64
	stop chan struct{}
	done chan struct{}
	once sync.Once

	pushes, failed, full, dropped atomic.Uint64
	warnAt                        time.Time
}

// StartPickShare starts pushing through to; live returns the picker's
// live picks for a full state, with hashes for those made within
// hashesWithin (0 = all): provisional.Store.Live of its own table. Errors
// name the field of cfg at fault and its bound.
func StartPickShare(to PicksSender, live func(hashesWithin time.Duration) []provisional.Pick, cfg PickShareConfig) (*PickShare, error) {
	switch {
	case to == nil || live == nil:
		return nil, errors.New("client: StartPickShare needs a sender and a live-picks function")
	case cfg.PickerID == "":
		return nil, errors.New("client: pick share: picker id required (the load share's)")
	case len(cfg.PickerID) > MaxPickerIDBytes:
		return nil, fmt.Errorf("client: picker id: %d bytes, over the limit of %d", len(cfg.PickerID), MaxPickerIDBytes)
	case cfg.FullStateInterval == 0:
		cfg.FullStateInterval = DefaultFullStateInterval
	case cfg.FullStateInterval < MinFullStateInterval || cfg.FullStateInterval > MaxFullStateInterval:
		return nil, fmt.Errorf("client: full state interval %v: want %v to %v", cfg.FullStateInterval, MinFullStateInterval, MaxFullStateInterval)
	}
	if cfg.PushTimeout <= 0 {
		cfg.PushTimeout = DefaultPushTimeout
	}
	s := &PickShare{to: to, live: live, cfg: cfg, log: cfg.Logger, wake: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{})}
	if s.log == nil {
		s.log = slog.Default()
	}
	// Counting from the clock keeps a picker restarted under the same id
	// ahead of its old pushes.
	s.seq.Store(uint64(time.Now().UnixNano()))
	go s.run()
	return s, nil
}

// Add queues a pick to push; it never blocks. k's slices must not change
// afterwards.
func (s *PickShare) Add(k provisional.Pick) {
	s.mu.Lock()
	if len(s.adds) >= pickShareQueue {
		s.adds = s.adds[1:]
		s.dropped.Add(1)
	}
	s.adds = append(s.adds, k)
	s.mu.Unlock()
	s.signal()
}

// Remove queues the removal of a pick (its request failed or was
// cancelled); it never blocks.
func (s *PickShare) Remove(id uint64) { s.queue(&s.removed, id) }

// Prefilled queues the news that a pick's request has its first token
// (its prefill no longer queues the replica); it never blocks. A lost
// one is repaired by the next full state, which carries the flag.
func (s *PickShare) Prefilled(id uint64) { s.queue(&s.prefilled, id) }

// queue appends id to q (a list of s under mu), dropping its oldest when
// full, and wakes the pusher.
func (s *PickShare) queue(q *[]uint64, id uint64) {
	s.mu.Lock()
	if len(*q) >= pickShareQueue {
		*q = (*q)[1:]
		s.dropped.Add(1)
	}
	*q = append(*q, id)
	s.mu.Unlock()
	s.signal()
}

func (s *PickShare) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Stats returns the counters.
func (s *PickShare) Stats() PickShareStats {
	return PickShareStats{Pushes: s.pushes.Load(), Failed: s.failed.Load(), Full: s.full.Load(), Dropped: s.dropped.Load()}
}

// Stop ends the pushes (a push in flight is cancelled) and returns once
// the goroutine ended. The cluster drops the picks at their max age, or
// sooner as the engines' events confirm them. Idempotent.
func (s *PickShare) Stop() {
	s.once.Do(func() { close(s.stop) })
	<-s.done
}

func (s *PickShare) run() {
	defer close(s.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	t := time.NewTicker(s.cfg.FullStateInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-s.wake:
			s.mu.Lock()
			adds, removed, prefilled := s.adds, s.removed, s.prefilled
			s.adds, s.removed, s.prefilled = nil, nil, nil
			s.mu.Unlock()
			if len(adds)+len(removed)+len(prefilled) > 0 {
				s.quiet = false
				ids := make([]uint64, len(adds))
				for i := range adds {
					ids[i] = adds[i].ID
				}
				var load *pb.ReportPickerLoadRequest
				if s.cfg.LoadFor != nil && len(adds) > 0 {
					load = s.cfg.LoadFor(ids)
				}
				s.push(ctx, provisional.Push{PickerID: s.cfg.PickerID, Picks: adds, Removed: removed, Prefilled: prefilled}, load)
				if s.cfg.AfterDelta != nil && len(adds)+len(removed) > 0 {
					s.cfg.AfterDelta(ids)
				}
			}
		case <-t.C:
			within := time.Duration(0)
			if !s.fullAt[0].IsZero() {
				within = time.Since(s.fullAt[0])
			}
			live := s.live(within)
			if len(live) == 0 && s.quiet {
				continue
			}
			s.quiet = len(live) == 0
			s.fullAt[0], s.fullAt[1] = s.fullAt[1], time.Now()
			s.push(ctx, provisional.Push{PickerID: s.cfg.PickerID, Full: true, Picks: live}, nil)
		}
	}
}

// push sends one push, with load (nil = none), bounded by PushTimeout.
func (s *PickShare) push(parent context.Context, p provisional.Push, load *pb.ReportPickerLoadRequest) {
	p.Sequence = s.seq.Add(1)
	ctx, cancel := context.WithTimeout(parent, s.cfg.PushTimeout)
	req := provisional.ToPB(&p)
	req.Load = load
	var err error
	if all, ok := s.to.(PicksBroadcaster); ok {
		_, err = all.SharePicksAll(ctx, req)
	} else {
		_, err = s.to.SharePicks(ctx, req)
	}
	cancel()
	if err == nil {
		s.pushes.Add(1)
		if p.Full {
			s.full.Add(1)
		}
		return
	}
	if parent.Err() != nil {
		return
	}
	s.failed.Add(1)
	if now := time.Now(); now.Sub(s.warnAt) >= loadShareWarnEvery {
		s.warnAt = now
		s.log.Warn("provisional picks push failed; the other gateways see this one's picks once a push or the next full state succeeds (requests are unaffected)",
			"picker_id", s.cfg.PickerID, "err", err, "failed_so_far", s.failed.Load())
	}
}
