package index

import (
	"sync"
	"sync/atomic"
)

// Undo logs for views (DESIGN.md "Views and restore").
//
// A View neither copies nor pins block data. Each View opens an epoch with
// its own undo log, and the writer, before its first change of a block
// entry (or of its residents) since the newest open view was taken, appends
// the entry's pre-image (the 32-byte entry and a copy of its residents) to
// the newest log. A view of epoch e reads block index bi of shard si as the
// first pre-image of (si, bi) in the logs of epochs ≥ e, taken in epoch
// order, or, when there is none, as the live entry, which then has not
// changed since the view was taken (its first change would have saved it).
// "No block at bi" is a pre-image too (part == 0), so a block born after the
// view in a reused entry is skipped, and one deleted (or whose entry was
// reused) after the view is exported from its pre-image. Entries appended
// after the view (at or past its slab length, View.lens) get no pre-image:
// the view skips them.
//
// Why the first pre-image at epoch ≥ e is the state at view e: the first
// change of (si, bi) after view e was taken happens while some epoch E ≥ e
// is the newest, and it saves (the shard's bitmap for E cannot hold bi yet:
// any earlier save in E was also after view e). Saves only ever go to the
// newest log, so the logs in epoch order, each in append order, are in time
// order.
//
// Concurrency: the writer appends entries to the newest log's chunks
// (fixed-size arrays that never move) and then publishes the count with an
// atomic store; exports read entries below the count they loaded. Entries
// are never modified once published. Because a save happens under the
// shard's write lock, an export that read-locks a shard and then loads the
// count sees every pre-image saved for that shard before the live data it
// reads. Chunk directories and the list of logs change under viewSet.mu.
//
// Lock order: a shard lock, then viewSet.mu (the writer appends a chunk
// under its shard's write lock; an export syncs under a shard's read lock).
// Nothing takes a shard lock while holding viewSet.mu.

// undoChunk entries (64 B each) per chunk of a log; residents are copied
// into chunks of undoResChunk words (or a dedicated slice for a larger run).
const (
	undoChunk    = 256
	undoResChunk = 2048
)

// undoEnt is the pre-image of one block index of one shard.
type undoEnt struct {
	b   blockEnt // part == 0: no block there when the view was taken
	si  uint32   // shard
	bi  uint32   // block index
	res []uint64 // residents (a chunk's words, never modified)
}

// undoLog holds the pre-images saved while epoch was the newest view's.
type undoLog struct {
	epoch  uint64
	vs     *viewSet
	n      atomic.Int64 // published entries
	chunks [][]undoEnt  // appended under vs.mu

	// Writer only.
	w   int      // entries written (n after the store)
	res []uint64 // current residents chunk
}

// shardUndo is the writer's per-shard undo state (writer only: exports
// never read it). It outlives views, so a shard's first save of an epoch
// allocates nothing: 1 bit per block entry plus ~64 B per shard.
type shardUndo struct {
	si    uint32
	epoch uint64   // the epoch bits belong to
	bits  []uint64 // block indices already saved in epoch
	// base is the block slab length when epoch's view was taken: entries
	// at or past it were born after every open view and need no
	// pre-image.
	base int
	log  *undoLog // the log saves go to; nil while no view is open
}

// beginUndo points d's undo state at the newest log (writer, shard
// write-locked).
func (d *shardData) beginUndo(si int, lg *undoLog) {
	u := d.undo
	if u == nil {
		u = &shardUndo{si: uint32(si)}
		d.undo = u
	}
	u.log = lg
	if u.epoch != lg.epoch {
		// The shard's first write lock in the epoch: nothing changed it
		// since the view was taken, so its length is the view's.
		clear(u.bits)
		u.epoch, u.base = lg.epoch, len(d.blocks)
	}
}

// pre saves block index bi's pre-image before the writer changes it, if a
// view may need it (writer, shard write-locked). Every change of a block
// entry or of its residents calls it first; with no view open it costs a
// load or two and a branch.
func (d *shardData) pre(bi int) {
	if u := d.undo; u != nil && u.log != nil {
		u.save(d, bi)
	}
}

