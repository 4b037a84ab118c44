package fsm

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/inference-cache/inference-cache/fsm/fsmpb"
	"github.com/inference-cache/inference-cache/index"
)

// The packed ingest encoding (fsmpb.IngestPacked, entry format 2). In the
// protobuf form every event repeats its replica id and its four partition
// strings, and a random 64-bit block hash takes 10 varint bytes; in the
// log those bytes are copied, checksummed, written to bbolt (whose append
// rewrites the previous entry too), sent to each follower and decoded
// again on three nodes, and that was about half of the cluster's CPU per
// event. The packed form names each distinct partition and replica once
// per command and stores hashes as fixed64: a 4-block event takes about 45
// bytes instead of 75–130.

// Field numbers of fsmpb.Command and fsmpb.IngestPacked (command.proto);
// TestMarshalIngestPacked_ProtoDecodes holds the encoder to them.
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

// MarshalIngestPacked encodes the same command as MarshalIngest in the
// packed form: a Command with request_id and ingest_packed. It must go
// into an entry of format EntryFormatPacked (CommandFormat says so), and
// only when every voter applies that format; UnpackIngest converts it
// back. Errors as MarshalIngest's (strings that are not valid UTF-8).
func MarshalIngestPacked(requestID string, evs []index.BlockEvent) ([]byte, error) {
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

// packedCols are a packed command's columns, decoded: from the wire by
// decodePackedFast, or from the generated message by packedColsFromPB. Both
// paths expand them with expandPacked, so they decode alike.
type packedCols struct {
	parts                                                   []index.Partition
	replicas                                                []string
	kinds, replicaRefs, partRefs, hashLens, countLens, pref []uint32
	deltas                                                  []int64
	hashes                                                  []uint64
	counts                                                  []uint32
}

// expandPacked appends c's events to a (block slices aliasing c.hashes and
// c.counts) and returns them; an error wraps ErrPacked.
func expandPacked(c *packedCols, a *decodeArena) ([]index.BlockEvent, error) {
	n := len(c.kinds)
	for _, col := range [...]struct {
		name string
		l    int
	}{{"replica_refs", len(c.replicaRefs)}, {"partition_refs", len(c.partRefs)}, {"hash_lens", len(c.hashLens)},
		{"count_lens", len(c.countLens)}, {"prefix_tokens_before", len(c.pref)}, {"observed_at_deltas", len(c.deltas)}} {
		if col.l != n {
			return nil, fmt.Errorf("%w: %s has %d values for %d events", ErrPacked, col.name, col.l, n)
		}
	}
	e0 := len(a.evs)
	var obs int64
	h, t := 0, 0
	for i := 0; i < n; i++ {
		if int(c.replicaRefs[i]) >= len(c.replicas) || int(c.partRefs[i]) >= len(c.parts) {
			return nil, fmt.Errorf("%w: event %d names replica %d of %d or partition %d of %d",
				ErrPacked, i, c.replicaRefs[i], len(c.replicas), c.partRefs[i], len(c.parts))
		}
		hl, cl := int(c.hashLens[i]), int(c.countLens[i])
		if hl > len(c.hashes)-h || cl > len(c.counts)-t {
			return nil, fmt.Errorf("%w: event %d runs past the block columns", ErrPacked, i)
		}
		obs += c.deltas[i]
		e := index.BlockEvent{Kind: index.EventKind(c.kinds[i]), ReplicaID: c.replicas[c.replicaRefs[i]],
			Partition: c.parts[c.partRefs[i]], PrefixTokensBefore: c.pref[i], ObservedAtMs: obs}
		if hl > 0 {
			e.BlockHashes = c.hashes[h : h+hl : h+hl]
		}
		if cl > 0 {
			e.BlockTokenCounts = c.counts[t : t+cl : t+cl]
		}
		h, t = h+hl, t+cl
		a.evs = append(a.evs, e)
	}
	if h != len(c.hashes) || t != len(c.counts) {
		return nil, fmt.Errorf("%w: %d block hashes and %d token counts, the events use %d and %d",
			ErrPacked, len(c.hashes), len(c.counts), h, t)
	}
	return a.evs[e0:len(a.evs):len(a.evs)], nil
}

// packedColsFromPB takes the generated message's columns (the generic
// decoding path).
func packedColsFromPB(m *fsmpb.IngestPacked) *packedCols {
	c := &packedCols{replicas: m.GetReplicas(), kinds: m.GetKinds(), replicaRefs: m.GetReplicaRefs(),
		partRefs: m.GetPartitionRefs(), hashLens: m.GetHashLens(), countLens: m.GetCountLens(),
		pref: m.GetPrefixTokensBefore(), deltas: m.GetObservedAtDeltas(), hashes: m.GetBlockHashes(),
		counts: m.GetBlockTokenCounts()}
	for _, p := range m.GetPartitions() {
		c.parts = append(c.parts, fsmpb.PartitionFromPB(p))
	}
	return c
}

// decodePackedFast decodes an IngestPacked body written by
// MarshalIngestPacked (every column packed, nothing unknown) into a; ok
// is false for any other shape, which the generic path then decodes.
func decodePackedFast(b []byte, in *interner, a *decodeArena) (evs []index.BlockEvent, err error, ok bool) {
	c := &a.cols
	c.reset()
	h0, t0 := len(a.hashes), len(a.counts)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType {
			return nil, nil, false
		}
		b = b[n:]
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil, nil, false
		}
		b = b[n:]
		switch num {
		case pkPartitions:
			p, ok := decodePartitionFast(v, in)
			if !ok {
				return nil, nil, false
			}
			c.parts = append(c.parts, p)
		case pkReplicas:
			if !utf8.Valid(v) {
				return nil, nil, false
			}
			c.replicas = append(c.replicas, string(v))
		case pkKinds, pkReplicaRefs, pkPartitionRefs, pkHashLens, pkCountLens, pkPrefixTokens, pkCounts:
			// A column split over several fields concatenates, as
			// repeated fields do in protobuf.
			col := c.col32(num, a)
			for len(v) > 0 {
				x, n := protowire.ConsumeVarint(v)
				if n < 0 {
					return nil, nil, false
				}
				*col = append(*col, uint32(x))
				v = v[n:]
			}
		case pkObservedDelta:
			for len(v) > 0 {
				x, n := protowire.ConsumeVarint(v)
				if n < 0 {
					return nil, nil, false
				}
				c.deltas = append(c.deltas, protowire.DecodeZigZag(x))
				v = v[n:]
			}
		case pkHashes:
			if len(v)%8 != 0 {
				return nil, nil, false
			}
			for ; len(v) > 0; v = v[8:] {
				x, _ := protowire.ConsumeFixed64(v)
				a.hashes = append(a.hashes, x)
			}
		default:
			return nil, nil, false
		}
	}
	c.hashes = a.hashes[h0:]
	c.counts = a.counts[t0:]
	evs, err = expandPacked(c, a)
	return evs, err, true
}

