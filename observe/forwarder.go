package observe

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"github.com/inference-cache/inference-cache/client"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// Forwarder defaults.
const (
	// DefaultQueueCapacity bounds the block events waiting for the cluster.
	// When it is full, Enqueue blocks: the engine loops stop reading, the
	// engines' PUB sockets drop (their high-water mark), and the drop is
	// seen as a sequence gap, replayed or cleared. Nothing is dropped
	// silently in this process.
	DefaultQueueCapacity = 65536
	// DefaultMaxBatchEvents caps the events of one IngestRequest (the
	// server's limit is api.MaxEventsPerRequest = 4,096).
	DefaultMaxBatchEvents = 1024
	// maxBatchBlocks caps the blocks of one IngestRequest (server limit
	// api.MaxBlocksPerRequest = 262,144).
	maxBatchBlocks = 65536
	// batchLinger is how long the sender waits for more events after the
	// first one of a batch: a little latency for much larger batches.
	batchLinger = 2 * time.Millisecond
	// Retry backoff while the cluster is unavailable.
	minBackoff = 50 * time.Millisecond
	maxBackoff = 5 * time.Second
	// clockWarnInterval is the least time between two warnings about
	// events rejected for a clock ahead of the server's: a wrong engine
	// clock rejects every batch, and the count is in the metric.
	clockWarnInterval = time.Minute
)

// queued is one queue item: a block event, or (ev nil) a stream position
// to record once the events before it are acknowledged.
type queued struct {
	ev  *pb.BlockEvent
	at  time.Time
	pos *pb.StreamPosition
}

// Forwarder batches block events into IngestRequests and writes them to a
// Sink from one goroutine, in enqueue order (batching and backpressure).
// A failed write is retried with backoff, with the same
// request_id, until it succeeds or the forwarder stops; the next batch is
// never sent before the current one is acknowledged, so acknowledged order
// is never changed. Lag (the age of the oldest unacknowledged event) and
// queue depth are exported as gauges.
type Forwarder struct {
	sink     Sink
	m        *Metrics
	log      *slog.Logger
	ch       chan queued
	maxBatch int
	prefix   string
	n        uint64
	now      func() time.Time

	clockWarned  time.Time // last clock warning (Run's goroutine only)
	clockSkipped int       // clock warnings suppressed since then

	// Stream positions of acknowledged batches not yet recorded, and when
	// the last record went out (positions.go; Run's goroutine only).
	pendingPos  map[string]*pb.StreamPosition
	posRecorded time.Time
}

// NewForwarder returns a forwarder with a queue of capacity events (0:
// DefaultQueueCapacity) and batches of at most maxBatch events (0:
// DefaultMaxBatchEvents). Start it with Run.
func NewForwarder(sink Sink, m *Metrics, log *slog.Logger, capacity, maxBatch int) *Forwarder {
	if capacity <= 0 {
		capacity = DefaultQueueCapacity
	}
	if maxBatch <= 0 || maxBatch > 4096 {
		maxBatch = DefaultMaxBatchEvents
	}
	var r [6]byte
	_, _ = crand.Read(r[:])
	return &Forwarder{sink: sink, m: m, log: log, ch: make(chan queued, capacity), maxBatch: maxBatch,
		prefix: "observe-" + hex.EncodeToString(r[:]) + "-", now: time.Now}
}

