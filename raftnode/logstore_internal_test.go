package raftnode

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
)

// rangeLog records DeleteRange calls over a log that holds [first, last].
type rangeLog struct {
	raft.LogStore // nil: only the methods below are called
	first, last   uint64
	calls         [][2]uint64
	failAt        int // fail the failAt-th call (1-based; 0 = never)
}

func (r *rangeLog) FirstIndex() (uint64, error) { return r.first, nil }

func (r *rangeLog) DeleteRange(lo, hi uint64) error {
	r.calls = append(r.calls, [2]uint64{lo, hi})
	if len(r.calls) == r.failAt {
		return errors.New("disk says no")
	}
	if lo <= r.first && hi >= r.first {
		r.first = hi + 1
	}
	if hi >= r.last && lo <= r.last {
		r.last = lo - 1
	}
	return nil
}

// A compaction (a prefix from the first index) is deleted oldest first in
// chunks of at most compactChunk entries, each leaving a contiguous log;
// a suffix truncation or a short range is one call; a failing chunk stops
// the rest and leaves the log starting after the chunks that succeeded.
func TestChunkedCompaction_DeleteRange(t *testing.T) {
	for _, c := range []struct {
		name        string
		first, last uint64
		lo, hi      uint64
		failAt      int
		want        [][2]uint64
		wantFirst   uint64
		wantErr     bool
	}{
		{"prefix in chunks", 1, 5000, 1, 2500, 0,
			[][2]uint64{{1, 1024}, {1025, 2048}, {2049, 2500}}, 2501, false},
		{"prefix of exactly one chunk", 101, 5000, 101, 1124, 0,
			[][2]uint64{{101, 1124}}, 1125, false},
		{"short prefix", 1, 5000, 1, 10, 0, [][2]uint64{{1, 10}}, 11, false},
		{"suffix truncation at once", 1, 5000, 2000, 5000, 0, [][2]uint64{{2000, 5000}}, 1, false},
		{"failure keeps a contiguous log", 1, 5000, 1, 4000, 2,
			[][2]uint64{{1, 1024}, {1025, 2048}}, 1025, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &rangeLog{first: c.first, last: c.last, failAt: c.failAt}
			err := chunkedCompaction{r}.DeleteRange(c.lo, c.hi)
			if (err != nil) != c.wantErr {
				t.Fatalf("err %v, want error %v", err, c.wantErr)
			}
			if d := cmp.Diff(c.want, r.calls); d != "" {
				t.Fatalf("DeleteRange calls (-want +got):\n%s", d)
			}
			if r.first != c.wantFirst {
				t.Fatalf("log starts at %d, want %d", r.first, c.wantFirst)
			}
		})
	}
}

// TestBench_CompactionBlocksAppends (RAFTNODE_BENCH=1) measures how long
// an append waits while a compaction deletes 40,000 entries of 18 KiB (a
// 417 MB snapshot's log-growth limit is ~870 MB of such entries) from a
// real raft-boltdb store, deleted at once or by chunkedCompaction,
// alternated, 3 runs each.
func TestBench_CompactionBlocksAppends(t *testing.T) {
	if os.Getenv("RAFTNODE_BENCH") == "" {
		t.Skip("set RAFTNODE_BENCH=1")
	}
	data := make([]byte, 18<<10)
	for i := range data {
		data[i] = byte(i * 7)
	}
	const n, keep = 50000, 10000
	for run := 0; run < 6; run++ {
		chunked := run%2 == 1
		st, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(t.TempDir(), "raft.db"),
			BoltOptions: &bbolt.Options{NoFreelistSync: true, FreelistType: bbolt.FreelistMapType}})
		if err != nil {
			t.Fatal(err)
		}
		for idx := uint64(1); idx <= n; idx += 64 {
			ls := make([]*raft.Log, 64)
			for j := range ls {
				ls[j] = &raft.Log{Index: idx + uint64(j), Term: 1, Type: raft.LogCommand, Data: data}
			}
			if err := st.StoreLogs(ls); err != nil {
				t.Fatal(err)
			}
		}
		var store raft.LogStore = st
		if chunked {
			store = chunkedCompaction{st}
		}
		stop := make(chan struct{})
		done := make(chan time.Duration)
		go func() {
			var longest time.Duration
			for i := uint64(n + 1); ; i++ {
				select {
				case <-stop:
					done <- longest
					return
				default:
				}
				t0 := time.Now()
				if err := st.StoreLogs([]*raft.Log{{Index: i, Term: 1, Type: raft.LogCommand, Data: data}}); err != nil {
					t.Error(err)
				}
				longest = max(longest, time.Since(t0))
				time.Sleep(2 * time.Millisecond) // paces the appends whose waits are measured
			}
		}()
		time.Sleep(20 * time.Millisecond) // appends run before the compaction starts; a measurement, nothing asserted
		t0 := time.Now()
		if err := store.DeleteRange(1, n-keep); err != nil {
			t.Fatal(err)
		}
		took := time.Since(t0)
		close(stop)
		t.Logf("chunked %v: compaction of %d entries took %v; longest append meanwhile %v", chunked, n-keep, took, <-done)
		st.Close()
	}
}
