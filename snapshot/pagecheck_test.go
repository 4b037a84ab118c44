package snapshot_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/policy"
	"github.com/inference-cache/inference-cache/snapshot"
)

// boltBody is the bbolt body of a snapshot stream, for tests that patch
// its pages (layout: pagecheck.go).
type boltBody struct {
	b  []byte
	ps uint64
}

var ne = binary.NativeEndian

func bodyOf(stream []byte) boltBody {
	b := bytes.Clone(stream[24 : len(stream)-16])
	return boltBody{b: b, ps: uint64(ne.Uint32(b[16+8:]))}
}

// stream frames the (patched) body with a valid header, length and xxh3.
func (f boltBody) stream() []byte { return frame(f.b) }

func (f boltBody) page(id uint64) []byte { return f.b[id*f.ps : (id+1)*f.ps] }

// meta is the meta bbolt uses (both are valid in a file the writer made:
// the higher txid wins).
func (f boltBody) meta() []byte {
	m0, m1 := f.b[16:], f.b[f.ps+16:]
	if ne.Uint64(m1[48:]) > ne.Uint64(m0[48:]) {
		return m1[:64]
	}
	return m0[:64]
}

func (f boltBody) root() uint64 { return ne.Uint64(f.meta()[16:]) }
func (f boltBody) hwm() uint64  { return ne.Uint64(f.meta()[40:]) }

// resumMeta recomputes the checksum of a patched meta.
func resumMeta(m []byte) {
	h := fnv.New64a()
	h.Write(m[:56])
	ne.PutUint64(m[56:], h.Sum64())
}

// pg is how a refusal names tree page id.
func pg(id uint64) string { return fmt.Sprintf("bbolt page %d:", id) }

func elem(p []byte, i int) []byte { return p[16+16*i : 32+16*i] }

// bucket finds the top-level bucket name in the root bucket's leaf page:
// the page, the element index and the value.
func (f boltBody) bucket(t *testing.T, name string) (uint64, int, []byte) {
	t.Helper()
	id := f.root()
	p := f.page(id)
	if ne.Uint16(p[8:]) != 0x02 {
		t.Fatalf("root bucket page %d is not a leaf", id)
	}
	for i := 0; i < int(ne.Uint16(p[10:])); i++ {
		e := elem(p, i)
		at := 16 + 16*i + int(ne.Uint32(e[4:]))
		ks, vs := int(ne.Uint32(e[8:])), int(ne.Uint32(e[12:]))
		if string(p[at:at+ks]) == name {
			return id, i, p[at+ks : at+ks+vs]
		}
	}
	t.Fatalf("bucket %q not in the root page", name)
	return 0, 0, nil
}

// blocksTree is the root page of the blocks bucket, which must be a branch
// page, and its children.
func (f boltBody) blocksTree(t *testing.T) (uint64, []uint64) {
	t.Helper()
	_, _, v := f.bucket(t, "blocks")
	root := ne.Uint64(v)
	p := f.page(root)
	if root == 0 || ne.Uint16(p[8:]) != 0x01 {
		t.Fatalf("blocks bucket root %d is not a branch page", root)
	}
	var kids []uint64
	for i := 0; i < int(ne.Uint16(p[10:])); i++ {
		kids = append(kids, ne.Uint64(elem(p, i)[8:]))
	}
	return root, kids
}

