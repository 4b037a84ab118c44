package index

// NewestObservedMs is the newest observation time (ms since the epoch)
// the index has applied: the largest observed_at_ms of a stored event or
// of replica stats, or last_seen of a residency loaded from a snapshot; 0
// before any. It is read by the leader to bound the time an expire
// command carries (a leader whose clock runs ahead must not expire what
// the engines reported moments ago), from any goroutine.
func (ix *Index) NewestObservedMs() int64 { return ix.newest.Load() }

// noteObserved raises the newest observation time (writer only).
func (ix *Index) noteObserved(ms int64) {
	if ms > ix.newest.Load() {
		ix.newest.Store(ms)
	}
}
