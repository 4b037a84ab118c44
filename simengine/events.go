package simengine

import (
	"log/slog"
	"sync"
	"time"

	"github.com/inference-cache/inference-cache/engine"
	"github.com/inference-cache/inference-cache/internal/vllmpub"
)

// medium is the storage medium of every event: the sim has only the GPU
// tier.
const medium = "GPU"

// eventQueue encodes the engine's KV events into vLLM batches, in the
// order the engine produced them, and publishes them on a goroutine of
// its own, so that a slow subscriber socket never holds the engine's
// lock. Encoding happens under the engine's lock (it reads the request's
// tokens); the queue is unbounded, as vLLM's publisher queue is large.
type eventQueue struct {
	pub EventPublisher
	enc *vllmpub.BatchEncoder
	bs  int
	m   *metrics
	log *slog.Logger

	mu      sync.Mutex
	pending [][]byte
	wake    chan struct{}
	closed  bool
	done    chan struct{}
}

func newEventQueue(pub EventPublisher, form vllmpub.Encoding, bs int, m *metrics, log *slog.Logger) (*eventQueue, error) {
	enc, err := vllmpub.NewBatchEncoder(form)
	if err != nil {
		return nil, err
	}
	q := &eventQueue{pub: pub, enc: enc, bs: bs, m: m, log: log, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go q.run()
	return q, nil
}

// removed queues one batch with a BlockRemoved of the evicted hashes
// (called with the engine's lock held, as the encoder is shared).
func (q *eventQueue) removed(at time.Time, hashes []uint64) {
	q.enc.Begin(ts(at), 1)
	q.enc.BlockRemoved(hashes, medium)
	q.finish()
}

// stored queues one batch with a BlockStored per stored run of the
// request's blocks: the run's hashes chained to the block before it (none
// for a run at the prompt's start, whose first block carries the salt),
// its token ids, the block size, and the LoRA adapter's lora_id and
// lora_name (0 and "" for the base model).
func (q *eventQueue) stored(at time.Time, hashes []uint64, runs []engine.BlockRun, prompt []uint32, salt string, loraID int, lora string) {
	q.enc.Begin(ts(at), len(runs))
	for _, r := range runs {
		var parent uint64
		if r.Start > 0 {
			parent = hashes[r.Start-1]
		}
		if lora != "" {
			q.enc.BlockStoredLoRA(hashes[r.Start:r.End], parent, r.Start > 0, prompt[r.Start*q.bs:r.End*q.bs], q.bs, medium, salt, loraID, lora)
			continue
		}
		q.enc.BlockStoredSalted(hashes[r.Start:r.End], parent, r.Start > 0, prompt[r.Start*q.bs:r.End*q.bs], q.bs, medium, salt)
	}
	q.finish()
}

func (q *eventQueue) finish() {
	payload, err := q.enc.End(0)
	if err != nil {
		q.m.eventErrors.Inc()
		q.log.Error("KV event batch not encoded", "err", err)
		return
	}
	q.mu.Lock()
	q.pending = append(q.pending, payload)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func ts(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

func (q *eventQueue) run() {
	defer close(q.done)
	for {
		q.mu.Lock()
		batch, closed := q.pending, q.closed
		q.pending = nil
		q.mu.Unlock()
		for _, p := range batch {
			if _, err := q.pub.Publish(p); err != nil {
				q.m.eventErrors.Inc()
				q.log.Warn("KV event batch not published", "err", err)
			}
		}
		if closed && len(batch) == 0 {
			return
		}
		if len(batch) == 0 {
			<-q.wake
		}
	}
}

// close publishes what is queued and stops.
func (q *eventQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	<-q.done
}
