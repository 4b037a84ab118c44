package snapshot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
)

// checkPages validates the page graph of a bbolt file before bbolt opens
// it. bbolt trusts the page ids it reads: a branch element that points
// back at its own page or an ancestor makes its cursor descend forever
// (the stack grows until the process dies), a chain of single-child
// branch pages recurses deep enough to overflow the goroutine stack (a
// fatal error, not a recoverable panic), and tx.Check has no cycle
// detection either. The stream checksum does not rule such a body out
// (xxh3 is not a MAC), so Read and Inspect run this walk first.
//
// The walk follows bbolt's documented on-disk layout (v1.5.0,
// internal/common), all integers in the machine's byte order:
//
//	page header   16 bytes: id u64 | flags u16 | count u16 | overflow u32
//	branch elem   16 bytes: pos u32 | ksize u32 | pgid u64; the key is at elem+pos
//	leaf elem     16 bytes: flags u32 | pos u32 | ksize u32 | vsize u32; the key
//	              is at elem+pos and the value follows it
//	bucket value  root pgid u64 | sequence u64, then (root == 0 only) an
//	              inline leaf page holding the whole bucket
//	meta          at byte 16 of pages 0 and 1: magic u32 | version u32 |
//	              page size u32 | flags u32 | root bucket (16) | freelist u64 |
//	              high-water pgid u64 | txid u64 | FNV-64a of the 56 bytes before
//
// It picks the meta page and page size exactly as bbolt's Open and
// DB.meta do, then walks every bucket tree from that meta's root bucket
// with a visited set over page ids. What passes has: every tree page
// (and its overflow pages) inside both the high-water mark and the file,
// reached once, with its own id in its header and branch or leaf flags;
// no empty branch page; every element, key and value inside its page;
// every bucket value long enough for its header; every inline bucket a
// leaf page whose elements stay inside the value and hold no buckets;
// and trees and bucket nesting no deeper than the bounds below. bbolt's
// read paths (cursor seek/first/next, Bucket, Get) only follow these
// links, so on such a file they terminate after a bounded descent.
//
// The work is bounded by the file size: each page is read at most once
// (a bitmap over the pages the file holds), only page headers, element
// headers and bucket headers are read (never key or value bytes), and
// the number of elements inspected, inline ones included, is capped by
// the file size over the element size, which a real file cannot exceed
// because every element header occupies bytes of its own.
// CheckBoltFile validates the page graph of any bbolt file at path (a
// snapshot body, or a node's raft.db before raft-boltdb opens it), as
// checkPages describes, so a damaged file is refused with an error
// wrapping ErrCorrupt that names the page, instead of making bbolt loop,
// exhaust memory or panic in a goroutine nobody can recover. Work is
// bounded by the file size (page headers only).
func CheckBoltFile(path string) error { return checkPages(path) }

func checkPages(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("snapshot: open %s for the page check: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("snapshot: stat %s: %w", path, err)
	}
	c := &pageChecker{r: f, size: st.Size()}
	return c.run()
}

// Layout constants of bbolt v1.5.0 (internal/common) and the walk's
// bounds.
const (
	boltPageHeader   = 16 // id, flags, count, overflow
	boltElem         = 16 // branch and leaf elements have the same size
	boltBucketHeader = 16 // root pgid, sequence
	boltMetaLen      = 64 // through the checksum
	boltMetaSummed   = 56 // the checksum covers the bytes before it
	boltMagic        = 0xED0CDAED
	boltVersion      = 2
	boltBranchPage   = 0x01
	boltLeafPage     = 0x02
	boltBucketLeaf   = 0x01 // leaf element flag: the value is a bucket
	boltNoFreelist   = ^uint64(0)
	// boltFirstMetaRead is how much bbolt's Open reads of each meta
	// candidate while it looks for the page size.
	boltFirstMetaRead = 0x1000

	// minPageSize and maxPageSize bound the page size a meta may declare.
	// bbolt writes the OS page size (4 KiB, 16 KiB or 64 KiB on the
	// platforms we run on); 1 KiB is the smallest size bbolt's Open
	// probes for.
	minPageSize = 1 << 10
	maxPageSize = 64 << 10
	// maxTreeDepth bounds the pages on one root-to-leaf path of a bucket.
	// bbolt's cursor keeps one stack entry (and its search one call
	// frame) per level. A B+tree whose branch pages have at least two
	// children spans the largest body we accept (maxBody, 2^26 pages of
	// 1 KiB) in 27 levels; real trees are 2 to 5 deep.
	maxTreeDepth = 64
	// maxBucketDepth bounds bucket nesting (the root bucket is 0, our
	// top-level buckets 1). The format uses 1; bbolt has no limit of its
	// own, so a crafted file could nest until a walker's stack runs out.
	maxBucketDepth = 16
)

