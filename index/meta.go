package index

// Meta state: everything that is not a block or a residency. It is small
// (O(partitions + replicas + stats)) and guarded by Index.metaMu: lookups
// hold the read lock for their whole run, the writer takes the write lock
// for short, bounded updates (once per event, never across a scan).

// smKey is (scheme, model).
type smKey struct{ scheme, model string }

// smtKey is (scheme, model, tenant).
type smtKey struct{ scheme, model, tenant string }

// partEnt is one partition with live residencies. Its id is never reused:
// a partition that empties is deleted and gets a fresh id if it returns, so
// a stale id can never alias another partition's blocks.
type partEnt struct {
	id    uint32
	p     Partition
	hash  uint64 // partitionHash(p), for digests
	res   int64  // live residencies
	level *lvl   // (scheme)
	sm    *smEnt // (scheme, model)
	smt   *lvl   // (scheme, model, tenant)
}

// lvl counts live residencies under a classification level.
type lvl struct{ res int64 }

// smEnt is a (scheme, model) level: its residency count and, per replica,
// how many live residencies it holds there (the block half of the serving
// set).
type smEnt struct {
	res     int64
	holders map[uint32]int64
}

// statLvl records which replicas' current stats name a level, with their
// observed_at, and the newest of those, so "seen in fresh stats" is one
// comparison at lookup time.
type statLvl struct {
	by  map[uint32]int64
	max int64
}

func (s *statLvl) recompute() {
	s.max = 0
	first := true
	for _, at := range s.by {
		if first || at > s.max {
			s.max, first = at, false
		}
	}
}

// statRec is a replica's current stats (a private deep copy).
type statRec struct {
	s ReplicaStats
	// keys the stats contribute to, kept to undo them on replacement.
	schemes []string
	sms     []smKey
	smts    []smtKey
}

// replica interning: residencies store a 20-bit index instead of a string.
type replicaTable struct {
	ids    []string
	hashes []uint64 // strHash(id): rendezvous weights and digests
	byID   map[string]uint32
	res    []int64 // live residencies per replica
}

type meta struct {
	parts     map[Partition]*partEnt
	partsByID map[uint32]*partEnt
	nextPart  uint32
	schemes   map[string]*lvl
	sms       map[smKey]*smEnt
	smts      map[smtKey]*lvl

	statScheme map[string]*statLvl
	statSM     map[smKey]*statLvl
	statSMT    map[smtKey]*statLvl
	stats      map[uint32]*statRec
	// statsMax is the newest observed_at over all stats: the index is
	// "globally empty" for classification when it holds no residency and
	// no stats fresher than StatsFreshness.
	statsMax int64

	reps      replicaTable
	liveReps  int // replicas with residencies or stats
	totalRes  int64
	totalBlks int64
}

func newMeta() *meta {
	return &meta{
		parts:      map[Partition]*partEnt{},
		partsByID:  map[uint32]*partEnt{},
		schemes:    map[string]*lvl{},
		sms:        map[smKey]*smEnt{},
		smts:       map[smtKey]*lvl{},
		statScheme: map[string]*statLvl{},
		statSM:     map[smKey]*statLvl{},
		statSMT:    map[smtKey]*statLvl{},
		stats:      map[uint32]*statRec{},
		reps:       replicaTable{byID: map[string]uint32{}},
	}
}

// replicaIdx returns the interned index of id, interning it if new (writer
// only, under metaMu). ok is false when the table is full.
func (m *meta) replicaIdx(id string) (uint32, bool) {
	if i, ok := m.reps.byID[id]; ok {
		return i, true
	}
	if len(m.reps.ids) >= maxReplicas {
		return 0, false
	}
	i := uint32(len(m.reps.ids))
	m.reps.ids = append(m.reps.ids, id)
	m.reps.hashes = append(m.reps.hashes, strHash(id))
	m.reps.res = append(m.reps.res, 0)
	m.reps.byID[id] = i
	return i, true
}

// partition returns the entry of p, creating it (writer only, metaMu held).
func (m *meta) partition(p Partition) *partEnt {
	if pe := m.parts[p]; pe != nil {
		return pe
	}
	m.nextPart++
	pe := &partEnt{id: m.nextPart, p: p, hash: partitionHash(p)}
	if pe.level = m.schemes[p.Scheme]; pe.level == nil {
		pe.level = &lvl{}
		m.schemes[p.Scheme] = pe.level
	}
	k := smKey{p.Scheme, p.Model}
	if pe.sm = m.sms[k]; pe.sm == nil {
		pe.sm = &smEnt{holders: map[uint32]int64{}}
		m.sms[k] = pe.sm
	}
	tk := smtKey{p.Scheme, p.Model, p.Tenant}
	if pe.smt = m.smts[tk]; pe.smt == nil {
		pe.smt = &lvl{}
		m.smts[tk] = pe.smt
	}
	m.parts[p] = pe
	m.partsByID[pe.id] = pe
	return pe
}

