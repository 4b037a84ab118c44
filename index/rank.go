package index

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
// was dropped. Caller holds metaMu.RLock.
func (ix *Index) rank(ps *polState, pe *partEnt, req *LookupRequest, res *Result) string {
	m := ix.m
	now := req.NowMs
	total := servingCount(pe.sm, m.statSM[smKey{pe.p.Scheme, pe.p.Model}], now, ps.freshMs)
	tight := req.SLOTTFTMs > 0 && int64(req.SLOTTFTMs) < ps.sloMs
	v1 := ps.p.RankingVersion == "v1"
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
		f := Factors{Freshness: fresh, PressureFactor: 1, SLOBias: 1, MatchingAtDepth: c.mad, TotalReplicas: uint32(total)}
		var pressure float64
		if st := m.stats[c.rep]; st != nil && statsFresh(now, st.s.ObservedAtMs, ps.freshMs) {
			f.StatsFresh = true
			pressure = st.s.Pressure
			f.PressureFactor = max(0, 1-ps.p.PressureWeight*pressure)
		}
		if tight {
			f.SLOBias = 1 + fresh*ps.p.SLOTightBias
		}
		if total > 0 {
			f.DistinguishingPower = max(0, 1-float64(c.mad)/float64(total))
		}
		score := float64(tokens) * fresh
		if !v1 {
			score *= f.PressureFactor * f.SLOBias * f.DistinguishingPower
		}
		hints = append(hints, Hint{
			ReplicaID:     m.reps.ids[c.rep],
			Score:         score,
			MatchedTokens: tokens,
			MatchedBlocks: c.depth,
			Freshness:     fresh,
			AgeMs:         uint64(age),
			Pressure:      pressure,
			Factors:       f,
		})
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
	return detailMatch
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