// pageChecker walks one bbolt file; see checkPages.
type pageChecker struct {
	r    io.ReaderAt
	size int64 // file length in bytes

	pageSize uint64
	hwm      uint64   // high-water pgid of the meta bbolt uses
	root     uint64   // root bucket page of that meta
	pages    uint64   // min(hwm, whole pages in the file): valid ids are [2, pages)
	visited  []uint64 // bitmap over [0, pages)
	budget   int64    // elements that may still be inspected
	buf      []byte
}

type boltMeta struct {
	pageSize uint32
	root     uint64
	freelist uint64
	pgid     uint64
	txid     uint64
}

func (c *pageChecker) run() error {
	if err := c.meta(); err != nil {
		return err
	}
	c.budget = c.size / boltElem
	return c.tree(c.root, 0, 0)
}

// meta finds the page size and the meta page bbolt would use, mirroring
// DB.getPageSize, DB.mmap and DB.meta, and checks that meta's fields.
func (c *pageChecker) meta() error {
	if c.size < boltFirstMetaRead {
		return fmt.Errorf("%w: bbolt file is %d bytes, shorter than a meta page read (%d)", ErrCorrupt, c.size, boltFirstMetaRead)
	}
	// bbolt's Open takes the page size from the meta in page 0 if it
	// validates, else from the first valid meta at 1 KiB << i.
	var ps uint32
	found := false
	if m, err := c.readMeta(0); err == nil {
		ps, found = m.pageSize, true
	}
	for i := 0; !found && i <= 14; i++ {
		pos := int64(1024) << i
		if pos >= c.size-1024 {
			break
		}
		if m, err := c.readMeta(pos); err == nil {
			ps, found = m.pageSize, true
		}
	}
	if !found {
		return fmt.Errorf("%w: bbolt meta pages 0 and 1: neither validates (magic, version, checksum)", ErrCorrupt)
	}
	if ps < minPageSize || ps > maxPageSize || ps&(ps-1) != 0 {
		return fmt.Errorf("%w: bbolt meta page declares page size %d, want a power of two in %d..%d", ErrCorrupt, ps, minPageSize, maxPageSize)
	}
	c.pageSize = uint64(ps)
	if c.size < 2*int64(ps) {
		return fmt.Errorf("%w: bbolt file is %d bytes, less than its two %d-byte meta pages", ErrCorrupt, c.size, ps)
	}
	// With the page size fixed, bbolt validates the metas of pages 0 and 1
	// and uses the one with the higher txid (page 0 on a tie) if it
	// validates, else the other.
	m0, err0 := c.readMeta(0)
	m1, err1 := c.readMeta(int64(ps))
	if err0 != nil && err1 != nil {
		return fmt.Errorf("%w: bbolt meta page 0 (%v) and meta page 1 (%v) both invalid", ErrCorrupt, err0, err1)
	}
	use, id := m0, 0
	if m1.txid > m0.txid {
		if err1 == nil {
			use, id = m1, 1
		}
	} else if err0 != nil {
		use, id = m1, 1
	}
	if use.pageSize != ps {
		return fmt.Errorf("%w: bbolt meta page %d: declares page size %d, bbolt reads the file with %d", ErrCorrupt, id, use.pageSize, ps)
	}
	c.hwm = use.pgid
	c.pages = min(use.pgid, uint64(c.size)/c.pageSize)
	if use.pgid < 3 {
		return fmt.Errorf("%w: bbolt meta page %d: high-water mark %d leaves no page for the root bucket", ErrCorrupt, id, use.pgid)
	}
	if use.root < 2 || use.root >= use.pgid {
		return fmt.Errorf("%w: bbolt meta page %d: root bucket page %d outside 2..%d (high-water mark)", ErrCorrupt, id, use.root, use.pgid-1)
	}
	if use.freelist != boltNoFreelist && (use.freelist < 2 || use.freelist >= use.pgid) {
		return fmt.Errorf("%w: bbolt meta page %d: freelist page %d outside 2..%d (high-water mark)", ErrCorrupt, id, use.freelist, use.pgid-1)
	}
	c.visited = make([]uint64, (c.pages+63)/64)
	c.mark(0)
	c.mark(1)
	c.root = use.root
	return nil
}

