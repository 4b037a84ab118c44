package client

import "math"

// Inflight is one request the gateway sent, as the picker tracks it.
// Call FirstToken when its first token arrives and Done when it ends
// (Done alone is enough for a request that failed before any token).
// Calls after the first of each kind do nothing.
type Inflight struct {
	p                *Picker
	replica          string
	uncached         float64
	firstSeen, ended bool
}

// Start records that the gateway sent the request of d to d.Replica; the
// replica's queued tokens grow by the chosen candidate's UncachedTokens
// until FirstToken. Start of an empty Decision returns an Inflight whose
// calls do nothing.
func (p *Picker) Start(d *Decision) *Inflight {
	if d.Index < 0 || d.Index >= len(d.Costs) {
		return &Inflight{firstSeen: true, ended: true}
	}
	return p.StartOn(d.Replica, d.Costs[d.Index].UncachedTokens)
}

// StartOn records a request sent to replica with uncachedTokens left to
// prefill (for a gateway that overrode the Decision).
func (p *Picker) StartOn(replica string, uncachedTokens int) *Inflight {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.replicas[replica]
	if l == nil {
		l = &replicaLoad{}
		p.replicas[replica] = l
	}
	u := float64(max(0, uncachedTokens))
	l.queuedTokens += u
	l.prefilling++
	l.inflight++
	p.sentReq++
	p.sentTok += u
	return &Inflight{p: p, replica: replica, uncached: u}
}

// FirstToken records the request's first token: its prefill no longer
// queues others.
func (r *Inflight) FirstToken() {
	if r.firstSeen {
		return
	}
	r.firstSeen = true
	r.p.mu.Lock()
	defer r.p.mu.Unlock()
	l := r.p.replicas[r.replica]
	l.queuedTokens = math.Max(0, l.queuedTokens-r.uncached)
	l.prefilling--
}

// Done records the request's end (its last token, or its failure).
func (r *Inflight) Done() {
	if r.ended {
		return
	}
	r.FirstToken()
	r.ended = true
	r.p.mu.Lock()
	defer r.p.mu.Unlock()
	r.p.replicas[r.replica].inflight--
}
