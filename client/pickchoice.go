package client

import (
	"math"
	"slices"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// busy is a candidate's requests in flight for ties: this picker's and
// the other pickers' reported ones, or the engine's running count when
// larger.
func (c *PickCost) busy() int { return max(c.InFlight+int(c.OthersRunning), int(c.ReportedRunning)) }

// loaded is a candidate's known requests in flight, for the load bound.
func (c *PickCost) loaded() int { return c.InFlight + int(c.OthersRunning) }

// softmaxCut is the exponent below which a softmax weight counts as 0.
const softmaxCut = 20

// best returns the candidate to pick within bound requests in flight
// (-1 when none is): the best, ties broken, or with a Temperature a
// softmax draw over the best and the costlier candidates. With a key
// (non-zero) the ties and the draw are the key's rendezvous (see
// Picker's doc), else they come from the Seed's stream.
func (p *Picker) best(costs []PickCost, rank []int, bound, scale float64, key uint64) int {
	p.ties = p.ties[:0]
	for i := range costs {
		if float64(costs[i].loaded()+1) > bound {
			continue
		}
		if len(p.ties) == 0 {
			p.ties = append(p.ties, i)
			continue
		}
		switch cmpPick(&costs[i], rank[i], &costs[p.ties[0]], rank[p.ties[0]]) {
		case -1:
			p.ties = append(p.ties[:0], i)
		case 0:
			p.ties = append(p.ties, i)
		}
	}
	if len(p.ties) == 0 {
		return -1
	}
	if scale > 0 {
		if key != 0 {
			return p.keyedDraw(costs, bound, scale, key)
		}
		return p.draw(costs, bound, scale)
	}
	if len(p.ties) == 1 {
		return p.ties[0]
	}
	if key != 0 {
		top, topG := -1, math.Inf(-1)
		for _, i := range p.ties {
			if g := rendezvousGumbel(key, costs[i].Replica); top < 0 || g > topG {
				top, topG = i, g
			}
		}
		return top
	}
	return p.ties[p.rng.IntN(len(p.ties))]
}

// eligible reports whether candidate i takes part in the softmax: within
// bound, and either one of the best's ties or costlier by less than
// softmaxCut scales (a candidate as cheap as the best but busier is out).
func (p *Picker) eligible(costs []PickCost, i int, bound, scale, minCost float64) bool {
	switch {
	case float64(costs[i].loaded()+1) > bound:
		return false
	case costs[i].Cost > minCost:
		return (costs[i].Cost-minCost)/scale < softmaxCut
	}
	return costs[i].Cost == minCost && slices.Contains(p.ties, i)
}

// draw is the softmax draw from the Seed's stream.
func (p *Picker) draw(costs []PickCost, bound, scale float64) int {
	minCost := costs[p.ties[0]].Cost
	p.weights = p.weights[:0]
	sum := 0.0
	for i := range costs {
		x := 0.0
		if p.eligible(costs, i, bound, scale, minCost) {
			x = math.Exp(-(costs[i].Cost - minCost) / scale)
		}
		p.weights = append(p.weights, x)
		sum += x
	}
	u := p.rng.Float64() * sum
	last := -1
	for i, x := range p.weights {
		if x == 0 {
			continue
		}
		last = i
		if u < x {
			return i
		}
		u -= x
	}
	return last
}

// keyedDraw is the softmax draw made by the key (the Gumbel-max form of
// the same distribution over keys): the eligible candidate with the
// highest −(cost − best) / scale + G(key, replica) wins.
func (p *Picker) keyedDraw(costs []PickCost, bound, scale float64, key uint64) int {
	minCost := costs[p.ties[0]].Cost
	top, topScore := -1, math.Inf(-1)
	for i := range costs {
		if !p.eligible(costs, i, bound, scale, minCost) {
			continue
		}
		s := -(costs[i].Cost-minCost)/scale + rendezvousGumbel(key, costs[i].Replica)
		if top < 0 || s > topScore {
			top, topScore = i, s
		}
	}
	return top
}

// cmpPick orders two candidates: −1 when a is better, 1 when b is, 0 for
// a tie.
func cmpPick(a *PickCost, ra int, b *PickCost, rb int) int {
	if a.Cost != b.Cost {
		return cmpF(a.Cost, b.Cost)
	}
	if a.busy() != b.busy() {
		return cmpF(float64(a.busy()), float64(b.busy()))
	}
	if hintRank(a.Reason) != hintRank(b.Reason) {
		return cmpF(float64(hintRank(a.Reason)), float64(hintRank(b.Reason)))
	}
	if a.Reason == pb.ReasonCode_PREFIX_MATCH && ra != rb {
		return cmpF(float64(ra), float64(rb))
	}
	return 0
}

func cmpF(a, b float64) int {
	if a < b {
		return -1
	}
	return 1
}