// readMeta reads and validates (magic, version, checksum) the meta in
// the page at byte pos, as bbolt's Meta.Validate does.
func (c *pageChecker) readMeta(pos int64) (boltMeta, error) {
	var b [boltMetaLen]byte
	if n, err := c.r.ReadAt(b[:], pos+boltPageHeader); n < len(b) {
		return boltMeta{}, fmt.Errorf("short read at byte %d: %v", pos+boltPageHeader, err)
	}
	ne := binary.NativeEndian
	m := boltMeta{
		pageSize: ne.Uint32(b[8:]),
		root:     ne.Uint64(b[16:]),
		freelist: ne.Uint64(b[32:]),
		pgid:     ne.Uint64(b[40:]),
		txid:     ne.Uint64(b[48:]),
	}
	if ne.Uint32(b[0:]) != boltMagic {
		return m, errors.New("bad magic")
	}
	if v := ne.Uint32(b[4:]); v != boltVersion {
		return m, fmt.Errorf("version %d", v)
	}
	h := fnv.New64a()
	h.Write(b[:boltMetaSummed])
	if h.Sum64() != ne.Uint64(b[boltMetaSummed:]) {
		return m, errors.New("checksum mismatch")
	}
	return m, nil
}

func (c *pageChecker) mark(id uint64)      { c.visited[id/64] |= 1 << (id % 64) }
func (c *pageChecker) seen(id uint64) bool { return c.visited[id/64]&(1<<(id%64)) != 0 }

// errPage is an ErrCorrupt naming the page.
func errPage(id uint64, format string, args ...any) error {
	return fmt.Errorf("%w: bbolt page %d: %s", ErrCorrupt, id, fmt.Sprintf(format, args...))
}

// claim checks that page id, referenced from page from, may be read and
// was not reached before, and marks it.
func (c *pageChecker) claim(id, from uint64) error {
	switch {
	case id < 2:
		return errPage(id, "is a meta page, referenced as a tree page from page %d", from)
	case id >= c.hwm:
		return errPage(id, "referenced from page %d is at or beyond the high-water mark %d", from, c.hwm)
	case id >= c.pages:
		return errPage(id, "referenced from page %d lies past the end of the file (%d bytes, %d pages)", from, c.size, uint64(c.size)/c.pageSize)
	case c.seen(id):
		return errPage(id, "referenced again from page %d (a cycle or a page shared by two parents)", from)
	}
	c.mark(id)
	return nil
}

// read returns n bytes at off in c.buf (reused by the next read).
func (c *pageChecker) read(off int64, n int) ([]byte, error) {
	if cap(c.buf) < n {
		c.buf = make([]byte, n)
	}
	b := c.buf[:n]
	if k, err := c.r.ReadAt(b, off); k < n {
		return nil, fmt.Errorf("%w: bbolt file: %d bytes at byte %d: short read (%d): %v", ErrCorrupt, n, off, k, err)
	}
	return b, nil
}

// spend charges n elements against the work budget.
func (c *pageChecker) spend(id uint64, n int) error {
	if c.budget -= int64(n); c.budget < 0 {
		return errPage(id, "more elements than a %d-byte file can hold (elements overlap)", c.size)
	}
	return nil
}

