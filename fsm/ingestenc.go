package fsm

import (
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/inference-cache/inference-cache/index"
)

// MarshalIngest returns MarshalCommand(IngestCommand(requestID, evs)), the
// same bytes, without building the protobuf messages: on the write path
// that conversion (a message per event and per partition) cost more than
// the encoding itself. Strings must be valid UTF-8, as proto3 requires;
// otherwise the error names the event and the field and nothing is
// encoded.
func MarshalIngest(requestID string, evs []index.BlockEvent) ([]byte, error) {
	if !utf8.ValidString(requestID) {
		return nil, fmt.Errorf("fsm: encode command %q: request_id is not valid UTF-8", requestID)
	}
	body := 0
	for i := range evs {
		if err := validateEvent(&evs[i]); err != nil {
			return nil, fmt.Errorf("fsm: encode command %q: event %d: %w", requestID, i, err)
		}
		n := eventSize(&evs[i])
		body += 1 + protowire.SizeVarint(uint64(n)) + n
	}
	size := 1 + protowire.SizeVarint(uint64(body)) + body
	if requestID != "" {
		size += 1 + protowire.SizeBytes(len(requestID))
	}
	b := make([]byte, 0, size)
	if requestID != "" {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, requestID)
	}
	// The oneof body is set, so the (possibly empty) Ingest is written.
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(body))
	for i := range evs {
		e := &evs[i]
		n := eventSize(e)
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(n))
		b = appendEvent(b, e)
	}
	return b, nil
}

// The field numbers below are fsmpb.BlockEvent's and fsmpb.Partition's
// (command.proto); TestMarshalIngest_SameBytesAsProto holds them to it.

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

func packedSize[T uint64 | uint32](xs []T) int {
	n := 0
	for _, x := range xs {
		n += protowire.SizeVarint(uint64(x))
	}
	return n
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

func eventSize(e *index.BlockEvent) int {
	p := &e.Partition
	n := 0
	if e.Kind != 0 {
		n += 1 + protowire.SizeVarint(uint64(uint32(e.Kind)))
	}
	if e.ReplicaID != "" {
		n += 1 + protowire.SizeBytes(len(e.ReplicaID))
	}
	n += 1 + protowire.SizeBytes(partitionSize(p)) // always set by IngestCommand
	if len(e.BlockHashes) > 0 {
		n += 1 + protowire.SizeBytes(packedSize(e.BlockHashes))
	}
	if len(e.BlockTokenCounts) > 0 {
		n += 1 + protowire.SizeBytes(packedSize(e.BlockTokenCounts))
	}
	if e.PrefixTokensBefore != 0 {
		n += 1 + protowire.SizeVarint(uint64(e.PrefixTokensBefore))
	}
	if e.ObservedAtMs != 0 {
		n += 1 + protowire.SizeVarint(uint64(e.ObservedAtMs))
	}
	return n
}

func appendEvent(b []byte, e *index.BlockEvent) []byte {
	if e.Kind != 0 {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(uint32(e.Kind)))
	}
	if e.ReplicaID != "" {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendString(b, e.ReplicaID)
	}
	p := &e.Partition
	b = protowire.AppendTag(b, 3, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(partitionSize(p)))
	b = appendPartition(b, p)
	if len(e.BlockHashes) > 0 {
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(packedSize(e.BlockHashes)))
		for _, h := range e.BlockHashes {
			b = protowire.AppendVarint(b, h)
		}
	}
	if len(e.BlockTokenCounts) > 0 {
		b = protowire.AppendTag(b, 5, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(packedSize(e.BlockTokenCounts)))
		for _, c := range e.BlockTokenCounts {
			b = protowire.AppendVarint(b, uint64(c))
		}
	}
	if e.PrefixTokensBefore != 0 {
		b = protowire.AppendTag(b, 6, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(e.PrefixTokensBefore))
	}
	if e.ObservedAtMs != 0 {
		b = protowire.AppendTag(b, 7, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(e.ObservedAtMs))
	}
	return b
}
