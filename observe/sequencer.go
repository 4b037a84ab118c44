package observe

import (
	"log/slog"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// maxPendingBatches bounds the live batches buffered while a replay runs.
// The engine keeps only its last 10,000 batches for replay, so a replay
// that has not caught up after as many live batches cannot succeed anyway.
const maxPendingBatches = 10000

// pending is a live batch held while a replay is in flight.
type pending struct {
	seq     int64
	payload []byte
}

// sequencer orders one stream's batches: it tracks the engine's
// seq, detects restarts and gaps, buffers live batches while a replay runs,
// applies everything strictly in seq order and drops seq <= last applied,
// so a late replayed store can never resurrect a removed block. Like the
// translator it is pure: the engine loop feeds it messages and carries out
// the replay it asks for.
type sequencer struct {
	tr        *translator
	dec       *Decoder
	m         *engineMetrics
	log       *slog.Logger
	canReplay bool

	started     bool
	lastApplied int64  // -1: nothing applied since start or restart
	lastHash    uint64 // batchHash of the batch lastApplied
	lastLive    int64  // -1: no live message yet
	replaying   bool
	replayGen   uint64 // incremented whenever a replay starts or is abandoned
	pend        []pending

	// resume is the position the stream resumes from (resume.go): the
	// cluster's at start, the stream's own after a reconnect; nil when
	// there is none to check. verifying: the replay in flight checks it.
	resume    *Position
	verifying bool
}

func newSequencer(tr *translator, m *engineMetrics, log *slog.Logger, canReplay bool) *sequencer {
	return &sequencer{tr: tr, dec: NewDecoder(), m: m, log: log, canReplay: canReplay, lastApplied: -1, lastLive: -1}
}

// replayRequest asks the engine loop to replay from seq From; Gen tags the
// replies, which must be fed back with the same Gen.
type replayRequest struct {
	From int64
	Gen  uint64
}

// live handles one live message. It appends the BlockEvents to emit to dst
// and returns a replay request when one must start (nil otherwise).
func (s *sequencer) live(dst []*pb.BlockEvent, seq int64, payload []byte, now time.Time) ([]*pb.BlockEvent, *replayRequest) {
	nowMs := now.UnixMilli()
	if !s.started {
		var req *replayRequest
		if dst, req = s.begin(dst, seq, now); req != nil || s.verifying {
			s.lastLive = seq
			s.pend = append(s.pend[:0], pending{seq: seq, payload: append([]byte(nil), payload...)})
			return dst, req
		}
	} else if s.lastLive >= 0 && seq <= s.lastLive {
		// A PUB stream never goes backwards: the engine restarted (seq back
		// to 0, or past 0 if its first batches were missed). Its old blocks
		// are gone; anything of the old process still in flight, replay
		// included, is void.
		s.m.restarts.Inc()
		s.log.Warn("engine restarted: clearing its replicas", "engine", s.tr.cfg.ReplicaID, "seq", seq, "previous_seq", s.lastLive)
		s.abandonReplay()
		s.pend = nil
		dst = s.tr.clearAll(dst, "restart", nowMs)
		s.lastApplied = -1
		s.resume, s.verifying = nil, false
	}
	s.lastLive = seq
	if s.replaying {
		if len(s.pend) >= maxPendingBatches {
			s.log.Warn("replay did not catch up within the live buffer; giving up on it", "engine", s.tr.cfg.ReplicaID, "buffered", len(s.pend))
			s.m.replayFailed.Inc()
			s.abandonReplay()
			dst = s.drain(dst, now)
		} else {
			s.pend = append(s.pend, pending{seq: seq, payload: append([]byte(nil), payload...)})
			return dst, nil
		}
	}
	switch {
	case seq <= s.lastApplied:
		s.duplicate(seq, now)
		return dst, nil
	case seq == s.lastApplied+1:
		return s.applyPayload(dst, seq, payload, now), nil
	}
	// A gap: seq > lastApplied+1.
	if s.lastApplied >= 0 {
		s.m.gaps.Inc()
	}
	if s.canReplay {
		from := s.lastApplied + 1
		s.replaying = true
		s.replayGen++
		s.pend = append(s.pend[:0], pending{seq: seq, payload: append([]byte(nil), payload...)})
		s.log.Info("sequence gap: replaying", "engine", s.tr.cfg.ReplicaID, "from", from, "live_seq", seq)
		return dst, &replayRequest{From: from, Gen: s.replayGen}
	}
	if s.lastApplied >= 0 {
		s.log.Warn("sequence gap without a replay endpoint: clearing the replica", "engine", s.tr.cfg.ReplicaID, "expected", s.lastApplied+1, "seq", seq)
		dst = s.tr.clearAll(dst, "gap", nowMs)
	}
	return s.applyPayload(dst, seq, payload, now), nil
}

// replayed handles one replayed batch of replay gen; it returns a replay
// request when a new replay must start (a resume check that failed).
func (s *sequencer) replayed(dst []*pb.BlockEvent, gen uint64, seq int64, payload []byte, now time.Time) ([]*pb.BlockEvent, *replayRequest) {
	if !s.replaying || gen != s.replayGen {
		return dst, nil // a late reply of an abandoned replay
	}
	if s.verifying {
		return s.verifyReplayed(dst, seq, payload, now)
	}
	return s.replayedBatch(dst, seq, payload, now), nil
}

// replayedBatch applies one replayed batch outside a resume check.
func (s *sequencer) replayedBatch(dst []*pb.BlockEvent, seq int64, payload []byte, now time.Time) []*pb.BlockEvent {
	switch {
	case seq <= s.lastApplied:
		s.duplicate(seq, now)
		return dst
	case seq == s.lastApplied+1 || s.lastApplied < 0:
		// lastApplied < 0: a replay from 0 after start or restart takes
		// whatever the engine still holds (the replica starts empty anyway).
		return s.applyPayload(dst, seq, payload, now)
	}
	// The engine no longer holds the batches we miss (its buffer is the
	// last 10,000): what they did is unknown, so start over from empty.
	s.log.Warn("replay cannot fill the gap: clearing the replica", "engine", s.tr.cfg.ReplicaID, "expected", s.lastApplied+1, "first_replayed", seq)
	s.m.replayIncomplete.Inc()
	dst = s.tr.clearAll(dst, "gap", now.UnixMilli())
	return s.applyPayload(dst, seq, payload, now)
}

// replayDone ends replay gen: complete when the end marker arrived, failed
// otherwise (dial error, timeout). Buffered live batches are then applied in
// order; whatever is still missing clears the replica. It returns a replay
// request when a new replay must start (a resume check that failed).
func (s *sequencer) replayDone(dst []*pb.BlockEvent, gen uint64, complete bool, now time.Time) ([]*pb.BlockEvent, *replayRequest) {
	if !s.replaying || gen != s.replayGen {
		return dst, nil
	}
	if s.verifying {
		var req *replayRequest
		if dst, req = s.verifyDone(dst, complete, now); req != nil {
			return dst, req
		}
	}
	if complete {
		s.m.replayComplete.Inc()
	} else {
		s.m.replayFailed.Inc()
	}
	s.abandonReplay()
	return s.drain(dst, now), nil
}

// abandonReplay stops the current replay; its late replies are ignored.
func (s *sequencer) abandonReplay() {
	if s.replaying {
		s.replaying = false
		s.replayGen++
	}
}

// drain applies the buffered live batches in seq order.
func (s *sequencer) drain(dst []*pb.BlockEvent, now time.Time) []*pb.BlockEvent {
	pend := s.pend
	s.pend = nil
	for _, p := range pend {
		switch {
		case p.seq <= s.lastApplied:
			s.duplicate(p.seq, now)
		case p.seq == s.lastApplied+1 || s.lastApplied < 0:
			dst = s.applyPayload(dst, p.seq, p.payload, now)
		default:
			s.log.Warn("batches still missing after replay: clearing the replica", "engine", s.tr.cfg.ReplicaID, "expected", s.lastApplied+1, "seq", p.seq)
			dst = s.tr.clearAll(dst, "gap", now.UnixMilli())
			dst = s.applyPayload(dst, p.seq, p.payload, now)
		}
	}
	return dst
}

// applyPayload decodes and translates one batch and records seq as applied.
// A batch that does not decode is lost: its effect on the engine's cache is
// unknown, so the replica is cleared.
func (s *sequencer) applyPayload(dst []*pb.BlockEvent, seq int64, payload []byte, now time.Time) []*pb.BlockEvent {
	s.lastApplied = seq
	s.lastHash = batchHash(payload)
	b, err := s.dec.Decode(payload)
	if err != nil {
		s.m.decodeErrors.Inc()
		s.tr.drops.log(s.tr, now, slog.LevelWarn, "decode_error", "undecodable batch: its events are lost and the replica is cleared (counted in decode_errors_total; logged at most every 10 s)",
			"seq", seq, "err", err)
		return s.tr.clearAll(dst, "decode_error", now.UnixMilli())
	}
	s.m.batches.Inc()
	return s.tr.apply(dst, b, now)
}

// duplicate counts and logs (rate-limited, at INFO: replay and live
// overlap by design) a batch dropped because its seq was already applied.
func (s *sequencer) duplicate(seq int64, now time.Time) {
	s.m.duplicates.Inc()
	s.tr.drops.log(s.tr, now, slog.LevelInfo, "duplicate", "batch dropped: its seq was already applied (replay and live overlap; counted in duplicate_batches_total)",
		"seq", seq, "last_applied", s.lastApplied)
}