// tree walks the bucket tree rooted at page root, reached from page from
// (0 for the meta's root bucket), at bucket nesting nest.
func (c *pageChecker) tree(root, from uint64, nest int) error {
	return c.page(root, from, 1, nest)
}

// bucketRef is a bucket value found on a leaf page, checked after the
// page's own elements.
type bucketRef struct {
	elem  int
	off   int64 // file offset of the value
	vsize uint64
}

func (c *pageChecker) page(id, from uint64, depth, nest int) error {
	if depth > maxTreeDepth {
		return errPage(id, "referenced from page %d is level %d of its bucket's tree, deeper than %d", from, depth, maxTreeDepth)
	}
	if err := c.claim(id, from); err != nil {
		return err
	}
	base := int64(id * c.pageSize)
	flags, count, span, err := c.pageHeader(id, from)
	if err != nil {
		return err
	}
	elems, err := c.read(base+boltPageHeader, count*boltElem)
	if err != nil {
		return err
	}
	if flags == boltBranchPage {
		return c.branch(id, elems, count, span, depth, nest)
	}
	return c.leaf(id, elems, count, span, nest)
}

// pageHeader reads and checks the header of bucket-tree page id (reached
// from page from): its id, its overflow pages (claimed here), its flags
// (branch or leaf) and its element count, which it charges to the work
// budget. It returns the flags, the count and the page's bytes with its
// overflow.
func (c *pageChecker) pageHeader(id, from uint64) (flags uint16, count int, span uint64, err error) {
	ne := binary.NativeEndian
	h, err := c.read(int64(id*c.pageSize), boltPageHeader)
	if err != nil {
		return 0, 0, 0, err
	}
	hid, flags, count, overflow := ne.Uint64(h[0:]), ne.Uint16(h[8:]), int(ne.Uint16(h[10:])), uint64(ne.Uint32(h[12:]))
	if hid != id {
		return 0, 0, 0, errPage(id, "header says it is page %d", hid)
	}
	if last := id + overflow; last >= c.pages {
		if last >= c.hwm {
			return 0, 0, 0, errPage(id, "%d overflow pages run to page %d, at or beyond the high-water mark %d", overflow, last, c.hwm)
		}
		return 0, 0, 0, errPage(id, "%d overflow pages run to page %d, past the end of the file (%d pages)", overflow, last, uint64(c.size)/c.pageSize)
	}
	for o := id + 1; o <= id+overflow; o++ {
		if c.seen(o) {
			return 0, 0, 0, errPage(id, "overflow page %d is also used elsewhere", o)
		}
		c.mark(o)
	}
	span = (overflow + 1) * c.pageSize
	if flags != boltBranchPage && flags != boltLeafPage {
		return 0, 0, 0, errPage(id, "flags %#x, want branch (%#x) or leaf (%#x) for a page of a bucket tree (from page %d)", flags, boltBranchPage, boltLeafPage, from)
	}
	if need := uint64(boltPageHeader + count*boltElem); need > span {
		return 0, 0, 0, errPage(id, "%d elements need %d bytes, the page has %d", count, need, span)
	}
	if err := c.spend(id, count); err != nil {
		return 0, 0, 0, err
	}
	return flags, count, span, nil
}

// branch checks the count elements of branch page id (span bytes, at
// level depth) and then the child pages they name, in order.
func (c *pageChecker) branch(id uint64, elems []byte, count int, span uint64, depth, nest int) error {
	if count == 0 {
		return errPage(id, "branch page with no elements")
	}
	ne := binary.NativeEndian
	children := make([]uint64, count)
	for i := range count {
		e := elems[i*boltElem:]
		at := uint64(boltPageHeader + i*boltElem) // element offset in the page
		pos, ksize := uint64(ne.Uint32(e[0:])), uint64(ne.Uint32(e[4:]))
		if end := at + pos + ksize; end > span {
			return errPage(id, "branch element %d: key at %d..%d runs past the page end (%d bytes)", i, at+pos, end, span)
		}
		children[i] = ne.Uint64(e[8:])
	}
	for _, child := range children {
		if err := c.page(child, id, depth+1, nest); err != nil {
			return err
		}
	}
	return nil
}

