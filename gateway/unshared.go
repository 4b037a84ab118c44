package gateway

import (
	"slices"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// A pick's load must not reach a node before the pick: a lookup that saw
// a replica's new load without the provisional residency that explains
// it would steer the request's siblings away from the replica they
// should share (contract §5.12). The load share's reports go out on
// their own ticker, so the gateway keeps the picks not yet pushed in a
// ledger and leaves their load out of each report until the push that
// carries them is answered.

// unsharedPick is one pick whose push has not been answered: its
// replica, the prefill tokens its flight added, and when it was made.
type unsharedPick struct {
	replica string
	tokens  float64
	at      time.Time
	turn    uint64 // the lookup's turn (contract §5.13), settled by the report its push carries, and again by the next; 0 = none
}

// unsharedMaxAge drops a ledger entry whose push never came (the push
// queue overflowed, the pusher stopped): past one push's time-out its
// load is reported like any other.
const unsharedMaxAge = 2 * time.Second

// holdLoad puts the pick id's load in the ledger, with the turn its
// lookup took, and reports whether it did; called by Decision.Start
// under prov.order's write lock.
func (p *provState) holdLoad(id uint64, replica string, tokens float64, turn uint64) bool {
	if p.push == nil || id == 0 {
		return false
	}
	if p.unshared == nil {
		p.unshared = map[uint64]unsharedPick{}
	}
	now := time.Now()
	if p.unsharedAdds++; p.unsharedAdds%unsharedSweepEvery == 0 {
		// Entries whose push never came are dropped here; the reports
		// have counted their load since unsharedMaxAge.
		for k, u := range p.unshared {
			if now.Sub(u.at) > unsharedMaxAge {
				delete(p.unshared, k)
			}
		}
	}
	p.unshared[id] = unsharedPick{replica: replica, tokens: tokens, at: now, turn: turn}
	return true
}

// unsharedSweepEvery is how many picks holdLoad records between sweeps
// of the entries past unsharedMaxAge: amortized, a sweep costs little
// per pick.
const unsharedSweepEvery = 1024

// pushed takes the picks a push carried out of the ledger
// (client.PickShareConfig.AfterDelta).
// It returns the turns of those picks, to be settled again by the report
// that now carries their load (the push's report settled them, unless
// the push failed).
func (p *provState) pushed(ids []uint64) (turns []uint64) {
	p.order.Lock()
	for _, id := range ids {
		if u, ok := p.unshared[id]; ok && u.turn != 0 {
			turns = append(turns, u.turn)
		}
		delete(p.unshared, id)
	}
	p.order.Unlock()
	return turns
}

// sharedLoad is the load the gateway reports (client.LoadShareConfig.Load):
// the picker's requests in flight less the picks not pushed yet.
func (g *Gateway) sharedLoad() []*pb.PickerReplicaLoad {
	loads, _ := g.loadWith(nil)
	return loads
}

// pushLoad is the load report a picks push carries
// (client.PickShareConfig.LoadFor): the picker's requests in flight less
// the picks not pushed yet, but with the load of picked, the picks of
// that push, which reach every node with it; it settles the turns their
// lookups took (contract §5.13). They stay in the ledger, out of the
// periodic reports, until the push is answered (pushed).
func (g *Gateway) pushLoad(picked []uint64) *pb.ReportPickerLoadRequest {
	loads, turns := g.loadWith(picked)
	r := g.share.Carried(turns, loads)
	g.prov.carrying.Store(r != nil)
	return r
}

// loadWith is the picker's load in flight less the ledger's picks other
// than carried, and the turns of carried's picks. Read under prov.order
// with the ledger, so a pick started at the same time is either in both
// or in neither.
func (g *Gateway) loadWith(carried []uint64) (loads []*pb.PickerReplicaLoad, turns []uint64) {
	p := &g.prov
	p.order.RLock()
	defer p.order.RUnlock()
	loads = g.picker.InFlight()
	for _, id := range carried {
		if u, ok := p.unshared[id]; ok && u.turn != 0 {
			turns = append(turns, u.turn)
		}
	}
	if len(p.unshared) == 0 {
		return loads, turns
	}
	in := func(id uint64) bool { return slices.Contains(carried, id) }
	if len(carried) > 16 {
		// A push gathered in a burst: a set keeps the scan linear.
		set := make(map[uint64]struct{}, len(carried))
		for _, id := range carried {
			set[id] = struct{}{}
		}
		in = func(id uint64) bool { _, ok := set[id]; return ok }
	}
	now := time.Now()
	for id, u := range p.unshared {
		if now.Sub(u.at) > unsharedMaxAge || in(id) {
			continue // its push never came, or this is it: counted (holdLoad drops the first)
		}
		for _, l := range loads {
			if l.ReplicaId != u.replica {
				continue
			}
			l.PrefillingRequests -= min(l.PrefillingRequests, 1)
			l.RunningRequests -= min(l.RunningRequests, 1)
			l.PrefillTokens -= min(l.PrefillTokens, uint64(u.tokens+0.5))
			break
		}
	}
	out := loads[:0]
	for _, l := range loads {
		if l.PrefillingRequests+l.RunningRequests > 0 || l.PrefillTokens > 0 {
			out = append(out, l)
		}
	}
	return out, turns
}
