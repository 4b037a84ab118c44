package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"strings"
	"testing"

	"github.com/inference-cache/inference-cache/command"
	"github.com/inference-cache/inference-cache/policy"
)

// applyOne applies one command entry and returns its result.
func applyOne(t *testing.T, f *FSM, b *logBuilder, reqID, id, nonce string) Result {
	t.Helper()
	b.add(t, command.RemovalCommand(reqID, id, nonce))
	return f.ApplyBatch(b.logs[len(b.logs)-1:])[0].(*EntryResult).Results[0]
}

// A removal record is the latest nonce per server id, an empty nonce
// forgets it, and the records survive a snapshot: every node that applies
// the log, or restores a snapshot of it, holds the same records.
func TestRemovals_RecordForgetAndSnapshot(t *testing.T) {
	f := New(policy.Default(), Options{})
	b := &logBuilder{}
	if got := f.Removals(); got != nil {
		t.Fatalf("a new FSM holds removal records %v", got)
	}
	for _, c := range [][3]string{{"r1", "n2", "aaa"}, {"r2", "n3", "bbb"}, {"r3", "n2", "ccc"}, {"r4", "n3", ""}, {"r5", "n9", ""}} {
		if r := applyOne(t, f, b, c[0], c[1], c[2]); r.Err != nil {
			t.Fatalf("%v: %v", c, r.Err)
		}
	}
	want := map[string]string{"n2": "ccc"}
	if got := f.Removals(); !maps.Equal(got, want) {
		t.Fatalf("records %v, want %v (n2's latest nonce; n3 forgotten)", got, want)
	}
	var snap bytes.Buffer
	if _, err := f.WriteSnapshot(&snap); err != nil {
		t.Fatal(err)
	}
	g := New(policy.Default(), Options{})
	applyOne(t, g, &logBuilder{}, "x", "stale", "zzz") // replaced by the restore
	if err := g.Restore(io.NopCloser(bytes.NewReader(snap.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if got := g.Removals(); !maps.Equal(got, want) {
		t.Fatalf("after restore: records %v, want %v", got, want)
	}
}

// Past MaxRemovals a record of a new id is refused, naming the limit, on
// every node alike; the records held and a held id's update are kept.
func TestRemovals_BoundRefusesNewIDs(t *testing.T) {
	f := New(policy.Default(), Options{})
	b := &logBuilder{}
	for i := range MaxRemovals {
		if r := applyOne(t, f, b, fmt.Sprint("r", i), fmt.Sprint("s", i), "n"); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	r := applyOne(t, f, b, "over", "one-more", "n")
	if !errors.Is(r.Err, ErrRejected) || !strings.Contains(r.Err.Error(), "at most 1024") || !strings.Contains(r.Err.Error(), `"one-more"`) {
		t.Fatalf("record past the bound: %v, want ErrRejected naming the server and the limit", r.Err)
	}
	if r := applyOne(t, f, b, "upd", "s7", "m"); r.Err != nil {
		t.Fatalf("update of a held id at the bound: %v", r.Err)
	}
	if got := f.Removals(); len(got) != MaxRemovals || got["s7"] != "m" || got["one-more"] != "" {
		t.Fatalf("%d records, s7=%q, one-more=%q; want %d, m, none", len(got), got["s7"], got["one-more"], MaxRemovals)
	}
	if r := applyOne(t, f, b, "noid", "", "n"); !errors.Is(r.Err, ErrRejected) || !strings.Contains(r.Err.Error(), "server_id") {
		t.Fatalf("record without an id: %v, want ErrRejected naming server_id", r.Err)
	}
}
