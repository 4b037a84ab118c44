package raftnode_test

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/inference-cache/inference-cache/internal/clustertest"
	"github.com/inference-cache/inference-cache/raftnode"
)

// damagedCluster runs 3 nodes, writes a few entries (taking a snapshot
// on a follower first when snap is set), stops that follower gracefully
// and returns the cluster, the follower and its raft.db path.
func damagedCluster(t *testing.T, snap bool) (*clustertest.Cluster, int, string) {
	t.Helper()
	c := clustertest.New(t, 3, noExpire)
	c.StartAll()
	l := c.WaitLeader(15 * time.Second)
	f := follower(c, l)
	var idx uint64
	var err error
	for k := 0; k < 5; k++ {
		if idx, err = appliedAt(c.Nodes[l].Ingest(c.Ctx(5*time.Second), "", evs("a", uint64(k*100), 4, time.Now().UnixMilli()))); err != nil {
			t.Fatal(err)
		}
	}
	assertSameDigest(t, c, idx)
	if snap {
		if _, _, err := c.Nodes[f].Snapshot(c.Ctx(10 * time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	c.Stop(f)
	return c, f, filepath.Join(c.Nodes[f].Dir, "raft", "raft.db")
}

// A bit flipped in a stored log entry (raft-boltdb keeps no checksum, nor
// does bbolt for data pages) is found at start: the node refuses to start
// and names the entry, instead of applying a different write.
func TestStart_RefusesALogEntryDamagedOnDisk(t *testing.T) {
	c, f, path := damagedCluster(t, false)
	store, err := raftboltdb.NewBoltStore(path)
	if err != nil {
		t.Fatal(err)
	}
	last, _ := store.LastIndex()
	var l raft.Log
	damaged := uint64(0)
	for i := last; i > 0 && damaged == 0; i-- {
		if err := store.GetLog(i, &l); err == nil && l.Type == raft.LogCommand && len(l.Data) > 20 {
			l.Data[len(l.Data)-5] ^= 0x04
			if err := store.StoreLog(&l); err != nil {
				t.Fatal(err)
			}
			damaged = i
		}
	}
	store.Close()
	if damaged == 0 {
		t.Fatal("no command entry in the follower's log")
	}
	err = c.TryStart(f)
	if !errors.Is(err, raftnode.ErrCorruptState) || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("start with a damaged log entry %d: %v; want ErrCorruptState naming the checksum", damaged, err)
	}
	t.Log(err)
}

// raft.db lost (here: emptied) beside existing snapshots: the node's term
// and vote are gone, and it could vote twice in one term; it refuses.
func TestStart_RefusesSnapshotsWithoutTheirRaftDB(t *testing.T) {
	c, f, path := damagedCluster(t, true)
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	err := c.TryStart(f)
	if !errors.Is(err, raftnode.ErrCorruptState) || !strings.Contains(err.Error(), "current term") {
		t.Fatalf("start with an emptied raft.db: %v; want ErrCorruptState about the lost term", err)
	}
}

// A torn or truncated raft.db made bbolt panic in a background goroutine
// (an unrecoverable crash with a stack trace); its pages are checked
// first and the start is refused with a clear error.
func TestStart_RefusesATruncatedRaftDB(t *testing.T) {
	c, f, path := damagedCluster(t, true)
	// Keep only the two meta pages: every tree page they point at is gone
	// (cutting at half the size is not enough: bbolt grows the file ahead
	// of its pages, so the live ones may all sit in the first half).
	if err := os.Truncate(path, int64(2*os.Getpagesize())); err != nil {
		t.Fatal(err)
	}
	err := c.TryStart(f)
	if !errors.Is(err, raftnode.ErrCorruptState) || !strings.Contains(err.Error(), "raft.db") {
		t.Fatalf("start with a raft.db cut after its meta pages: %v; want ErrCorruptState naming raft.db", err)
	}
	t.Log(err)
}

// A log entry's value copied onto the next key of raft.db (a valid bbolt
// edit: the entry's own checksum still verifies) is refused at start: the
// entry says it is another index, and its position checksum covers the
// index and term it was stored at.
func TestStart_RefusesAMisplacedLogEntry(t *testing.T) {
	c, f, path := damagedCluster(t, false)
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var moved uint64
	err = db.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket([]byte("logs"))
		if b == nil {
			return errors.New("no logs bucket in raft.db")
		}
		k, _ := b.Cursor().Last()
		last := binary.BigEndian.Uint64(k)
		// The last two entries are commands (the writes); copy the
		// second last onto the last.
		src := b.Get(binary.BigEndian.AppendUint64(nil, last-1))
		if src == nil {
			return errors.New("no entry before the last")
		}
		moved = last
		return b.Put(binary.BigEndian.AppendUint64(nil, last), append([]byte(nil), src...))
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	err = c.TryStart(f)
	if !errors.Is(err, raftnode.ErrCorruptState) || !strings.Contains(err.Error(), "misplaced") {
		t.Fatalf("start with entry %d replaced by a copy of entry %d: %v; want ErrCorruptState naming the misplaced entry", moved, moved-1, err)
	}
	t.Log(err)
}

// A snapshot file whose bytes no longer match raft's CRC (or the
// snapshot's own checksums) is refused at start with the documented
// "raft data on disk is damaged" error, not a bare raft error.
func TestStart_RefusesADamagedSnapshotFile(t *testing.T) {
	c, f, _ := damagedCluster(t, true)
	states, _ := filepath.Glob(filepath.Join(c.Nodes[f].Dir, "raft", "snapshots", "*", "state.bin"))
	if len(states) == 0 {
		t.Fatal("no snapshot on the follower")
	}
	for _, p := range states {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)/2] ^= 0x10
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	err := c.TryStart(f)
	if !errors.Is(err, raftnode.ErrCorruptState) {
		t.Fatalf("start with a damaged snapshot file: %v; want ErrCorruptState", err)
	}
	t.Log(err)
}