// col32 is the uint32 column of field num; token counts go straight into
// the arena's block slice, like hashes.
func (c *packedCols) col32(num protowire.Number, a *decodeArena) *[]uint32 {
	switch num {
	case pkKinds:
		return &c.kinds
	case pkReplicaRefs:
		return &c.replicaRefs
	case pkPartitionRefs:
		return &c.partRefs
	case pkHashLens:
		return &c.hashLens
	case pkCountLens:
		return &c.countLens
	case pkPrefixTokens:
		return &c.pref
	}
	return &a.counts
}

// reset empties c, keeping its slices' storage for the next command.
func (c *packedCols) reset() {
	clear(c.replicas)
	*c = packedCols{parts: c.parts[:0], replicas: c.replicas[:0], kinds: c.kinds[:0], replicaRefs: c.replicaRefs[:0],
		partRefs: c.partRefs[:0], hashLens: c.hashLens[:0], countLens: c.countLens[:0], pref: c.pref[:0],
		deltas: c.deltas[:0]}
}

// CommandFormat is the entry format a command encoded by this package
// needs: EntryFormatPacked for a packed ingest, else 1. A command that
// does not parse needs 1 (apply reports it).
func CommandFormat(cmd []byte) uint32 {
	for len(cmd) > 0 {
		num, typ, n := protowire.ConsumeTag(cmd)
		if n < 0 {
			return 1
		}
		if num == cmdIngestPacked {
			return EntryFormatPacked
		}
		cmd = cmd[n:]
		n = protowire.ConsumeFieldValue(num, typ, cmd)
		if n < 0 {
			return 1
		}
		cmd = cmd[n:]
	}
	return 1
}

// UnpackIngest converts a packed ingest command (MarshalIngestPacked) to
// the protobuf form MarshalIngest writes, which every binary applies: for
// a leader that may not write format 2 (a voter has not advertised it)
// but received a packed command from a follower that thought otherwise.
// Any other command is returned as is. Errors: ErrDecode, ErrPacked.
func UnpackIngest(cmd []byte) ([]byte, error) {
	if CommandFormat(cmd) != EntryFormatPacked {
		return cmd, nil
	}
	var c fsmpb.Command
	if err := unmarshalCommand(cmd, &c); err != nil {
		return nil, err
	}
	evs, err := expandPacked(packedColsFromPB(c.GetIngestPacked()), new(decodeArena))
	if err != nil {
		return nil, err
	}
	return MarshalIngest(c.GetRequestId(), evs)
}
