package command

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/inference-cache/inference-cache/command/fsmpb"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/policy"
)

// EntryFormat is the log entry format this package writes and the newest
// one it reads. An entry of a larger format is not applied: each of its
// commands gets an error wrapping ErrEntryFormat, on every node alike.
// Format 1 (protobuf ingest commands, no longer written) is still read.
const EntryFormat uint32 = 2

var (
	// ErrEntryFormat: a log entry was written by a newer binary.
	ErrEntryFormat = errors.New("fsm: log entry format newer than this binary")
	// ErrDecode: a log entry's bytes do not decode.
	ErrDecode = errors.New("fsm: log entry does not decode")
)

// IngestCommand builds an ingest command (contract §6.1) in the packed form:
// Marshal of it gives the bytes MarshalIngest gives. MarshalIngest is the
// write path's encoder; this builder is for callers that assemble entries
// from messages (EncodeEntry).
func IngestCommand(requestID string, evs []index.BlockEvent) *fsmpb.Command {
	return &fsmpb.Command{RequestId: requestID, Body: &fsmpb.Command_IngestPacked{IngestPacked: packedToPB(evs)}}
}

// StatsCommand builds a replica stats command.
func StatsCommand(requestID string, st []index.ReplicaStats) *fsmpb.Command {
	s := make([]*fsmpb.ReplicaStats, len(st))
	for i := range st {
		s[i] = fsmpb.StatsToPB(st[i])
	}
	return &fsmpb.Command{RequestId: requestID, Body: &fsmpb.Command_Stats{Stats: &fsmpb.Stats{Stats: s}}}
}

// SetPolicyCommand builds a policy change; apply validates p and sets its
// Version to the previous Version + 1 (p.Version is ignored).
func SetPolicyCommand(requestID string, p policy.Policy) *fsmpb.Command {
	return &fsmpb.Command{RequestId: requestID, Body: &fsmpb.Command_SetPolicy{SetPolicy: &fsmpb.SetPolicy{Policy: fsmpb.PolicyToPB(p)}}}
}

// ExpireCommand builds an expire command with the leader's clock nowMs (ms
// since the Unix epoch): the clock is read once, by the leader, so apply
// stays deterministic.
func ExpireCommand(requestID string, nowMs int64) *fsmpb.Command {
	return &fsmpb.Command{RequestId: requestID, Body: &fsmpb.Command_Expire{Expire: &fsmpb.Expire{NowMs: nowMs}}}
}

// CreditCommand builds an LFU credit command.
func CreditCommand(requestID string, p index.Partition, hashes []uint64) *fsmpb.Command {
	return &fsmpb.Command{RequestId: requestID, Body: &fsmpb.Command_Credit{Credit: &fsmpb.Credit{Partition: fsmpb.PartitionToPB(p), Hashes: hashes}}}
}

// StreamPositionsCommand builds the record of engine stream positions
// (contract §6.11).
func StreamPositionsCommand(requestID string, ps []*fsmpb.StreamPosition) *fsmpb.Command {
	return &fsmpb.Command{RequestId: requestID, Body: &fsmpb.Command_StreamPositions{StreamPositions: &fsmpb.StreamPositions{Positions: ps}}}
}

// RemovalCommand builds the record that an operator removed server id
// while its process, gossip nonce nonce, ran (contract §8.3); nonce ""
// forgets the record of id.
func RemovalCommand(requestID, id, nonce string) *fsmpb.Command {
	return &fsmpb.Command{RequestId: requestID, Body: &fsmpb.Command_Removal{Removal: &fsmpb.Removal{ServerId: id, Nonce: nonce}}}
}

// RestoreMarkCommand builds the marker committed after a whole-cluster
// restore from a backup whose meta had backupIndex and backupDigest.
func RestoreMarkCommand(requestID string, backupIndex, backupDigest uint64) *fsmpb.Command {
	return &fsmpb.Command{RequestId: requestID, Body: &fsmpb.Command_RestoreMark{RestoreMark: &fsmpb.RestoreMark{BackupAppliedIndex: backupIndex, BackupDigest: backupDigest}}}
}

// Marshal encodes one command for AppendCommand. The submitting goroutine
// does it, so the leader's batcher only concatenates bytes.
func Marshal(c *fsmpb.Command) ([]byte, error) {
	// Deterministic (map keys sorted): a retry must encode to the same
	// bytes, since the dedup window compares payloads by hash.
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("fsm: encode command %q: %w", c.GetRequestId(), err)
	}
	return b, nil
}

// NewEntry starts an encoded fsmpb.Entry of EntryFormat in buf (reusing
// its storage); append commands with AppendCommand and seal the result
// with SealEntry before it goes into raft.Apply.
func NewEntry(buf []byte) []byte {
	return newEntryFormat(buf, EntryFormat)
}

func newEntryFormat(buf []byte, format uint32) []byte {
	buf = protowire.AppendTag(buf[:0], 1, protowire.VarintType)
	return protowire.AppendVarint(buf, uint64(format))
}

// AppendCommand appends one Marshal or MarshalIngest output to an entry
// started with NewEntry (protobuf repeated fields concatenate).
func AppendCommand(entry, cmd []byte) []byte {
	entry = protowire.AppendTag(entry, 2, protowire.BytesType)
	return protowire.AppendBytes(entry, cmd)
}

// EncodeEntry encodes commands as one log entry body, unsealed (what
// SealEntry takes; an unsealed entry also applies, as entries written
// before sealing do).
func EncodeEntry(cmds ...*fsmpb.Command) ([]byte, error) {
	e := NewEntry(nil)
	for _, c := range cmds {
		b, err := Marshal(c)
		if err != nil {
			return nil, err
		}
		e = AppendCommand(e, b)
	}
	return e, nil
}

// DecodeEntry decodes a log entry with the generated code: the reference
// the fast decoder (Decoder) is held to, and its fallback.
func DecodeEntry(b []byte) (*fsmpb.Entry, error) {
	var e fsmpb.Entry
	if err := proto.Unmarshal(b, &e); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDecode, err)
	}
	return &e, nil
}