// branchySnapshot is a snapshot whose blocks bucket is a two-level tree
// (a branch root over leaf pages with overflow pages).
func branchySnapshot(t *testing.T) []byte {
	t.Helper()
	ix := bigIndex(t, 60000)
	v := ix.View()
	defer v.Release()
	var buf bytes.Buffer
	if _, err := snapshot.Write(&buf, t.TempDir(), 7, 1, v, []byte("dedup")); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// readBounded runs Read and Inspect on stream and fails the test if
// either does not return within the bound (a page cycle would make bbolt
// loop forever without the page check).
func readBounded(t *testing.T, stream []byte) (readErr, inspectErr error) {
	t.Helper()
	type result struct{ read, inspect error }
	done := make(chan result, 1)
	go func() {
		_, _, rerr := snapshot.Read(bytes.NewReader(stream), t.TempDir(), func(p policy.Policy) snapshot.Builder { return index.NewBuilder(p) })
		_, ierr := snapshot.Inspect(bytes.NewReader(stream), t.TempDir())
		done <- result{rerr, ierr}
	}()
	select {
	case r := <-done:
		return r.read, r.inspect
	case <-time.After(10 * time.Second):
		t.Fatal("Read/Inspect did not return within 10 s (bbolt looping on the page graph?)")
		return nil, nil
	}
}

// A crafted body with a valid stream checksum whose page graph has a
// cycle, a page out of bounds, an element running off its page or a
// malformed inline bucket is refused as corrupt, naming the page, before
// bbolt walks it — and Read and Inspect return instead of looping.
func TestCheckPages_CraftedPageGraphRefused(t *testing.T) {
	valid := branchySnapshot(t)
	for _, tc := range []struct {
		name  string
		patch func(t *testing.T, f boltBody) (where, want string)
	}{
		{"self-referencing branch element", func(t *testing.T, f boltBody) (string, string) {
			root, _ := f.blocksTree(t)
			ne.PutUint64(elem(f.page(root), 0)[8:], root)
			return pg(root), fmt.Sprintf("referenced again from page %d", root)
		}},
		{"two-page cycle", func(t *testing.T, f boltBody) (string, string) {
			// The first leaf becomes a branch page pointing back at the root.
			root, kids := f.blocksTree(t)
			p := f.page(kids[0])
			ne.PutUint16(p[8:], 0x01)
			ne.PutUint16(p[10:], 1)
			e := elem(p, 0)
			ne.PutUint32(e[0:], 16) // key: the 0 bytes after the element
			ne.PutUint32(e[4:], 0)
			ne.PutUint64(e[8:], root)
			return pg(root), fmt.Sprintf("referenced again from page %d", kids[0])
		}},
		{"child past the high-water mark", func(t *testing.T, f boltBody) (string, string) {
			// Still inside the file (bbolt grows it ahead of the mark), so
			// only the mark tells the page is not part of the database.
			root, _ := f.blocksTree(t)
			id := f.hwm() + 3
			if (id+1)*f.ps > uint64(len(f.b)) {
				t.Fatalf("file of %d bytes has no page %d to point at", len(f.b), id)
			}
			ne.PutUint64(elem(f.page(root), 1)[8:], id)
			return pg(id), "beyond the high-water mark"
		}},
		{"child past the end of the file", func(t *testing.T, f boltBody) (string, string) {
			root, _ := f.blocksTree(t)
			m := f.meta()
			id := uint64(len(f.b))/f.ps + 10
			ne.PutUint64(m[40:], id+1) // the high-water mark lies too
			resumMeta(m)
			ne.PutUint64(elem(f.page(root), 1)[8:], id)
			return pg(id), "past the end of the file"
		}},
		{"child is a meta page", func(t *testing.T, f boltBody) (string, string) {
			root, _ := f.blocksTree(t)
			ne.PutUint64(elem(f.page(root), 0)[8:], 1)
			return pg(1), "is a meta page"
		}},
		{"child header names another page", func(t *testing.T, f boltBody) (string, string) {
			_, kids := f.blocksTree(t)
			ne.PutUint64(f.page(kids[1])[0:], kids[0])
			return pg(kids[1]), fmt.Sprintf("header says it is page %d", kids[0])
		}},
		{"child points into another page's overflow", func(t *testing.T, f boltBody) (string, string) {
			// kids[0]+1, the first overflow page of kids[0], is made to
			// look like a page of its own and reached first; kids[0] then
			// claims it as overflow.
			root, kids := f.blocksTree(t)
			id := kids[0] + 1
			p := f.page(id)
			ne.PutUint64(p[0:], id)
			ne.PutUint16(p[8:], 0x02)
			ne.PutUint16(p[10:], 0)
			ne.PutUint32(p[12:], 0)
			ne.PutUint64(elem(f.page(root), 0)[8:], id)
			ne.PutUint64(elem(f.page(root), 1)[8:], kids[0])
			return pg(kids[0]), fmt.Sprintf("overflow page %d is also used elsewhere", id)
		}},
		{"leaf element runs past the page end", func(t *testing.T, f boltBody) (string, string) {
			_, kids := f.blocksTree(t)
			ne.PutUint32(elem(f.page(kids[0]), 1)[12:], 0xfff00000)
			return pg(kids[0]), "leaf element 1: key and value"
		}},
		{"branch key runs past the page end", func(t *testing.T, f boltBody) (string, string) {
			root, _ := f.blocksTree(t)
			ne.PutUint32(elem(f.page(root), 0)[4:], uint32(f.ps))
			return pg(root), "branch element 0: key"
		}},
		{"elements overrun the page", func(t *testing.T, f boltBody) (string, string) {
			root, _ := f.blocksTree(t)
			ne.PutUint16(f.page(root)[10:], 0xffff)
			return pg(root), "65535 elements need"
		}},
		{"empty branch page", func(t *testing.T, f boltBody) (string, string) {
			root, _ := f.blocksTree(t)
			ne.PutUint16(f.page(root)[10:], 0)
			return pg(root), "branch page with no elements"
		}},
		{"tree page with meta flags", func(t *testing.T, f boltBody) (string, string) {
			_, kids := f.blocksTree(t)
			ne.PutUint16(f.page(kids[1])[8:], 0x04)
			return pg(kids[1]), "flags 0x4"
		}},
		{"inline bucket page flagged branch", func(t *testing.T, f boltBody) (string, string) {
			// A branch-flagged inline page whose element reads as pgid 0:
			// bbolt's cursor resolves pgid 0 to the same inline page and
			// descends forever.
			id, i, v := f.bucket(t, "dedup")
			ne.PutUint16(v[16+8:], 0x01)
			ne.PutUint64(v[32+8:], 0)
			return pg(id), fmt.Sprintf("leaf element %d: inline bucket page has flags 0x1", i)
		}},
		{"inline bucket element runs past the value", func(t *testing.T, f boltBody) (string, string) {
			id, i, v := f.bucket(t, "replicas")
			ne.PutUint32(v[32+12:], 1<<20)
			return pg(id), fmt.Sprintf("leaf element %d: inline bucket element 0: key and value", i)
		}},
		{"inline bucket with more elements than its value holds", func(t *testing.T, f boltBody) (string, string) {
			id, i, v := f.bucket(t, "stats")
			ne.PutUint16(v[16+10:], 200)
			return pg(id), fmt.Sprintf("leaf element %d: inline bucket's 200 elements need", i)
		}},
		{"inline bucket holds a bucket", func(t *testing.T, f boltBody) (string, string) {
			id, i, v := f.bucket(t, "meta")
			ne.PutUint32(v[32:], 1)
			return pg(id), fmt.Sprintf("leaf element %d: inline bucket element 0 is itself a bucket", i)
		}},
		{"bucket value shorter than its header", func(t *testing.T, f boltBody) (string, string) {
			id, i, _ := f.bucket(t, "partitions")
			ne.PutUint32(elem(f.page(id), i)[12:], 8)
			return pg(id), fmt.Sprintf("leaf element %d: bucket value of 8 bytes", i)
		}},
		{"meta root bucket past the high-water mark", func(t *testing.T, f boltBody) (string, string) {
			m := f.meta()
			ne.PutUint64(m[16:], f.hwm())
			resumMeta(m)
			return "bbolt meta page 0:", fmt.Sprintf("root bucket page %d outside", f.hwm())
		}},
		{"meta page size differs from the one bbolt reads with", func(t *testing.T, f boltBody) (string, string) {
			// bbolt takes the page size from meta 0 (valid, 4 KiB); meta 1,
			// given the higher txid, becomes the one it uses, and says 8 KiB.
			m := f.b[f.ps+16 : f.ps+80]
			ne.PutUint32(m[8:], 8192)
			ne.PutUint64(m[48:], ne.Uint64(f.b[16+48:])+1)
			resumMeta(m)
			return "bbolt meta page 1:", "declares page size 8192, bbolt reads the file with 4096"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := bodyOf(valid)
			where, want := tc.patch(t, f)
			rerr, ierr := readBounded(t, f.stream())
			for _, err := range []error{rerr, ierr} {
				if !errors.Is(err, snapshot.ErrCorrupt) {
					t.Fatalf("want ErrCorrupt, got %v", err)
				}
				if !strings.Contains(err.Error(), where) || !strings.Contains(err.Error(), want) {
					t.Fatalf("error %q does not say %q and %q", err, where, want)
				}
			}
			t.Log(rerr)
		})
	}
}

// A tree deeper than the bound is refused even without a cycle (bbolt's
// cursor and our walk both descend once per level).
func TestCheckPages_DeepChainRefused(t *testing.T) {
	f := bodyOf(branchySnapshot(t))
	root, kids := f.blocksTree(t)
	// The overflow pages of the first leaf become a chain of one-element
	// branch pages: root -> kids[0]+1 -> kids[0]+2 -> ... -> kids[1].
	first, n := kids[0]+1, uint64(70)
	if ov := uint64(ne.Uint32(f.page(kids[0])[12:])); ov < n {
		t.Fatalf("leaf %d has %d overflow pages, need %d", kids[0], ov, n)
	}
	for id := first; id < first+n; id++ {
		p := f.page(id)
		clear(p[:32])
		ne.PutUint64(p[0:], id)
		ne.PutUint16(p[8:], 0x01)
		ne.PutUint16(p[10:], 1)
		next := id + 1
		if id == first+n-1 {
			next = kids[1]
		}
		ne.PutUint64(elem(p, 0)[8:], next)
	}
	ne.PutUint64(elem(f.page(root), 0)[8:], first)
	rerr, ierr := readBounded(t, f.stream())
	for _, err := range []error{rerr, ierr} {
		if !errors.Is(err, snapshot.ErrCorrupt) || !strings.Contains(err.Error(), "deeper than 64") {
			t.Fatalf("want ErrCorrupt naming the depth bound, got %v", err)
		}
	}
	t.Log(rerr)
}

// When the newest meta fails its checksum bbolt uses the other one, and
// so does the check: a damaged newest meta over an intact older tree is
// not refused for the newer tree's sake, and vice versa.
func TestCheckPages_FollowsTheMetaBboltUses(t *testing.T) {
	f := bodyOf(branchySnapshot(t))
	dir := t.TempDir()
	check := func(body []byte) error {
		p := filepath.Join(dir, "body.db")
		if err := os.WriteFile(p, body, 0o600); err != nil {
			t.Fatal(err)
		}
		return snapshot.CheckPages(p)
	}
	if err := check(f.b); err != nil {
		t.Fatalf("intact body: %v", err)
	}
	m0, m1 := f.b[16:80], f.b[f.ps+16:f.ps+80]
	if ne.Uint64(m0[48:]) <= ne.Uint64(m1[48:]) {
		t.Fatal("expected meta 0 to be the newest")
	}
	// Meta 1 (older) points its root at a page that is not a tree page;
	// unused while meta 0 is valid.
	ne.PutUint64(m1[16:], 2)
	resumMeta(m1)
	ne.PutUint16(f.page(2)[8:], 0x10) // a freelist page
	if err := check(f.b); err != nil {
		t.Fatalf("older meta is not used, yet: %v", err)
	}
	// Break meta 0's checksum: bbolt falls back to meta 1, and so must
	// the check.
	m0[56] ^= 1
	if err := check(f.b); !errors.Is(err, snapshot.ErrCorrupt) || !strings.Contains(err.Error(), "bbolt page 2: flags 0x10") {
		t.Fatalf("fallback to meta 1: %v", err)
	}
	// Both broken: refused.
	m1[56] ^= 1
	if err := check(f.b); !errors.Is(err, snapshot.ErrCorrupt) || !strings.Contains(err.Error(), "meta") {
		t.Fatalf("both metas broken: %v", err)
	}
}

// residencySnapshot is a snapshot of about residencies residencies (two
// per block).
func residencySnapshot(t testing.TB, residencies int) ([]byte, index.Sizes) {
	ix := bigIndex(t, residencies/2)
	v := ix.View()
	defer v.Release()
	var buf bytes.Buffer
	if _, err := snapshot.Write(&buf, t.TempDir(), 7, 1, v, []byte("dedup")); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), ix.Sizes()
}

