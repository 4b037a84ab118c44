package index

// No usable prefix match (contract §5.6): classification, then TENANT_HOT, then
// AFFINITY_HINT, then NO_HINT. Caller holds metaMu.RLock.

// Classification reads O(1) secondary indexes. A level is "seen" when it
// holds live residencies or when a replica's fresh stats name it. Stats
// name a scheme (HashSchemes), a (scheme, model) (ModelID × each scheme)
// and a (scheme, model, tenant) (each tenant key of TenantHitRate × each
// scheme): a replica that reports a hit rate for a tenant serves that
// tenant even before any of its blocks arrive. Stats carry no adapter, so
// only residencies make an adapter seen.
func (ix *Index) fallback(ps *polState, req *LookupRequest, prefix uint64, why string, res *Result) {
	m := ix.m
	p := &req.Partition
	now, fr := req.NowMs, ps.freshMs
	statSeen := func(s *statLvl) bool { return s != nil && statsFresh(now, s.max, fr) }

	if m.totalRes == 0 && (len(m.stats) == 0 || !statsFresh(now, m.statsMax, fr)) {
		res.Detail = detailColdStart
		return
	}
	if l := m.schemes[p.Scheme]; (l == nil || l.res == 0) && !statSeen(m.statScheme[p.Scheme]) {
		res.Reason, res.Detail = UnknownScheme, detailUnknownScheme
		return
	}
	smk := smKey{p.Scheme, p.Model}
	if p.Model != "" {
		if l := m.sms[smk]; (l == nil || l.res == 0) && !statSeen(m.statSM[smk]) {
			res.Reason, res.Detail = UnknownModel, detailUnknownModel
			return
		}
		if p.Tenant != "" {
			tk := smtKey{p.Scheme, p.Model, p.Tenant}
			if l := m.smts[tk]; (l == nil || l.res == 0) && !statSeen(m.statSMT[tk]) {
				res.Reason, res.Detail = UnknownTenant, detailUnknownTenant
				return
			}
			if p.Adapter != "" {
				if pe := m.parts[*p]; pe == nil || pe.res == 0 {
					res.Reason, res.Detail = UnknownAdapter, detailUnknownAdapter
					return
				}
			}
		}
	}

	sm, st := m.sms[smk], m.statSM[smk]
	if ps.p.EnableTenantHot && ix.tenantHot(ps, req, sm, st, res) {
		return
	}
	if ps.p.AffinityRouting && ix.affinity(ps, req, prefix, sm, st, res) {
		return
	}
	res.Detail = why
}

// tenantHot lists serving-set replicas with fresh stats whose hit rate for
// the tenant reaches TenantHotMinHitRate, best hit rate first.
func (ix *Index) tenantHot(ps *polState, req *LookupRequest, sm *smEnt, st *statLvl, res *Result) bool {
	hints := res.Hints[:0]
	if sm != nil {
		for r := range sm.holders {
			hints = ix.appendTenantHot(hints, ps, req, r)
		}
	}
	if st != nil {
		for r := range st.by {
			if sm != nil && sm.holders[r] > 0 {
				continue // counted above
			}
			// appendTenantHot checks freshness, which is what makes a
			// stats-only replica part of the serving set.
			hints = ix.appendTenantHot(hints, ps, req, r)
		}
	}
	if len(hints) == 0 {
		res.Hints = hints
		return false
	}
	sortHints(hints)
	res.Hints = capHints(hints, ps, req)
	res.Reason, res.Detail = TenantHot, detailTenantHot
	if req.Explain {
		total := uint32(servingCount(sm, st, req.NowMs, ps.freshMs))
		fs := res.Factors[:0]
		for i := range res.Hints {
			h := &res.Hints[i]
			// Every listed replica has fresh stats; its score is its hit
			// rate for the tenant.
			fs = append(fs, Factors{PressureFactor: pressureFactor(ps, h.Pressure), SLOBias: 1, TotalReplicas: total, TenantHitRate: h.Score, StatsFresh: true})
		}
		res.Factors = fs
	}
	return true
}

func (ix *Index) appendTenantHot(h []Hint, ps *polState, req *LookupRequest, r uint32) []Hint {
	st := ix.m.stats[r]
	if st == nil || !statsFresh(req.NowMs, st.s.ObservedAtMs, ps.freshMs) {
		return h
	}
	hr, ok := st.s.TenantHitRate[req.Partition.Tenant]
	if !ok || !(hr >= ps.p.TenantHotMinHitRate) {
		return h
	}
	return append(h, Hint{
		ReplicaID:       ix.m.reps.ids[r],
		Score:           hr,
		Pressure:        st.s.Pressure,
		WaitingRequests: st.s.WaitingRequests,
		RunningRequests: st.s.RunningRequests,
	})
}

// affinity picks one serving-set replica by rendezvous (highest random
// weight) hashing of the prefix hash: each replica's weight depends only on
// (prefix, replica id), so a join or leave moves only the keys the changed
// replica wins or loses, about 1/N of them.
func (ix *Index) affinity(ps *polState, req *LookupRequest, prefix uint64, sm *smEnt, st *statLvl, res *Result) bool {
	m := ix.m
	best, bestW, found := uint32(0), uint64(0), false
	consider := func(r uint32) {
		w := mix2(prefix, m.reps.hashes[r])
		if !found || w > bestW || (w == bestW && m.reps.ids[r] < m.reps.ids[best]) {
			best, bestW, found = r, w, true
		}
	}
	if sm != nil {
		for r := range sm.holders {
			consider(r)
		}
	}
	if st != nil {
		for r, at := range st.by {
			if statsFresh(req.NowMs, at, ps.freshMs) && (sm == nil || sm.holders[r] == 0) {
				consider(r)
			}
		}
	}
	if !found {
		return false
	}
	h := Hint{ReplicaID: m.reps.ids[best]}
	fresh := false
	if s := m.stats[best]; s != nil && statsFresh(req.NowMs, s.s.ObservedAtMs, ps.freshMs) {
		h.Pressure, h.WaitingRequests, h.RunningRequests, fresh = s.s.Pressure, s.s.WaitingRequests, s.s.RunningRequests, true
	}
	res.Hints = append(res.Hints[:0], h)
	if req.Explain {
		res.Factors = append(res.Factors[:0], Factors{PressureFactor: pressureFactor(ps, h.Pressure), SLOBias: 1,
			TotalReplicas: uint32(servingCount(sm, st, req.NowMs, ps.freshMs)), Rendezvous: true, StatsFresh: fresh})
	}
	res.Reason, res.Detail = AffinityHint, detailAffinity
	return true
}