// leaf checks the count elements of leaf page id (span bytes) and then the
// nested buckets its elements hold, in order.
func (c *pageChecker) leaf(id uint64, elems []byte, count int, span uint64, nest int) error {
	ne := binary.NativeEndian
	base := int64(id * c.pageSize)
	var buckets []bucketRef
	for i := range count {
		e := elems[i*boltElem:]
		at := uint64(boltPageHeader + i*boltElem)
		eflags := ne.Uint32(e[0:])
		pos, ksize, vsize := uint64(ne.Uint32(e[4:])), uint64(ne.Uint32(e[8:])), uint64(ne.Uint32(e[12:]))
		if end := at + pos + ksize + vsize; end > span {
			return errPage(id, "leaf element %d: key and value at %d..%d run past the page end (%d bytes)", i, at+pos, end, span)
		}
		if eflags&boltBucketLeaf != 0 {
			buckets = append(buckets, bucketRef{elem: i, off: base + int64(at+pos+ksize), vsize: vsize})
		}
	}
	for _, b := range buckets {
		if err := c.bucket(id, b, nest+1); err != nil {
			return err
		}
	}
	return nil
}

// bucket checks the bucket value b of leaf page id, a bucket at nesting
// nest.
func (c *pageChecker) bucket(id uint64, b bucketRef, nest int) error {
	if nest > maxBucketDepth {
		return errPage(id, "leaf element %d: bucket nested %d deep, more than %d", b.elem, nest, maxBucketDepth)
	}
	if b.vsize < boltBucketHeader {
		return errPage(id, "leaf element %d: bucket value of %d bytes is shorter than a bucket header (%d)", b.elem, b.vsize, boltBucketHeader)
	}
	ne := binary.NativeEndian
	h, err := c.read(b.off, boltBucketHeader)
	if err != nil {
		return err
	}
	if root := ne.Uint64(h); root != 0 {
		return c.tree(root, id, nest)
	}

	// An inline bucket: a leaf page inside the value. bbolt reaches it
	// without its page checks (no id, no flags test), and its cursor would
	// descend forever from a branch-flagged inline page (every child
	// pgid resolves to the same inline page), so the flags must say leaf.
	if b.vsize < boltBucketHeader+boltPageHeader {
		return errPage(id, "leaf element %d: inline bucket value of %d bytes is shorter than bucket and page headers (%d)", b.elem, b.vsize, boltBucketHeader+boltPageHeader)
	}
	ph, err := c.read(b.off+boltBucketHeader, boltPageHeader)
	if err != nil {
		return err
	}
	flags, count := ne.Uint16(ph[8:]), int(ne.Uint16(ph[10:]))
	if flags != boltLeafPage {
		return errPage(id, "leaf element %d: inline bucket page has flags %#x, want leaf (%#x)", b.elem, flags, boltLeafPage)
	}
	const first = boltBucketHeader + boltPageHeader // first element's offset in the value
	if need := uint64(first + count*boltElem); need > b.vsize {
		return errPage(id, "leaf element %d: inline bucket's %d elements need %d bytes, the value has %d", b.elem, count, need, b.vsize)
	}
	if err := c.spend(id, count); err != nil {
		return err
	}
	elems, err := c.read(b.off+first, count*boltElem)
	if err != nil {
		return err
	}
	for j := range count {
		e := elems[j*boltElem:]
		at := uint64(first + j*boltElem)
		pos, ksize, vsize := uint64(ne.Uint32(e[4:])), uint64(ne.Uint32(e[8:])), uint64(ne.Uint32(e[12:]))
		if end := at + pos + ksize + vsize; end > b.vsize {
			return errPage(id, "leaf element %d: inline bucket element %d: key and value at %d..%d run past the value end (%d bytes)", b.elem, j, at+pos, end, b.vsize)
		}
		// bbolt only inlines buckets without sub-buckets; one here would
		// let overlapping values multiply the work.
		if ne.Uint32(e[0:])&boltBucketLeaf != 0 {
			return errPage(id, "leaf element %d: inline bucket element %d is itself a bucket (bbolt never inlines a bucket that has sub-buckets)", b.elem, j)
		}
	}
	return nil
}