// A real snapshot of a million residencies passes the check and reads.
func TestCheckPages_LargeValidSnapshotReads(t *testing.T) {
	n := 1_000_000
	if testing.Short() {
		n = 100_000
	}
	stream, sizes := residencySnapshot(t, n)
	var got index.Sizes
	done := make(chan error, 1)
	go func() {
		var b *index.Builder
		_, _, err := snapshot.Read(bytes.NewReader(stream), t.TempDir(), func(p policy.Policy) snapshot.Builder {
			b = index.NewBuilder(p)
			return b
		})
		if err == nil {
			got = b.Build().Sizes()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Read of a valid snapshot did not return within 60 s")
	}
	if got != sizes || got.Residencies != n {
		t.Fatalf("read %+v, wrote %+v", got, sizes)
	}
}

// BenchmarkRead_PageCheck measures the page-graph check against the whole
// Read of the same snapshot (1 M residencies):
//
//	go test -run '^$' -bench 'Read_PageCheck' -count 5 ./snapshot/
func BenchmarkRead_PageCheck(b *testing.B) {
	stream, _ := residencySnapshot(b, 1_000_000)
	body := filepath.Join(b.TempDir(), "body.db")
	if err := os.WriteFile(body, stream[24:len(stream)-16], 0o600); err != nil {
		b.Fatal(err)
	}
	b.Run("check", func(b *testing.B) {
		for b.Loop() {
			if err := snapshot.CheckPages(body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("read", func(b *testing.B) {
		b.SetBytes(int64(len(stream)))
		dir := b.TempDir()
		for b.Loop() {
			if _, _, err := snapshot.Read(bytes.NewReader(stream), dir, func(p policy.Policy) snapshot.Builder { return index.NewBuilder(p) }); err != nil {
				b.Fatal(err)
			}
		}
	})
}
