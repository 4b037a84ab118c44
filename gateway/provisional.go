package gateway

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
	"github.com/inference-cache/inference-cache/provisional"
)

// ProvisionalConfig configures a Gateway's provisional residencies
// (contract §5.12): each request it sends records the request's blocks on
// that replica in a local table, which the gateway's next decisions merge
// into their lookup's answer at once, and pushes the pick to the cluster,
// whose lookups merge it for every other gateway. Only StrategyPicker
// records picks.
type ProvisionalConfig struct {
	// Off records nothing: no local table, no pushes.
	Off bool
	// NoPush keeps the local table but pushes nothing. Pushes go out only
	// when Config.Lookup can send them (a *client.Client can), or when
	// Push.Manual is set (the caller sends them: Gateway.PickShare).
	NoPush bool
	// MaxAge is each pick's max age; 0 = provisional.DefaultMaxAge
	// (10 s), else provisional.MinMaxAge to provisional.MaxMaxAge.
	MaxAge time.Duration
	// MaxBlocks bounds the local table's (pick, block) entries; 0 =
	// provisional.DefaultMaxBlocks. A pick past it is not recorded
	// (Gateway.ProvisionalStats().Refused).
	MaxBlocks int
	// Now is the local table's clock (expiry); nil = time.Now. A
	// simulation passes its virtual clock.
	Now func() time.Time
	// Push configures the pushes; its PickerID is the gateway's
	// (Gateway.PickerID, or a fresh client.DefaultPickerID when the
	// gateway shares no load).
	Push client.PickShareConfig
	// Sink, when set, receives each pick, first token and removal as a
	// delta push, synchronously from Decision.Start, Flight.FirstToken
	// and Flight.Fail, in place of the
	// SDK's pusher: a simulation applies it to its cluster's store after
	// its modelled delay, on its virtual clock. It must not block.
	Sink func(provisional.Push)
}

// provSweepEvery is how often the local table drops expired picks
// (reads ignore them anyway).
const provSweepEvery = time.Second

// provState is a Gateway's provisional residencies.
type provState struct {
	table *provisional.Store // nil = off
	push  *client.PickShare  // nil = not pushing
	// order makes a pick and its load one step: Decision.Start records
	// both under the write lock; Decide (mergeOwnPicks, the picker's
	// costs) and the load reports (sharedLoad) read both under the read
	// lock, so neither sees a pick's load without the pick.
	order sync.RWMutex
	// unshared is the ledger of picks not pushed yet (unshared.go),
	// under order.
	unshared     map[uint64]unsharedPick
	unsharedAdds uint64 // picks recorded in it, for its sweeps
	// carrying: the push in flight carries a load report
	// (client.LoadShare.Carried), to be answered when it returns; the
	// pusher is one goroutine with one push in flight.
	carrying atomic.Bool
	id       string
	maxAge   time.Duration
	now      func() time.Time
	seq      atomic.Uint64 // the local table's push sequence
	next     atomic.Uint64 // pick ids
	swept    atomic.Int64  // unix ns of the last sweep, on the table's clock
}

// startProvisional makes the local table and starts the pushes.
func (g *Gateway) startProvisional() error {
	c := g.cfg.Provisional
	if c.Off || g.cfg.Strategy != StrategyPicker {
		return nil
	}
	if c.MaxAge != 0 && (c.MaxAge < provisional.MinMaxAge || c.MaxAge > provisional.MaxMaxAge) {
		return fmt.Errorf("gateway: provisional max age %v: want %v to %v", c.MaxAge, provisional.MinMaxAge, provisional.MaxMaxAge)
	}
	p := &g.prov
	p.now = c.Now
	if p.now == nil {
		p.now = time.Now
	}
	p.table = provisional.New(provisional.Config{MaxBlocks: c.MaxBlocks, Now: p.now})
	p.maxAge = c.MaxAge
	p.id = g.PickerID()
	if p.id == "" {
		p.id = client.DefaultPickerID()
	}
	// Pick ids from the clock: a restarted gateway under the same picker
	// id does not reuse one.
	p.next.Store(uint64(time.Now().UnixNano()))
	if to, ok := g.cfg.Lookup.(client.PicksSender); (ok || c.Push.Manual) && !c.NoPush && c.Sink == nil {
		pc := c.Push
		pc.PickerID = p.id
		if share := g.share; share != nil && pc.AfterDelta == nil {
			// The pick's load rides in its push, after the picks at every
			// node, and settles the turns of their lookups (contract
			// §5.13); the periodic reports carry it once the push is
			// answered, and settle the turns again should the push have
			// failed (a turn settled twice stays settled).
			pc.LoadFor = g.pushLoad
			pc.AfterDelta = func(ids []uint64) {
				for _, t := range p.pushed(ids) {
					share.Settle(t)
				}
				if p.carrying.Swap(false) {
					share.Answered() // kicks a report
				} else {
					share.Kick()
				}
			}
		}
		var err error
		if p.push, err = client.StartPickShare(to, func(within time.Duration) []provisional.Pick { return p.table.Live(p.id, within) }, pc); err != nil {
			return fmt.Errorf("gateway: share picks: %w", err)
		}
	}
	return nil
}

