package observe

import (
	"time"

	"github.com/zeebo/xxh3"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// Resuming a stream (contract §6.11). The cluster keeps, per replica, the
// seq of the last engine batch whose events it applied and a hash of that
// batch's bytes (Position). A subscriber that starts, or a stream that
// reconnects, resumes from there instead of clearing the replica:
//
//   - With a replay endpoint, it asks the engine to replay (from 0 at
//     start, to rebuild the engine-hash map; from the position after a
//     reconnect, whose map is intact). Batches up to the position rebuild
//     the map and are not sent again (the cluster holds their events).
//     The batch at the position must hash as recorded: then the engine is
//     the process whose events the cluster holds, and the hints are kept.
//     Otherwise the engine restarted (its stream is shorter, or another
//     batch carries that seq), or its buffer no longer reaches back (it
//     keeps its last 10,000 batches): the replica is cleared and replayed
//     from 0 like a fresh start.
//   - Without one, the first live batch must follow the position directly
//     (nothing missed); the hints are then kept with an incomplete map: a
//     removal of a block the subscriber never saw stored (one stored
//     before the restart) clears the replica, since the cluster would
//     otherwise keep claiming it. A live seq at or below the position (a
//     reset) or past position + 1 (missed events) clears.
//
// A stream that loses its connection and connects again (the engine's
// health went down, then up) checks the same way before any new event
// arrives, so a restarted engine loses its hints at once instead of at its
// first event; without a replay endpoint it cannot tell a restart from a
// network blip and clears.

// Position is where an engine stream stands: the seq of the last batch
// whose events were applied and batchHash of its payload (contract §6.11).
type Position struct {
	Seq  int64
	Hash uint64
}

// batchHash is the hash a Position records of a batch's payload bytes
// (XXH3-64): equal bytes under one seq mean the same batch of the same
// engine process (a batch carries its own timestamp).
func batchHash(payload []byte) uint64 { return xxh3.Hash(payload) }

// setResume sets the position the stream resumes from at its start; nil
// (the cluster holds none) starts it from empty, as a fresh replica. Call
// it before the first live message.
func (s *sequencer) setResume(p *Position) {
	if !s.started {
		s.resume = p
	}
}

// begin starts the stream at its first connection or live message (seq;
// -1 at a connection). It returns the replay that checks the resume
// position, if one starts; otherwise the caller goes on with the live
// message as usual.
func (s *sequencer) begin(dst []*pb.BlockEvent, seq int64, now time.Time) ([]*pb.BlockEvent, *replayRequest) {
	p := s.resume
	switch {
	case p == nil:
		// No position: the engine's cache before this subscriber is
		// unknown (a previous subscriber's claims may be stale): start
		// the replica from empty.
		s.started = true
		return s.tr.clearAll(dst, "start", now.UnixMilli()), nil
	case s.canReplay:
		s.started = true
		return dst, s.startVerify(0)
	case seq < 0:
		return dst, nil // no replay: the first live seq decides
	}
	s.started = true
	s.resume = nil
	if seq == p.Seq+1 && !s.tr.paged() {
		s.m.resumes.WithLabelValues("kept_unverified").Inc()
		s.log.Info("stream resumed without replay: hints kept; a removal of a block stored before the restart clears the replica", "engine", s.tr.cfg.ReplicaID, "position", p.Seq)
		s.lastApplied, s.lastHash = p.Seq, p.Hash
		s.tr.markPartial()
		return dst, nil
	}
	reason := "gap"
	if seq <= p.Seq {
		reason = "restart"
	}
	s.m.resumes.WithLabelValues("cleared").Inc()
	s.log.Warn("cannot resume without a replay endpoint: clearing the replica", "engine", s.tr.cfg.ReplicaID, "position", p.Seq, "seq", seq, "reason", reason)
	return s.tr.clearAll(dst, reason, now.UnixMilli()), nil
}

// connected is told of every connection of the stream's socket; again is
// false for the first. At the first it starts the resume check when it
// can; at a later one (the engine may have restarted meanwhile) it checks
// that the engine still holds the last batch applied (with replay) or
// clears (without).
func (s *sequencer) connected(dst []*pb.BlockEvent, again bool, now time.Time) ([]*pb.BlockEvent, *replayRequest) {
	if !s.started {
		if s.resume != nil && s.canReplay {
			return s.begin(dst, -1, now)
		}
		return dst, nil
	}
	if !again || s.replaying || s.lastApplied < 0 {
		return dst, nil
	}
	if s.canReplay {
		s.resume = &Position{Seq: s.lastApplied, Hash: s.lastHash}
		return dst, s.startVerify(s.lastApplied)
	}
	s.m.resumes.WithLabelValues("cleared").Inc()
	s.log.Warn("engine connection back without a replay endpoint: the engine may have restarted; clearing the replica", "engine", s.tr.cfg.ReplicaID)
	s.lastApplied = -1
	return s.tr.clearAll(dst, "reconnect", now.UnixMilli()), nil
}

// startVerify starts a replay from seq from that checks s.resume.
func (s *sequencer) startVerify(from int64) *replayRequest {
	s.verifying = true
	s.replaying = true
	s.replayGen++
	s.log.Info("checking the stream position with a replay", "engine", s.tr.cfg.ReplicaID, "position", s.resume.Seq, "from", from)
	return &replayRequest{From: from, Gen: s.replayGen}
}

// verifyReplayed handles one batch of a resume check's replay.
func (s *sequencer) verifyReplayed(dst []*pb.BlockEvent, seq int64, payload []byte, now time.Time) ([]*pb.BlockEvent, *replayRequest) {
	p := s.resume
	switch {
	case seq == p.Seq:
		if batchHash(payload) != p.Hash {
			return s.resumeFailed(dst, "restart", now)
		}
		if seq > s.lastApplied {
			s.rebuild(seq, payload, now)
		}
		s.verifying, s.resume = false, nil
		s.m.resumes.WithLabelValues("kept").Inc()
		s.log.Info("stream resumed: the engine still holds the batches the cluster applied; hints kept", "engine", s.tr.cfg.ReplicaID, "position", seq)
		return dst, nil
	case seq <= s.lastApplied:
		s.duplicate(seq, now)
		return dst, nil
	case seq < p.Seq && (seq == s.lastApplied+1 || s.lastApplied < 0 && seq == 0):
		s.rebuild(seq, payload, now)
		return dst, nil
	}
	// The engine's history no longer reaches back to what is needed.
	return s.resumeFailed(dst, "gap", now)
}

// rebuild applies a batch the cluster already holds: the translator learns
// its blocks, and its events are not sent again.
func (s *sequencer) rebuild(seq int64, payload []byte, now time.Time) {
	_ = s.applyPayload(nil, seq, payload, now)
}

// verifyDone handles the end of a resume check's replay before it reached
// the position: a complete replay means the engine's stream is shorter
// than the position (it restarted); a failed one leaves the position
// unproven.
func (s *sequencer) verifyDone(dst []*pb.BlockEvent, complete bool, now time.Time) ([]*pb.BlockEvent, *replayRequest) {
	if complete {
		return s.resumeFailed(dst, "restart", now)
	}
	s.m.resumes.WithLabelValues("cleared").Inc()
	s.log.Warn("replay failed: cannot prove the stream position; clearing the replica", "engine", s.tr.cfg.ReplicaID)
	s.verifying, s.resume = false, nil
	s.lastApplied = -1
	return s.tr.clearAll(dst, "gap", now.UnixMilli()), nil
}

// resumeFailed clears the replica and starts a plain replay from 0: the
// engine's current history is then sent as after a fresh start.
func (s *sequencer) resumeFailed(dst []*pb.BlockEvent, reason string, now time.Time) ([]*pb.BlockEvent, *replayRequest) {
	s.m.resumes.WithLabelValues("cleared").Inc()
	s.log.Warn("stream position not held by the engine: clearing the replica and replaying from 0", "engine", s.tr.cfg.ReplicaID,
		"position", s.resume.Seq, "reason", reason)
	s.verifying, s.resume = false, nil
	s.lastApplied = -1
	dst = s.tr.clearAll(dst, reason, now.UnixMilli())
	s.replayGen++
	return dst, &replayRequest{From: 0, Gen: s.replayGen}
}

// position is the stream's position now: the last batch applied, or nil.
func (s *sequencer) position() *Position {
	if s.lastApplied < 0 || s.verifying {
		return nil
	}
	return &Position{Seq: s.lastApplied, Hash: s.lastHash}
}
