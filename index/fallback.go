package index

// No usable prefix match (SPEC 5): classification, then TENANT_HOT, then
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
	total := uint32(servingCount(sm, st, req.NowMs, ps.freshMs))
	hints, fs := res.Hints[:0], res.Factors[:0]
	if sm != nil {
		for r := range sm.holders {
			hints, fs = ix.appendTenantHot(hints, fs, ps, req, r, total)
		}
	}
	if st != nil {
		for r := range st.by {
			if sm != nil && sm.holders[r] > 0 {
				continue // counted above
			}
			// appendTenantHot checks freshness, which is what makes a
			// stats-only replica part of the serving set.
			hints, fs = ix.appendTenantHot(hints, fs, ps, req, r, total)
		}
	}
	if len(hints) == 0 {
		res.Hints, res.Factors = hints, fs
		return false
	}
	sortHints(hints, fs)
	res.Hints, res.Factors = capHints(hints, fs, ps, req)
	res.Reason, res.Detail = TenantHot, detailTenantHot
	return true
}

func (ix *Index) appendTenantHot(h []Hint, f []Factors, ps *polState, req *LookupRequest, r uint32, total uint32) ([]Hint, []Factors) {
	st := ix.m.stats[r]
	if st == nil || !statsFresh(req.NowMs, st.s.ObservedAtMs, ps.freshMs) {
		return h, f
	}
	hr, ok := st.s.TenantHitRate[req.Partition.Tenant]
	if !ok || !(hr >= ps.p.TenantHotMinHitRate) {
		return h, f
	}
	h = append(h, Hint{
		ReplicaID:       ix.m.reps.ids[r],
		Score:           hr,
		Pressure:        st.s.Pressure,
		RequestsWaiting: st.s.RequestsWaiting,
		RequestsRunning: st.s.RequestsRunning,
	})
	if req.Explain {
		f = append(f, Factors{
			PressureFactor: max(0, 1-ps.p.PressureWeight*st.s.Pressure),
			SLOBias:        1,
			TotalReplicas:  total,
			TenantHitRate:  hr,
			StatsFresh:     true,
		})
	}
	return h, f
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
	f := Factors{PressureFactor: 1, SLOBias: 1, Rendezvous: true}
	if s := m.stats[best]; s != nil && statsFresh(req.NowMs, s.s.ObservedAtMs, ps.freshMs) {
		h.Pressure, h.RequestsWaiting, h.RequestsRunning = s.s.Pressure, s.s.RequestsWaiting, s.s.RequestsRunning
		f.PressureFactor, f.StatsFresh = max(0, 1-ps.p.PressureWeight*s.s.Pressure), true
	}
	res.Hints = append(res.Hints[:0], h)
	if req.Explain {
		f.TotalReplicas = uint32(servingCount(sm, st, req.NowMs, ps.freshMs))
		res.Factors = append(res.Factors[:0], f)
	}
	res.Reason, res.Detail = AffinityHint, detailAffinity
	return true
}
