package command

import (
	"encoding/binary"
	"math"
	"sort"

	"github.com/zeebo/xxh3"

	"github.com/inference-cache/inference-cache/index"
)

// The dedup window remembers, with each request id, a hash of what the
// command asked for, so that an id reused for a different write is refused
// instead of being taken for a retry (which would drop the write
// silently). A retry must hash the same although the server may have
// stamped it afresh: the API fills observed_at_ms = 0 with the receiving
// node's clock, so a retry of such a write carries another timestamp.
// Ingest and stats commands are therefore hashed over their content
// without ObservedAtMs, in a fixed encoding of our own (not the protobuf
// bytes, whose map order and field set depend on the encoder); other
// commands carry server-made request ids and are hashed over their bytes.
// The hash is the same on every node since it depends only on the log
// entry.

// PayloadHash is the dedup fingerprint of a decoded command, never 0
// except when it is unknown (a non-ingest, non-stats command whose raw
// bytes were not found), which skips the check. It is computed here,
// beside the encoding, because it must not depend on which encoding
// carried the write. buf is scratch space, returned for reuse.
func PayloadHash(dc *Decoded, buf []byte) (uint64, []byte) {
	var h uint64
	switch {
	case dc.Err != nil && dc.Raw != nil: // the events are not usable
		h = xxh3.Hash(dc.Raw)
	case dc.Err != nil:
		return 0, buf
	case dc.Msg == nil:
		buf = appendEvents(buf[:0], dc.Events)
		h = xxh3.Hash(buf)
	case dc.Stats != nil:
		buf = appendStats(buf[:0], dc.Stats)
		h = xxh3.Hash(buf)
	case dc.Raw != nil:
		h = xxh3.Hash(dc.Raw)
	default:
		return 0, buf
	}
	if h == 0 {
		h = 1
	}
	return h, buf
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendEvents encodes events without ObservedAtMs.
func appendEvents(b []byte, evs []index.BlockEvent) []byte {
	b = append(b, 'E')
	b = binary.AppendUvarint(b, uint64(len(evs)))
	for i := range evs {
		e := &evs[i]
		b = append(b, byte(e.Kind))
		b = appendString(b, e.ReplicaID)
		b = appendString(b, e.Partition.Scheme)
		b = appendString(b, e.Partition.Model)
		b = appendString(b, e.Partition.Tenant)
		b = appendString(b, e.Partition.Adapter)
		b = binary.AppendUvarint(b, uint64(len(e.BlockHashes)))
		for _, h := range e.BlockHashes {
			b = binary.LittleEndian.AppendUint64(b, h)
		}
		b = binary.AppendUvarint(b, uint64(len(e.BlockTokenCounts)))
		for _, c := range e.BlockTokenCounts {
			b = binary.AppendUvarint(b, uint64(c))
		}
		b = binary.AppendUvarint(b, uint64(e.PrefixTokensBefore))
	}
	return b
}

// appendStats encodes stats without ObservedAtMs, map keys sorted. The
// queue is appended only when set, so a stats write without one hashes as
// it did before the fields existed: its retry across an upgrade is still
// recognised as a retry by dedup entries an older binary recorded.
func appendStats(b []byte, st []index.ReplicaStats) []byte {
	b = append(b, 'S')
	b = binary.AppendUvarint(b, uint64(len(st)))
	var keys []string
	for i := range st {
		s := &st[i]
		b = appendString(b, s.ReplicaID)
		b = appendString(b, s.ModelID)
		b = appendString(b, s.Endpoint)
		b = binary.AppendUvarint(b, uint64(len(s.HashSchemes)))
		for _, h := range s.HashSchemes {
			b = appendString(b, h)
		}
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(s.Pressure))
		keys = keys[:0]
		for k := range s.TenantHitRate {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b = binary.AppendUvarint(b, uint64(len(keys)))
		for _, k := range keys {
			b = appendString(b, k)
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(s.TenantHitRate[k]))
		}
		if s.WaitingRequests != 0 || s.RunningRequests != 0 {
			b = append(b, 'Q')
			b = binary.AppendUvarint(b, uint64(s.WaitingRequests))
			b = binary.AppendUvarint(b, uint64(s.RunningRequests))
		}
	}
	return b
}
