package raftnode

import (
	"errors"
	"testing"

	"github.com/hashicorp/raft"
)

// The position seal covers index, term, type and data: any of them
// changed after sealing is refused; an entry stored before seals existed
// (no Extensions) is only checked for its index; Raft never sees a seal.
func TestPositionSeal_CoversIndexTermTypeAndData(t *testing.T) {
	orig := &raft.Log{Index: 7, Term: 3, Type: raft.LogCommand, Data: []byte("entry bytes")}
	sealed := sealPos(orig)
	if orig.Extensions != nil {
		t.Fatal("sealPos changed raft's own log")
	}
	good := *sealed
	if err := checkPos(7, &good); err != nil || good.Extensions != nil {
		t.Fatalf("intact entry: err %v, extensions %q left", err, good.Extensions)
	}
	for name, edit := range map[string]func(l *raft.Log){
		"term":  func(l *raft.Log) { l.Term = 4 },
		"type":  func(l *raft.Log) { l.Type = raft.LogNoop },
		"data":  func(l *raft.Log) { l.Data = []byte("entry bytez") },
		"index": func(l *raft.Log) { l.Index = 8 },
	} {
		l := *sealed
		l.Data = append([]byte(nil), sealed.Data...)
		edit(&l)
		want := uint64(7)
		if name == "index" {
			want = 8 // stored at the key it claims: only the checksum can tell
		}
		if err := checkPos(want, &l); !errors.Is(err, ErrCorruptState) {
			t.Errorf("%s changed: err %v, want ErrCorruptState", name, err)
		}
	}
	old := raft.Log{Index: 5, Term: 1, Type: raft.LogCommand, Data: []byte("x")}
	if err := checkPos(5, &old); err != nil {
		t.Fatalf("unsealed entry at its index: %v", err)
	}
	if err := checkPos(6, &old); !errors.Is(err, ErrCorruptState) {
		t.Fatalf("unsealed entry at another index: %v, want ErrCorruptState", err)
	}
}
