package index

import "github.com/inference-cache/inference-cache/policy"

// Ranking (contract §5.4). Every factor is computed from replicated state and the
// request (NowMs included), so every node ranks alike.

// statsFresh reports whether stats observed at atMs are fresh at nowMs.
func statsFresh(nowMs, atMs, freshMs int64) bool { return nowMs-atMs <= freshMs }

// servingCount is |serving set| of a (scheme, model): replicas holding a
// live block of it, plus replicas whose fresh stats serve it.
func servingCount(sm *smEnt, st *statLvl, nowMs, freshMs int64) int {
	n := 0
	if sm != nil {
		n = len(sm.holders)
	}
	if st != nil && statsFresh(nowMs, st.max, freshMs) {
		for r, at := range st.by {
			if !statsFresh(nowMs, at, freshMs) {
				continue
			}
			if sm == nil || sm.holders[r] == 0 {
				n++
			}
		}
	}
	return n
}

// rank scores res.cands into res.Hints and applies the two filters; on
// success res.Reason is PREFIX_MATCH. Otherwise it returns why the match
// was dropped. With req.Explain, explainMatch then fills res.Factors for
// the hints that remain; the scoring loop itself never stores a factor.
// Caller holds metaMu.RLock.
func (ix *Index) rank(ps *polState, pe *partEnt, req *LookupRequest, res *Result) string {
	m := ix.m
	now := req.NowMs
	total := servingCount(pe.sm, m.statSM[smKey{pe.p.Scheme, pe.p.Model}], now, ps.freshMs)
	tight := req.SLOTTFTMs > 0 && int64(req.SLOTTFTMs) < ps.sloMs
	v1 := ps.p.RankingVersion == policy.RankingV1
	hints := res.Hints[:0]
	for i := range res.cands {
		c := &res.cands[i]
		tokens := clampTokens(c.tokens)
		if tokens < ps.p.MinimumMatchedTokens {
			continue
		}
		age := now - c.minSeen
		if age < 0 {
			age = 0 // observed "in the future" (clock skew): treat as new
		}
		fresh := 0.0
		if ps.ttlMs > 0 {
			fresh = max(0, 1-float64(age)/float64(ps.ttlMs))
		}
		h := Hint{
			ReplicaID:     m.reps.ids[c.rep],
			MatchedTokens: tokens,
			MatchedBlocks: c.depth,
			Freshness:     fresh,
			AgeMs:         uint64(age),
		}
		if st := m.stats[c.rep]; st != nil && statsFresh(now, st.s.ObservedAtMs, ps.freshMs) {
			h.Pressure, h.WaitingRequests, h.RunningRequests = st.s.Pressure, st.s.WaitingRequests, st.s.RunningRequests
		}
		h.Score = float64(tokens) * fresh
		if !v1 {
			h.Score *= pressureFactor(ps, h.Pressure) * sloBias(ps, fresh, tight) * distinguishingPower(c.mad, total)
		}
		hints = append(hints, h)
	}
	if len(hints) == 0 {
		res.Hints = hints
		return detailBelowMinTokens
	}
	top := hints[0].Score
	for i := range hints {
		top = max(top, hints[i].Score)
	}
	if top < ps.floor {
		res.Hints = hints[:0]
		return detailBelowFloor
	}
	sortHints(hints)
	res.Hints = capHints(hints, ps, req)
	res.Reason, res.Detail = PrefixMatch, detailMatch
	if req.Explain {
		ix.explainMatch(ps, req, total, tight, v1, res)
	}
	return detailMatch
}

// The factors of contract §5.4, shared by the score and its explanation so the
// two cannot differ. pressure is 0 when the stats are stale or absent,
// which makes the factor 1.
func pressureFactor(ps *polState, pressure float64) float64 {
	return max(0, 1-ps.p.PressureWeight*pressure)
}

func sloBias(ps *polState, fresh float64, tight bool) float64 {
	if tight {
		return 1 + fresh*ps.p.SLOTightBias
	}
	return 1
}

func distinguishingPower(mad uint32, total int) float64 {
	if total > 0 {
		return max(0, 1-float64(mad)/float64(total))
	}
	return 0
}

// explainMatch fills res.Factors, parallel to the final PREFIX_MATCH
// hints, from each hint and its candidate with the functions the score
// used; it runs after the sort and the cap, so it costs maxReplicas
// candidate scans and the ranking itself never carries factors.
func (ix *Index) explainMatch(ps *polState, req *LookupRequest, total int, tight, v1 bool, res *Result) {
	m := ix.m
	fs := res.Factors[:0]
	for i := range res.Hints {
		h := &res.Hints[i]
		var c *cand
		for j := range res.cands {
			// The hint's id is the interned string itself: == compares
			// pointers first.
			if m.reps.ids[res.cands[j].rep] == h.ReplicaID {
				c = &res.cands[j]
				break
			}
		}
		f := Factors{Freshness: h.Freshness, PressureFactor: 1, SLOBias: 1, DistinguishingPower: 1, MatchingAtDepth: c.mad, TotalReplicas: uint32(total)}
		if st := m.stats[c.rep]; st != nil && statsFresh(req.NowMs, st.s.ObservedAtMs, ps.freshMs) {
			f.StatsFresh = true
		}
		if !v1 { // v1 does not apply the other factors: reported as 1
			f.PressureFactor = pressureFactor(ps, h.Pressure)
			f.SLOBias = sloBias(ps, h.Freshness, tight)
			f.DistinguishingPower = distinguishingPower(c.mad, total)
		}
		fs = append(fs, f)
	}
	res.Factors = fs
}

func capHints(h []Hint, ps *polState, req *LookupRequest) []Hint {
	n := int(ps.p.MaxReplicas)
	if req.MaxReplicas != 0 {
		n = int(req.MaxReplicas)
	}
	if len(h) > n {
		h = h[:n]
	}
	return h
}

// hintLess is the response order: score desc, then replica id asc.
func hintLess(a, b *Hint) bool {
	if a.Score != b.Score {
		return a.Score > b.Score
	}
	return a.ReplicaID < b.ReplicaID
}

// sortHints is an insertion sort: lists are a handful of replicas, and
// sort.Slice would allocate on the hot path.
func sortHints(h []Hint) {
	for i := 1; i < len(h); i++ {
		for j := i; j > 0 && hintLess(&h[j], &h[j-1]); j-- {
			h[j], h[j-1] = h[j-1], h[j]
		}
	}
}
