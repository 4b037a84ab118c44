package provisional

import (
	"cmp"
	"slices"
	"strings"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// Details a merged answer carries (contract §5.12).
const (
	// DetailProvisional is the detail of an answer that had no prefix
	// match in the confirmed index and has one from provisional
	// residencies.
	DetailProvisional = "provisional prefix match: a gateway sent this prefix to the replica and its engine's events have not confirmed it yet"
	// DetailAlsoProvisional is appended to a confirmed PREFIX_MATCH's
	// detail when a provisional residency reaches deeper on some replica.
	DetailAlsoProvisional = " (with provisional residencies: picks not yet confirmed by the engines' events)"
)

// Merge folds provisional matches (View.Matches) into a lookup's answer
// (contract §5.12) and returns the hints it made provisional and the
// matches the answer's confirmed hints already cover, which the caller
// may Confirm (the engine's events reached the index). The rule, the same
// for the server and a gateway's own table:
//
//   - a match no deeper than the replica's confirmed PREFIX_MATCH hint is
//     covered: the confirmed hint stands, with the match's repeated
//     prefill tokens (Match.Repeated) if more than it had;
//   - otherwise the replica's hint (made when absent, its queue taken from
//     resp.Loads) gets the match's blocks and tokens, freshness 1, score
//     the matched tokens, age the pick's, provisional set, and repeated
//     prefill tokens the larger of the match's and those of a
//     provisional hint it replaces (two tables' counts of the same
//     picks: each is a lower bound);
//   - an answer that was not a PREFIX_MATCH becomes one, its other hints
//     (affinity, tenant-hot: no prefix held) dropped;
//   - hints are ordered by score, highest first (ties by replica id), and
//     cut to maxReplicas (0 = no cut).
//
// It allocates only when a match adds or changes a hint.
func Merge(resp *pb.LookupRouteResponse, ms []Match, maxReplicas int) (provisional int, covered []Match) {
	if resp == nil || len(ms) == 0 {
		return 0, nil
	}
	prefix := resp.GetReasonCode() == pb.ReasonCode_PREFIX_MATCH
	for _, m := range ms {
		var h *pb.ReplicaHint
		if prefix {
			for _, x := range resp.Replicas {
				if x.GetReplicaId() == m.Replica {
					h = x
					break
				}
			}
			if h != nil && !h.GetProvisional() && h.GetMatchedBlocks() >= m.Blocks {
				h.RepeatedPrefillTokens = max(h.GetRepeatedPrefillTokens(), m.Repeated)
				covered = append(covered, m)
				continue
			}
		}
		if provisional == 0 && !prefix {
			resp.Replicas = resp.Replicas[:0]
		}
		if h == nil {
			h = &pb.ReplicaHint{ReplicaId: m.Replica}
			for _, l := range resp.GetLoads() {
				if l.GetReplicaId() == m.Replica {
					h.WaitingRequests, h.RunningRequests, h.Pressure = l.GetWaitingRequests(), l.GetRunningRequests(), l.GetPressure()
					break
				}
			}
			resp.Replicas = append(resp.Replicas, h)
		}
		if !h.GetProvisional() {
			h.RepeatedPrefillTokens = 0
		}
		h.RepeatedPrefillTokens = max(h.GetRepeatedPrefillTokens(), m.Repeated)
		h.MatchedBlocks, h.MatchedTokens = m.Blocks, m.Tokens
		h.Freshness, h.Score, h.AgeMs, h.Provisional, h.Factors = 1, float64(m.Tokens), uint64(m.Age.Milliseconds()), true, nil
		provisional++
	}
	if provisional == 0 {
		return 0, covered
	}
	if prefix {
		if !strings.HasSuffix(resp.Detail, DetailAlsoProvisional) {
			resp.Detail += DetailAlsoProvisional
		}
	} else {
		resp.ReasonCode, resp.Detail = pb.ReasonCode_PREFIX_MATCH, DetailProvisional
	}
	slices.SortStableFunc(resp.Replicas, func(a, b *pb.ReplicaHint) int {
		if c := cmp.Compare(b.GetScore(), a.GetScore()); c != 0 {
			return c
		}
		return strings.Compare(a.GetReplicaId(), b.GetReplicaId())
	})
	if maxReplicas > 0 && len(resp.Replicas) > maxReplicas {
		resp.Replicas = resp.Replicas[:maxReplicas]
	}
	return provisional, covered
}

// MergeInto folds the store's picks on chain (a lookup's block hashes in
// part) into resp by Merge's rule, cut to maxReplicas (0 = no cut) or to
// the number of hints resp held when that is more (a merge never
// shortens the answer it was given), and Confirms the picks the answer's confirmed hints cover. It returns the
// hints made provisional. The one sequence the server's lookups and a
// gateway's own table (and a simulation of either) run.
func (s *Store) MergeInto(resp *pb.LookupRouteResponse, part Partition, chain []uint64, maxReplicas int) int {
	if resp == nil || len(chain) == 0 {
		return 0
	}
	if maxReplicas > 0 {
		maxReplicas = max(maxReplicas, len(resp.Replicas))
	}
	var buf [8]Match
	ms := s.At().Matches(buf[:0], part, chain)
	if len(ms) == 0 {
		return 0
	}
	n, covered := Merge(resp, ms, maxReplicas)
	for _, m := range covered {
		if int(m.Blocks) <= len(chain) {
			s.Confirm(part, m.Replica, chain[:m.Blocks])
		}
	}
	return n
}