// addRes applies a residency count delta of replica rep in partition pe and
// drops whatever reaches zero (writer only, metaMu held).
func (m *meta) addRes(pe *partEnt, rep uint32, delta int64) {
	if delta == 0 {
		return
	}
	before := m.reps.res[rep]
	m.reps.res[rep] += delta
	m.totalRes += delta
	pe.res += delta
	pe.level.res += delta
	pe.sm.res += delta
	pe.smt.res += delta
	if n := pe.sm.holders[rep] + delta; n > 0 {
		pe.sm.holders[rep] = n
	} else {
		delete(pe.sm.holders, rep)
	}
	_, hasStats := m.stats[rep]
	if !hasStats {
		if before == 0 && m.reps.res[rep] > 0 {
			m.liveReps++
		} else if before > 0 && m.reps.res[rep] == 0 {
			m.liveReps--
		}
	}
	m.dropIfEmpty(pe)
}

// dropIfEmpty deletes a partition without residencies and the levels it
// leaves empty (writer only, metaMu held).
func (m *meta) dropIfEmpty(pe *partEnt) {
	if pe.res > 0 || m.parts[pe.p] != pe {
		return
	}
	p := pe.p
	delete(m.parts, p)
	delete(m.partsByID, pe.id)
	if pe.level.res == 0 {
		delete(m.schemes, p.Scheme)
	}
	if pe.sm.res == 0 {
		delete(m.sms, smKey{p.Scheme, p.Model})
	}
	if pe.smt.res == 0 {
		delete(m.smts, smtKey{p.Scheme, p.Model, p.Tenant})
	}
}

// setStats replaces replica rep's stats (writer only, metaMu held).
func (m *meta) setStats(rep uint32, s ReplicaStats) {
	if old := m.stats[rep]; old != nil {
		for _, k := range old.schemes {
			unstat(m.statScheme, k, rep)
		}
		for _, k := range old.sms {
			unstat(m.statSM, k, rep)
		}
		for _, k := range old.smts {
			unstat(m.statSMT, k, rep)
		}
	} else if m.reps.res[rep] == 0 {
		m.liveReps++
	}
	rec := &statRec{s: copyStats(s)}
	seenS := map[string]bool{}
	for _, sc := range rec.s.HashSchemes {
		if seenS[sc] {
			continue
		}
		seenS[sc] = true
		rec.schemes = append(rec.schemes, sc)
		rec.sms = append(rec.sms, smKey{sc, rec.s.ModelID})
		for t := range rec.s.TenantHitRate {
			rec.smts = append(rec.smts, smtKey{sc, rec.s.ModelID, t})
		}
	}
	at := rec.s.ObservedAtMs
	for _, k := range rec.schemes {
		addStat(m.statScheme, k, rep, at)
	}
	for _, k := range rec.sms {
		addStat(m.statSM, k, rep, at)
	}
	for _, k := range rec.smts {
		addStat(m.statSMT, k, rep, at)
	}
	m.stats[rep] = rec
	first := true
	for _, r := range m.stats {
		if first || r.s.ObservedAtMs > m.statsMax {
			m.statsMax, first = r.s.ObservedAtMs, false
		}
	}
}

func addStat[K comparable](mp map[K]*statLvl, k K, rep uint32, at int64) {
	s := mp[k]
	if s == nil {
		s = &statLvl{by: map[uint32]int64{}}
		mp[k] = s
	}
	s.by[rep] = at
	s.recompute()
}

func unstat[K comparable](mp map[K]*statLvl, k K, rep uint32) {
	s := mp[k]
	if s == nil {
		return
	}
	delete(s.by, rep)
	if len(s.by) == 0 {
		delete(mp, k)
		return
	}
	s.recompute()
}

func copyStats(s ReplicaStats) ReplicaStats {
	s.HashSchemes = append([]string(nil), s.HashSchemes...)
	if s.TenantHitRate != nil {
		m := make(map[string]float64, len(s.TenantHitRate))
		for k, v := range s.TenantHitRate {
			m[k] = v
		}
		s.TenantHitRate = m
	}
	return s
}
