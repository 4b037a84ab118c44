package raftnode

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/hashicorp/raft"
	"github.com/zeebo/xxh3"
)

// Position seals: an entry's own checksum (command.SealEntry) is made by
// the leader before Raft gives the entry its index and term, so an entry
// copied onto another key of raft.db (a valid bbolt edit, a buggy tool)
// would still verify. Each node's log store therefore records, in the
// stored raft.Log's Extensions, a checksum over the index, term, type and
// data it stores, and checks it on every read. Raft never sees the seal:
// it is added on the way into the store and removed on the way out.

// posSealMagic starts a position seal in raft.Log.Extensions.
var posSealMagic = []byte("icps1")

// posSum is the position checksum of l.
func posSum(l *raft.Log) uint64 {
	var hdr [17]byte
	binary.LittleEndian.PutUint64(hdr[0:], l.Index)
	binary.LittleEndian.PutUint64(hdr[8:], l.Term)
	hdr[16] = byte(l.Type)
	h := xxh3.New()
	_, _ = h.Write(hdr[:])
	_, _ = h.Write(l.Data)
	return h.Sum64()
}

// sealPos returns a copy of l whose Extensions carry its position seal
// (l itself is raft's and may be read concurrently).
func sealPos(l *raft.Log) *raft.Log {
	c := *l
	c.Extensions = binary.LittleEndian.AppendUint64(append([]byte(nil), posSealMagic...), posSum(l))
	return &c
}

// checkPos verifies the entry read for index idx: it must say it is entry
// idx, and its position seal, when it has one (entries stored before
// seals have none), must match. On success l's Extensions are cleared.
func checkPos(idx uint64, l *raft.Log) error {
	if l.Index != idx {
		return fmt.Errorf("%w: the entry stored at index %d says it is entry %d (term %d): misplaced", ErrCorruptState, idx, l.Index, l.Term)
	}
	if !bytes.HasPrefix(l.Extensions, posSealMagic) {
		return nil
	}
	rest := l.Extensions[len(posSealMagic):]
	if len(rest) != 8 {
		return fmt.Errorf("%w: entry %d: position seal of %d bytes", ErrCorruptState, idx, len(rest))
	}
	l.Extensions = nil
	if want, got := binary.LittleEndian.Uint64(rest), posSum(l); want != got {
		return fmt.Errorf("%w: entry %d (term %d): position checksum %016x stored, %016x computed over its index, term and data: the entry was changed or moved", ErrCorruptState, idx, l.Term, want, got)
	}
	return nil
}

// sealedLogStore adds and checks position seals around a log store.
type sealedLogStore struct{ raft.LogStore }

func (s sealedLogStore) StoreLog(l *raft.Log) error { return s.LogStore.StoreLog(sealPos(l)) }

func (s sealedLogStore) StoreLogs(ls []*raft.Log) error {
	sealed := make([]*raft.Log, len(ls))
	for i, l := range ls {
		sealed[i] = sealPos(l)
	}
	return s.LogStore.StoreLogs(sealed)
}

func (s sealedLogStore) GetLog(idx uint64, l *raft.Log) error {
	if err := s.LogStore.GetLog(idx, l); err != nil {
		return err
	}
	return checkPos(idx, l)
}

// IsMonotonic passes raft.MonotonicLogStore through.
func (s sealedLogStore) IsMonotonic() bool { return isMonotonic(s.LogStore) }
