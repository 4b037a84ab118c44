package command

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/inference-cache/inference-cache/command/fsmpb"
	"github.com/inference-cache/inference-cache/index"
)

// The ingest encoding (fsmpb.IngestPacked, entry format 2). In the
// protobuf form every event repeats its replica id and its four partition
// strings, and a random 64-bit block hash takes 10 varint bytes; in the
// log those bytes are copied, checksummed, written to bbolt (whose append
// rewrites the previous entry too), sent to each follower and decoded
// again on three nodes, and that was about half of the cluster's CPU per
// event. The packed form names each distinct partition and replica once
// per command and stores hashes as fixed64: a 4-block event takes about 45
// bytes instead of 75–130.

// Field numbers of fsmpb.Command and fsmpb.IngestPacked (command.proto);
// TestMarshalIngest_ProtoDecodes holds the encoder to them.
const (
	cmdIngestPacked = 8

	pkPartitions    = 1
	pkReplicas      = 2
	pkKinds         = 3
	pkReplicaRefs   = 4
	pkPartitionRefs = 5
	pkHashLens      = 6
	pkCountLens     = 7
	pkPrefixTokens  = 8
	pkObservedDelta = 9
	pkHashes        = 10
	pkCounts        = 11
)

// ErrPacked: a packed ingest command is inconsistent (columns of different
// lengths, a reference out of range, counts that do not add up). Only a
// bug or a damaged entry makes one; apply rejects the command (wrapped in
// ErrRejected) on every node alike.
var ErrPacked = errors.New("fsm: packed ingest command is inconsistent")

// MarshalIngest encodes an ingest command (the same command as
// Marshal(IngestCommand(requestID, evs)), the same bytes) in the packed
// form, without building the protobuf messages: on the write path that
// conversion (a message per event and per partition) cost more than the
// encoding itself. Strings must be valid UTF-8, as proto3 requires;
// otherwise the error names the event and the field and nothing is
// encoded.
func MarshalIngest(requestID string, evs []index.BlockEvent) ([]byte, error) {
	if !utf8.ValidString(requestID) {
		return nil, fmt.Errorf("fsm: encode command %q: request_id is not valid UTF-8", requestID)
	}
	var pk packer
	pk.grow(evs)
	for i := range evs {
		if err := validateEvent(&evs[i]); err != nil {
			return nil, fmt.Errorf("fsm: encode command %q: event %d: %w", requestID, i, err)
		}
		pk.add(&evs[i])
	}
	body := pk.encode(make([]byte, 0, 64+len(evs)*16+pk.nHashes*9))
	b := make([]byte, 0, len(body)+len(requestID)+16)
	if requestID != "" {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, requestID)
	}
	b = protowire.AppendTag(b, cmdIngestPacked, protowire.BytesType)
	return protowire.AppendBytes(b, body), nil
}

// packer collects the columns of one packed command.
type packer struct {
	parts    []index.Partition
	replicas []string
	// per event
	kinds, replicaRefs, partRefs, hashLens, countLens, prefix []byte // varints
	deltas                                                    []byte // zigzag varints
	lastObs                                                   int64
	// per block
	hashes  []byte // fixed64
	counts  []byte // varints
	nHashes int
}

// grow sizes the columns for evs in one allocation (most values take one
// varint byte; the rest grow as needed).
func (pk *packer) grow(evs []index.BlockEvent) {
	n, nh, nc := len(evs), 0, 0
	for i := range evs {
		nh += len(evs[i].BlockHashes)
		nc += len(evs[i].BlockTokenCounts)
	}
	buf := make([]byte, 0, 8*n+8*nh+nc)
	cut := func(c int) []byte {
		s := buf[len(buf) : len(buf) : len(buf)+c]
		buf = buf[:len(buf)+c]
		return s
	}
	pk.kinds, pk.replicaRefs, pk.partRefs, pk.hashLens, pk.countLens, pk.prefix = cut(n), cut(n), cut(n), cut(n), cut(n), cut(n)
	pk.deltas, pk.hashes, pk.counts = cut(2*n), cut(8*nh), cut(nc)
}

func (pk *packer) ref(s string) uint64 {
	// A command holds few distinct ids, and consecutive events mostly
	// share one: scan from the newest.
	for i := len(pk.replicas) - 1; i >= 0; i-- {
		if pk.replicas[i] == s {
			return uint64(i)
		}
	}
	pk.replicas = append(pk.replicas, s)
	return uint64(len(pk.replicas) - 1)
}

func (pk *packer) partRef(p index.Partition) uint64 {
	for i := len(pk.parts) - 1; i >= 0; i-- {
		if pk.parts[i] == p {
			return uint64(i)
		}
	}
	pk.parts = append(pk.parts, p)
	return uint64(len(pk.parts) - 1)
}