func (u *shardUndo) save(d *shardData, bi int) {
	if bi >= u.base {
		return // born after every open view
	}
	w, bit := bi>>6, uint64(1)<<(bi&63)
	if w >= len(u.bits) {
		n := max(w+1, (u.base+63)>>6)
		u.bits = append(u.bits, make([]uint64, n-len(u.bits))...)
	} else if u.bits[w]&bit != 0 {
		return
	}
	u.bits[w] |= bit
	lg := u.log
	ci, off := lg.w/undoChunk, lg.w%undoChunk
	if ci == len(lg.chunks) {
		c := make([]undoEnt, undoChunk)
		lg.vs.mu.Lock()
		lg.chunks = append(lg.chunks, c)
		lg.vs.mu.Unlock()
	}
	e := &lg.chunks[ci][off]
	e.si, e.bi = u.si, uint32(bi)
	e.b = d.blocks[bi]
	if e.b.part != 0 {
		rs := d.residents(&e.b)
		if cap(lg.res)-len(lg.res) < len(rs) {
			lg.res = make([]uint64, 0, max(undoResChunk, len(rs)))
		}
		k := len(lg.res)
		lg.res = append(lg.res, rs...)
		e.res = lg.res[k:len(lg.res):len(lg.res)]
	}
	lg.w++
	lg.n.Store(int64(lg.w))
	d.saves++
}

// viewSet tracks the open views and their undo logs. Release runs on any
// goroutine: it only updates the set and raises dirty; the writer drops
// the logs no open view needs at its next call (reclaimViews).
type viewSet struct {
	mu   sync.Mutex
	open map[uint64]struct{} // epochs of the open views
	logs []*undoLog          // ascending epochs
	// dirty: a view was released since the writer last looked.
	dirty atomic.Bool
	// newest is the log saves go to, for exports' check for new entries.
	newest atomic.Pointer[undoLog]

	// Writer only.
	last uint64   // last epoch issued
	log  *undoLog // the newest log while any view is open, else nil
	min  uint64   // oldest epoch kept
}

// reclaimViews drops the undo logs no open view needs any more (writer
// only; called at the start of every writer method). With no view open
// it drops every log and turns saving off.
func (ix *Index) reclaimViews() {
	vs := &ix.views
	if !vs.dirty.Load() {
		return
	}
	vs.dirty.Store(false) // before reading the set: a later Release raises it again
	vs.mu.Lock()
	oldest := uint64(0)
	for e := range vs.open {
		if oldest == 0 || e < oldest {
			oldest = e
		}
	}
	if oldest != vs.min {
		k := 0
		for k < len(vs.logs) && (oldest == 0 || vs.logs[k].epoch < oldest) {
			k++
		}
		// A fresh slice: exports iterate copies of the old one.
		vs.logs = append([]*undoLog(nil), vs.logs[k:]...)
	}
	vs.mu.Unlock()
	if oldest == vs.min {
		return
	}
	vs.min = oldest
	if oldest != 0 {
		return
	}
	vs.log = nil
	vs.newest.Store(nil)
	for i := range ix.shards {
		if u := ix.shards[i].d.undo; u != nil {
			u.log = nil // writer-only state: no lock needed
		}
	}
}

// openView starts the epoch and undo log of a new view (writer only).
func (ix *Index) openView() uint64 {
	vs := &ix.views
	vs.last++
	lg := &undoLog{epoch: vs.last, vs: vs}
	vs.mu.Lock()
	if vs.open == nil {
		vs.open = map[uint64]struct{}{}
	}
	vs.open[lg.epoch] = struct{}{}
	vs.logs = append(vs.logs, lg)
	vs.mu.Unlock()
	vs.newest.Store(lg)
	vs.log = lg
	if vs.min == 0 {
		vs.min = lg.epoch
	}
	return lg.epoch
}

