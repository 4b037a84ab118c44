package index

import "github.com/inference-cache/inference-cache/policy"

// Ranking (SPEC 5). Every factor is computed from replicated state and the
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
// was dropped. With req.Explain it also fills res.Factors, parallel to
// res.Hints; without, the factors stay in locals. Caller holds
// metaMu.RLock.
func (ix *Index) rank(ps *polState, pe *partEnt, req *LookupRequest, res *Result) string {
	m := ix.m
	now := req.NowMs
	total := servingCount(pe.sm, m.statSM[smKey{pe.p.Scheme, pe.p.Model}], now, ps.freshMs)
	tight := req.SLOTTFTMs > 0 && int64(req.SLOTTFTMs) < ps.sloMs
	v1 := ps.p.RankingVersion == policy.RankingV1
	hints, fs := res.Hints[:0], res.Factors[:0]
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
		pf, bias, dp := 1.0, 1.0, 0.0
		st := m.stats[c.rep]
		statsOK := st != nil && statsFresh(now, st.s.ObservedAtMs, ps.freshMs)
		if statsOK {
			h.Pressure, h.RequestsWaiting, h.RequestsRunning = st.s.Pressure, st.s.RequestsWaiting, st.s.RequestsRunning
			pf = max(0, 1-ps.p.PressureWeight*h.Pressure)
		}
		if tight {
			bias = 1 + fresh*ps.p.SLOTightBias
		}
		if total > 0 {
			dp = max(0, 1-float64(c.mad)/float64(total))
		}
		h.Score = float64(tokens) * fresh
		if v1 {
			pf, bias, dp = 1, 1, 1 // v1 does not apply them: reported as 1
		} else {
			h.Score *= pf * bias * dp
		}
		hints = append(hints, h)
		if req.Explain {
			fs = append(fs, Factors{Freshness: fresh, PressureFactor: pf, SLOBias: bias, DistinguishingPower: dp,
				MatchingAtDepth: c.mad, TotalReplicas: uint32(total), StatsFresh: statsOK})
		}
	}
	res.Hints, res.Factors = hints, fs
	if len(hints) == 0 {
		return detailBelowMinTokens
	}
	top := hints[0].Score
	for i := range hints {
		top = max(top, hints[i].Score)
	}
	if top < ps.floor {
		res.Hints, res.Factors = hints[:0], fs[:0]
		return detailBelowFloor
	}
	sortHints(hints, fs)
	res.Hints, res.Factors = capHints(hints, fs, ps, req)
	res.Reason, res.Detail = PrefixMatch, detailMatch
	return detailMatch
}

// capHints keeps the first maxReplicas hints, and their factors when f
// is parallel to h.
func capHints(h []Hint, f []Factors, ps *polState, req *LookupRequest) ([]Hint, []Factors) {
	n := int(ps.p.MaxReplicas)
	if req.MaxReplicas != 0 {
		n = int(req.MaxReplicas)
	}
	if len(h) > n {
		h = h[:n]
	}
	if len(f) > n {
		f = f[:n]
	}
	return h, f
}

// hintLess is the response order: score desc, then replica id asc.
func hintLess(a, b *Hint) bool {
	if a.Score != b.Score {
		return a.Score > b.Score
	}
	return a.ReplicaID < b.ReplicaID
}

// sortHints is an insertion sort: lists are a handful of replicas, and
// sort.Slice would allocate on the hot path. f is empty (no Explain) or
// parallel to h, and is permuted with it.
func sortHints(h []Hint, f []Factors) {
	explain := len(f) == len(h) && len(f) > 0
	for i := 1; i < len(h); i++ {
		for j := i; j > 0 && hintLess(&h[j], &h[j-1]); j-- {
			h[j], h[j-1] = h[j-1], h[j]
			if explain {
				f[j], f[j-1] = f[j-1], f[j]
			}
		}
	}
}