func (pk *packer) add(e *index.BlockEvent) {
	pk.kinds = protowire.AppendVarint(pk.kinds, uint64(uint32(e.Kind)))
	pk.replicaRefs = protowire.AppendVarint(pk.replicaRefs, pk.ref(e.ReplicaID))
	pk.partRefs = protowire.AppendVarint(pk.partRefs, pk.partRef(e.Partition))
	pk.hashLens = protowire.AppendVarint(pk.hashLens, uint64(len(e.BlockHashes)))
	pk.countLens = protowire.AppendVarint(pk.countLens, uint64(len(e.BlockTokenCounts)))
	pk.prefix = protowire.AppendVarint(pk.prefix, uint64(e.PrefixTokensBefore))
	pk.deltas = protowire.AppendVarint(pk.deltas, protowire.EncodeZigZag(e.ObservedAtMs-pk.lastObs))
	pk.lastObs = e.ObservedAtMs
	for _, h := range e.BlockHashes {
		pk.hashes = protowire.AppendFixed64(pk.hashes, h)
	}
	pk.nHashes += len(e.BlockHashes)
	for _, c := range e.BlockTokenCounts {
		pk.counts = protowire.AppendVarint(pk.counts, uint64(c))
	}
}

func (pk *packer) encode(b []byte) []byte {
	for i := range pk.parts {
		b = protowire.AppendTag(b, pkPartitions, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(partitionSize(&pk.parts[i])))
		b = appendPartition(b, &pk.parts[i])
	}
	for _, r := range pk.replicas {
		b = protowire.AppendTag(b, pkReplicas, protowire.BytesType)
		b = protowire.AppendString(b, r)
	}
	for _, col := range [...]struct {
		num protowire.Number
		v   []byte
	}{
		{pkKinds, pk.kinds}, {pkReplicaRefs, pk.replicaRefs}, {pkPartitionRefs, pk.partRefs},
		{pkHashLens, pk.hashLens}, {pkCountLens, pk.countLens}, {pkPrefixTokens, pk.prefix},
		{pkObservedDelta, pk.deltas}, {pkHashes, pk.hashes}, {pkCounts, pk.counts},
	} {
		if len(col.v) > 0 { // proto3 omits an empty packed field
			b = protowire.AppendTag(b, col.num, protowire.BytesType)
			b = protowire.AppendBytes(b, col.v)
		}
	}
	return b
}

func partitionSize(p *index.Partition) int {
	n := 0
	for _, s := range [...]string{p.Scheme, p.Model, p.Tenant, p.Adapter} {
		if s != "" {
			n += 1 + protowire.SizeBytes(len(s))
		}
	}
	return n
}

// appendPartition appends the fields of an fsmpb.Partition message.
func appendPartition(b []byte, p *index.Partition) []byte {
	for i, s := range [...]string{p.Scheme, p.Model, p.Tenant, p.Adapter} {
		if s != "" {
			b = protowire.AppendTag(b, protowire.Number(i+1), protowire.BytesType)
			b = protowire.AppendString(b, s)
		}
	}
	return b
}

// validateEvent checks what proto3 would refuse to encode.
func validateEvent(e *index.BlockEvent) error {
	p := &e.Partition
	for _, f := range [...]struct {
		name, s string
	}{{"replica_id", e.ReplicaID}, {"hash_scheme", p.Scheme}, {"model_id", p.Model}, {"tenant_id", p.Tenant}, {"adapter_id", p.Adapter}} {
		if !utf8.ValidString(f.s) {
			return fmt.Errorf("%s is not valid UTF-8", f.name)
		}
	}
	return nil
}

// packedToPB builds the fsmpb.IngestPacked message of evs, column by
// column as packer does, without validating strings (proto.Marshal does).
func packedToPB(evs []index.BlockEvent) *fsmpb.IngestPacked {
	m := &fsmpb.IngestPacked{}
	var pk packer
	var lastObs int64
	for i := range evs {
		e := &evs[i]
		r, p := pk.ref(e.ReplicaID), pk.partRef(e.Partition)
		m.Kinds = append(m.Kinds, uint32(e.Kind))
		m.ReplicaRefs = append(m.ReplicaRefs, uint32(r))
		m.PartitionRefs = append(m.PartitionRefs, uint32(p))
		m.HashLens = append(m.HashLens, uint32(len(e.BlockHashes)))
		m.CountLens = append(m.CountLens, uint32(len(e.BlockTokenCounts)))
		m.PrefixTokensBefore = append(m.PrefixTokensBefore, e.PrefixTokensBefore)
		m.ObservedAtDeltas = append(m.ObservedAtDeltas, e.ObservedAtMs-lastObs)
		lastObs = e.ObservedAtMs
		m.BlockHashes = append(m.BlockHashes, e.BlockHashes...)
		m.BlockTokenCounts = append(m.BlockTokenCounts, e.BlockTokenCounts...)
	}
	m.Replicas = pk.replicas
	for _, p := range pk.parts {
		m.Partitions = append(m.Partitions, fsmpb.PartitionToPB(p))
	}
	return m
}
