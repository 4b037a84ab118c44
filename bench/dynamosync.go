package bench

import (
	"math"
	"time"
)

// DefaultDynamoSyncDelay is dynamo-sync-nats's delay from one router
// replica's routing event to its application on the others: one hop
// through a NATS server. The Go nats-server answers a core NATS
// request/reply (two hops) at 115.8 µs p50 and 175.5 µs p99 on one
// machine (natsdotnet's benchmarks_comparison.md, 2026-03-13, 128-byte
// payload, Go reference server); across hosts each hop adds a network
// round trip, and Dynamo's router then applies the event on its own
// task. One millisecond, the trace's resolution, is a generous round
// figure for that path; the flag sets any other.
const DefaultDynamoSyncDelay = time.Millisecond

// dynamoSync is Dynamo's --router-replica-sync among the gateway
// instances of dynamo-sync: each instance tracks its own routing at once,
// and every other instance applies the same events (AddRequest with the
// request's blocks, ISL and overlap, MarkPrefillCompleted at the first
// token, Free at the end) after delay, from a later virtual instant than
// the event's (replica sync is fire-and-forget over NATS: no instance
// waits for another, so requests of one instant never see each other's
// routing).
type dynamoSync struct {
	delay   float64 // virtual s
	members []*dynamo
	nextID  uint64 // the group's request ids
}

func newDynamoSync(delay time.Duration) *dynamoSync { return &dynamoSync{delay: delay.Seconds()} }

// join makes r one of the synchronised instances.
func (s *dynamoSync) join(r *dynamo) {
	r.sync = s
	s.members = append(s.members, r)
}

// routed passes one instance's routed request (add, a releaseAdd) on to
// the others: added after the delay, its prefill done at its first token
// and freed at its end, each plus the delay.
func (s *dynamoSync) routed(from *dynamo, add release, at float64, sv *Served) {
	later := func(t float64) float64 { return math.Nextafter(t+s.delay, math.Inf(1)) }
	for _, m := range s.members {
		if m == from {
			continue
		}
		m.due.push(later(at), add)
		m.due.push(later(sv.FirstTokenAt), release{engine: add.engine, id: add.id, kind: releasePrefill})
		m.due.push(later(sv.DoneAt), release{engine: add.engine, id: add.id, kind: releaseDone})
	}
}