// closeView unregisters a view (any goroutine).
func (ix *Index) closeView(e uint64) {
	vs := &ix.views
	vs.mu.Lock()
	delete(vs.open, e)
	vs.mu.Unlock()
	vs.dirty.Store(true)
}

// viewIdx is one export's private index of the pre-images its view needs:
// per shard, which block indices have one, and the pre-image itself.
type viewIdx struct {
	epoch  uint64
	lens   *[numShards]uint32 // the view's slab lengths
	shards []*viewShard
	// saves[si] is shard si's save count when the index last covered all
	// of its pre-images.
	saves []uint64
	// The logs are indexed up to entry n of the log of epoch cur.
	cur uint64
	n   int64
}

type viewShard struct {
	bits []uint64
	pre  map[uint32]*undoEnt
}

func (x *viewShard) has(bi uint32) bool {
	w := int(bi >> 6)
	return x != nil && w < len(x.bits) && x.bits[w]&(1<<(bi&63)) != 0
}

// syncShard makes x cover every pre-image of shard si saved so far; the
// caller holds the shard's read lock. Cheap when the shard saved nothing
// since the last call.
func (x *viewIdx) syncShard(vs *viewSet, si int, d *shardData) {
	if d.saves != x.saves[si] {
		x.sync(vs)
		x.saves[si] = d.saves
	}
}

// sync indexes the pre-images saved since its last call. Called with a
// shard read-locked, it sees every pre-image of that shard saved before
// the shard's live data it then reads.
func (x *viewIdx) sync(vs *viewSet) {
	if lg := vs.newest.Load(); lg != nil && lg.epoch == x.cur && lg.n.Load() == x.n {
		return // nothing new: older logs receive no saves
	}
	type part struct {
		lg     *undoLog
		n      int64
		chunks [][]undoEnt
	}
	var parts [4]part
	ps := parts[:0]
	vs.mu.Lock()
	for _, lg := range vs.logs {
		if lg.epoch < x.epoch || lg.epoch < x.cur {
			continue
		}
		n := lg.n.Load() // before the directory: it covers n entries
		ps = append(ps, part{lg, n, lg.chunks})
	}
	vs.mu.Unlock()
	for _, p := range ps {
		k := int64(0)
		if p.lg.epoch == x.cur {
			k = x.n
		}
		for ; k < p.n; k++ {
			x.add(&p.chunks[k/undoChunk][k%undoChunk])
		}
		x.cur, x.n = p.lg.epoch, p.n
	}
}

func (x *viewIdx) add(e *undoEnt) {
	if e.bi >= x.lens[e.si] {
		// Born after this view (saved for a newer one).
		return
	}
	s := x.shards[e.si]
	if s.has(e.bi) {
		return // the older pre-image wins
	}
	if s == nil {
		s = &viewShard{pre: map[uint32]*undoEnt{}}
		x.shards[e.si] = s
	}
	w := int(e.bi >> 6)
	if w >= len(s.bits) {
		s.bits = append(s.bits, make([]uint64, w+1-len(s.bits))...)
	}
	s.bits[w] |= 1 << (e.bi & 63)
	s.pre[e.bi] = e
}

// undoEntries counts the pre-images the open views' logs hold, and
// undoBytes the memory of the logs (tests).
func (ix *Index) undoEntries() (n int64) {
	vs := &ix.views
	vs.mu.Lock()
	defer vs.mu.Unlock()
	for _, lg := range vs.logs {
		n += lg.n.Load()
	}
	return n
}

func (ix *Index) undoBytes() (n int) {
	vs := &ix.views
	vs.mu.Lock()
	defer vs.mu.Unlock()
	for _, lg := range vs.logs {
		n += 64 * undoChunk * len(lg.chunks)
		for k := int64(0); k < lg.n.Load(); k++ {
			n += 8 * len(lg.chunks[k/undoChunk][k%undoChunk].res)
		}
	}
	return n
}
