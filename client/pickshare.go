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
	// Manual starts no goroutine: the caller runs the pushes, one at a
	// time, with Begin and End, at the times it chooses (a simulation,
	// on its virtual clock). The sender is then not called and may be
	// nil.
	Manual bool
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
	// open: a push is in flight (Begin to End); fullDue: the full-state
	// timer fired and its full state has not begun.
	open, fullDue bool
	wake          chan struct{}

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
	case (to == nil && !cfg.Manual) || live == nil:
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
	if cfg.Manual {
		close(s.done)
		return s, nil
	}
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
		tick := false
		select {
		case <-s.stop:
			return
		case <-s.wake:
		case <-t.C:
			tick = true
		}
		for c := s.Begin(time.Now(), tick); c != nil; c = s.Begin(time.Now(), false) {
			s.End(c, s.send(ctx, c.Request))
		}
	}
}

// PushCall is one push of a PickShare, from Begin to End: Request is
// what goes to the nodes.
type PushCall struct {
	Request *pb.SharePicksRequest
	// ids are the picks of a delta; after: the delta added or removed
	// picks (PickShareConfig.AfterDelta is called at its End).
	ids   []uint64
	after bool
}

// Begin starts the next push at now, nil when there is none: one push
// is in flight at a time (Begin answers nil until End), and what waits
// when it begins goes in it, so a burst gathers into one push per round
// trip (contract §5.12). tick says the full-state timer fired: the full
// state is then due, and goes once no delta waits. The next push is:
//   - the delta of everything waiting (picks, first tokens and removals
//     given since the last delta began), with the load report
//     PickShareConfig.LoadFor makes for its picks;
//   - else a due full state: the live picks, with the hashes of those
//     made since the full state before the last; none when the last
//     full state was empty and nothing was pushed since (it would repair
//     nothing).
//
// The pushing goroutine calls it when woken or ticked, then again after
// each End until it answers nil; a Manual caller does the same at its
// own times (every PickShareConfig.FullStateInterval with tick set). Begin and End are
// for one goroutine at a time (the pusher's, or the Manual caller's);
// Add, Remove and Prefilled may be called from any.
func (s *PickShare) Begin(now time.Time, tick bool) *PushCall {
	s.mu.Lock()
	s.fullDue = s.fullDue || tick
	if s.open {
		s.mu.Unlock()
		return nil
	}
	adds, removed, prefilled := s.adds, s.removed, s.prefilled
	s.adds, s.removed, s.prefilled = nil, nil, nil
	delta := len(adds)+len(removed)+len(prefilled) > 0
	full := !delta && s.fullDue
	if full {
		s.fullDue = false
	}
	s.open = delta || full
	s.mu.Unlock()
	var c *PushCall
	switch {
	case delta:
		c = s.delta(adds, removed, prefilled)
	case full:
		if c = s.fullState(now); c == nil {
			s.mu.Lock()
			s.open = false // quiet: nothing to send
			s.mu.Unlock()
		}
	}
	return c
}

// delta is the push of these picks, first tokens and removals.
func (s *PickShare) delta(adds []provisional.Pick, removed, prefilled []uint64) *PushCall {
	s.quiet = false
	ids := make([]uint64, len(adds))
	for i := range adds {
		ids[i] = adds[i].ID
	}
	var load *pb.ReportPickerLoadRequest
	if s.cfg.LoadFor != nil && len(adds) > 0 {
		load = s.cfg.LoadFor(ids)
	}
	req := s.request(provisional.Push{PickerID: s.cfg.PickerID, Picks: adds, Removed: removed, Prefilled: prefilled})
	req.Load = load
	return &PushCall{Request: req, ids: ids, after: len(adds)+len(removed) > 0}
}

// fullState is the full state at now, nil when quiet.
func (s *PickShare) fullState(now time.Time) *PushCall {
	within := time.Duration(0)
	if !s.fullAt[0].IsZero() {
		within = now.Sub(s.fullAt[0])
	}
	live := s.live(within)
	if len(live) == 0 && s.quiet {
		return nil
	}
	s.quiet = len(live) == 0
	s.fullAt[0], s.fullAt[1] = s.fullAt[1], now
	return &PushCall{Request: s.request(provisional.Push{PickerID: s.cfg.PickerID, Full: true, Picks: live})}
}

// End ends push c, answered (err nil) or failed: it is counted (a
// failure warned about, at most once a minute, never retried) and, for a
// delta that added or removed picks, PickShareConfig.AfterDelta is
// called with its picks' ids.
func (s *PickShare) End(c *PushCall, err error) {
	s.mu.Lock()
	s.open = false
	s.mu.Unlock()
	switch {
	case err == nil:
		s.pushes.Add(1)
		if c.Request.GetFullState() {
			s.full.Add(1)
		}
	case errors.Is(err, context.Canceled):
		// Stopped: not a failure.
	default:
		s.failed.Add(1)
		if now := time.Now(); now.Sub(s.warnAt) >= loadShareWarnEvery {
			s.warnAt = now
			s.log.Warn("provisional picks push failed; the other gateways see this one's picks once a push or the next full state succeeds (requests are unaffected)",
				"picker_id", s.cfg.PickerID, "err", err, "failed_so_far", s.failed.Load())
		}
	}
	if c.after && s.cfg.AfterDelta != nil {
		s.cfg.AfterDelta(c.ids)
	}
}

// request is p, numbered with the next sequence, as it goes on the wire.
func (s *PickShare) request(p provisional.Push) *pb.SharePicksRequest {
	p.Sequence = s.seq.Add(1)
	return provisional.ToPB(&p)
}

// send sends req, bounded by PushTimeout; a push cut by Stop is
// context.Canceled.
func (s *PickShare) send(parent context.Context, req *pb.SharePicksRequest) error {
	ctx, cancel := context.WithTimeout(parent, s.cfg.PushTimeout)
	defer cancel()
	var err error
	if all, ok := s.to.(PicksBroadcaster); ok {
		_, err = all.SharePicksAll(ctx, req)
	} else {
		_, err = s.to.SharePicks(ctx, req)
	}
	if err != nil && parent.Err() != nil {
		return context.Canceled
	}
	return err
}