// Enqueue queues evs in order; it blocks while the queue is full and
// returns ctx.Err() if ctx ends first.
func (f *Forwarder) Enqueue(ctx context.Context, evs []*pb.BlockEvent) error {
	now := f.now()
	for _, e := range evs {
		select {
		case f.ch <- queued{ev: e, at: now}:
			f.m.IngestQueue.Inc()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Run sends batches until ctx ends. Events still queued then are not sent.
func (f *Forwarder) Run(ctx context.Context) {
	batch := make([]queued, 0, f.maxBatch)
	tick := time.NewTicker(positionInterval)
	defer tick.Stop()
	for {
		batch = batch[:0]
		select {
		case q := <-f.ch:
			batch = append(batch, q)
		case <-tick.C:
			f.flushPositions(ctx, false)
			continue
		case <-ctx.Done():
			return
		}
		blocks := len(batch[0].ev.GetBlockHashes())
		linger := time.NewTimer(batchLinger)
	fill:
		for len(batch) < f.maxBatch && blocks < maxBatchBlocks {
			select {
			case q := <-f.ch:
				batch = append(batch, q)
				blocks += len(q.ev.GetBlockHashes())
			default:
				select {
				case q := <-f.ch:
					batch = append(batch, q)
					blocks += len(q.ev.GetBlockHashes())
				case <-linger.C:
					break fill
				case <-ctx.Done():
					break fill
				}
			}
		}
		linger.Stop()
		if !f.send(ctx, batch) {
			return
		}
		f.notePositions(batch)
		f.flushPositions(ctx, false)
	}
}

// send writes one batch, retrying until it is acknowledged; false when ctx
// ended first.
func (f *Forwarder) send(ctx context.Context, batch []queued) bool {
	events := 0
	for _, q := range batch {
		if q.ev != nil {
			events++
		}
	}
	if events == 0 {
		return true // positions only
	}
	f.n++
	req := &pb.IngestRequest{RequestId: f.prefix + strconv.FormatUint(f.n, 10), Events: make([]*pb.BlockEvent, 0, events)}
	for _, q := range batch {
		if q.ev != nil {
			req.Events = append(req.Events, q.ev)
		}
	}
	first := batch[0].at
	for _, q := range batch {
		if q.ev != nil {
			first = q.at
			break
		}
	}
	backoff := minBackoff
	for attempt := 0; ; attempt++ {
		f.m.IngestLag.Set(f.now().Sub(first).Seconds())
		resp, err := f.sink.Ingest(ctx, req)
		if err == nil {
			f.m.IngestBatches.WithLabelValues("ok").Inc()
			f.m.IngestEvents.Add(float64(events))
			f.m.IngestQueue.Sub(float64(events))
			f.m.IngestLag.Set(0)
			if n := len(resp.GetRejected()); n > 0 {
				f.m.IngestRejected.Add(float64(n))
				r := resp.GetRejected()[0]
				f.log.Warn("cluster rejected block events", "rejected", n, "of", events, "first_index", r.GetEventIndex(), "first_reason", r.GetReason())
			}
			if n := resp.GetRejectedAheadOfClock(); n > 0 {
				f.m.IngestClockRejects.Add(float64(n))
				f.warnClock(req, resp)
			}
			if attempt > 0 {
				f.log.Info("cluster reachable again; backlog resumed", "attempts", attempt+1)
			}
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		f.m.IngestBatches.WithLabelValues("error").Inc()
		if status.Code(err) == codes.InvalidArgument {
			// The request as a whole breaks a server limit: retrying cannot
			// succeed and would wedge every engine behind it.
			f.log.Error("cluster refused an ingest request whole; dropping it", "events", events, "err", err)
			f.m.IngestRejected.Add(float64(events))
			f.m.IngestQueue.Sub(float64(events))
			return true
		}
		f.m.IngestRetries.Inc()
		if attempt == 0 || attempt%20 == 0 {
			f.log.Warn("cluster unavailable: holding block events and retrying", "err", err, "attempt", attempt+1,
				"queued", len(f.ch)+len(batch), "lag", f.now().Sub(first).String())
		}
		d := backoff/2 + rand.N(backoff/2+1)
		backoff = min(backoff*2, maxBackoff)
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false
		}
	}
}

// warnClock logs, at most once per clockWarnInterval, how far the newest
// observed_at_ms of req runs ahead of the server clock in resp: the
// events carry the engines' own event times, so it is an engine's clock
// (or the server's) that is off.
func (f *Forwarder) warnClock(req *pb.IngestRequest, resp *pb.IngestResponse) {
	now := f.now()
	if !f.clockWarned.IsZero() && now.Sub(f.clockWarned) < clockWarnInterval {
		f.clockSkipped++
		return
	}
	f.clockWarned = now
	var newest int64
	for _, e := range req.GetEvents() {
		newest = max(newest, e.GetObservedAtMs())
	}
	f.log.Warn("cluster rejected block events stamped ahead of its clock; check the engines' and the servers' clocks (NTP)",
		"rejected_ahead_of_clock", resp.GetRejectedAheadOfClock(), "of", len(req.GetEvents()),
		"events_ahead_by", client.MillisDuration(newest-resp.GetServerTimeMs()).String(),
		"server_time_ms", resp.GetServerTimeMs(), "warnings_suppressed", f.clockSkipped)
	f.clockSkipped = 0
}