// ProvisionalTable is the gateway's local table of its own picks (nil
// when off): a simulation reads it, and its Stats.
func (g *Gateway) ProvisionalTable() *provisional.Store { return g.prov.table }

// PickShare is the gateway's pusher of picks (nil when not pushing): a
// Manual one is driven through it.
func (g *Gateway) PickShare() *client.PickShare { return g.prov.push }

func partitionOf(lr *pb.LookupRouteRequest) provisional.Partition {
	return provisional.Partition{Scheme: lr.GetHashScheme(), Model: lr.GetModelId(), Tenant: lr.GetTenantId(), Adapter: lr.GetAdapterId()}
}

// mergeOwnPicks folds the gateway's own picks on d's key into resp (nil
// = no answer: one is made when a pick matches), as the server does
// (provisional.Merge), and drops the picks the answer's confirmed hints
// cover.
func (g *Gateway) mergeOwnPicks(d *Decision, resp *pb.LookupRouteResponse) *pb.LookupRouteResponse {
	p := &g.prov
	if p.table == nil || d.key == nil || len(d.key.BlockHashes) == 0 {
		return resp
	}
	if now := p.now().UnixNano(); now-p.swept.Load() >= int64(provSweepEvery) {
		p.swept.Store(now)
		p.table.Sweep()
	}
	part := partitionOf(d.key)
	var buf [4]provisional.Match
	if len(p.table.At().Matches(buf[:0], part, d.key.BlockHashes)) == 0 {
		return resp
	}
	// Merged into a copy: the answer may be shared (a cache, a test's
	// fake). Without an answer (no lookup service, fail-open) the
	// gateway's own picks still place the request.
	if resp == nil {
		resp = &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_NO_HINT}
	} else {
		resp = proto.Clone(resp).(*pb.LookupRouteResponse)
	}
	p.table.MergeInto(resp, part, d.key.BlockHashes, 0)
	return resp
}

// recordPick records d's blocks on replica in the local table and pushes
// the pick; it returns the pick's id (0 when nothing was recorded).
func (g *Gateway) recordPick(d *Decision, replica string) uint64 {
	p := &g.prov
	if p.table == nil || d.key == nil || len(d.key.BlockHashes) == 0 {
		return 0
	}
	k := provisional.Pick{ID: p.next.Add(1), Replica: replica, Partition: partitionOf(d.key), Hashes: d.key.BlockHashes, MaxAge: p.maxAge}
	for i := range d.Costs {
		if d.Costs[i].Replica == replica {
			k.CachedTokens = uint32(max(0, d.Costs[i].CachedTokens))
		}
	}
	if d.BlockSize != 16 {
		k.Counts = d.key.BlockTokenCounts
	}
	push := provisional.Push{PickerID: p.id, Sequence: p.seq.Add(1), Picks: []provisional.Pick{k}}
	if _, err := p.table.Apply(push); err != nil {
		return 0 // the table is full: counted in its Stats().Refused
	}
	switch {
	case g.cfg.Provisional.Sink != nil:
		g.cfg.Provisional.Sink(push)
	case p.push != nil:
		p.push.Add(k)
	}
	return k.ID
}

// prefilledPick marks a pick whose request has its first token: its
// prefill no longer queues the replica (provisional.Match.Repeated).
func (g *Gateway) prefilledPick(id uint64) {
	g.updatePick(id, provisional.Push{Prefilled: []uint64{id}}, (*client.PickShare).Prefilled)
}

// dropPick removes a pick whose request failed or was cancelled.
func (g *Gateway) dropPick(id uint64) {
	g.updatePick(id, provisional.Push{Removed: []uint64{id}}, (*client.PickShare).Remove)
}

// updatePick applies push (a first token or a removal of pick id) to the
// local table under the gateway's picker id and next sequence, and sends
// it on: to the Sink, or through the SDK's pusher by send.
func (g *Gateway) updatePick(id uint64, push provisional.Push, send func(*client.PickShare, uint64)) {
	p := &g.prov
	if p.table == nil || id == 0 {
		return
	}
	push.PickerID, push.Sequence = p.id, p.seq.Add(1)
	_, _ = p.table.Apply(push)
	switch {
	case g.cfg.Provisional.Sink != nil:
		g.cfg.Provisional.Sink(push)
	case p.push != nil:
		send(p.push, id)
	}
}
