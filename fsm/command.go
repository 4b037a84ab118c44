package fsm

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/inference-cache/inference-cache/fsm/fsmpb"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/policy"
)

// EntryFormat is the newest log entry format this binary applies. An
// entry with a larger format is not applied; each of its commands gets an
// error wrapping ErrEntryFormat. Format 1 holds protobuf commands only;
// format 2 (EntryFormatPacked) may also hold packed ingest commands
// (MarshalIngestPacked). A binary writes format 2 only once every voter
// advertises it applies format 2, so no node meets an entry it cannot
// apply (raftnode; docs/operations.md, upgrades).
const EntryFormat uint32 = EntryFormatPacked

// EntryFormatPacked is the entry format that may carry packed ingest
// commands.
const EntryFormatPacked uint32 = 2

var (
	// ErrEntryFormat: a log entry was written by a newer binary.
	ErrEntryFormat = errors.New("fsm: log entry format newer than this binary")
	// ErrDecode: a log entry's bytes do not decode.
	ErrDecode = errors.New("fsm: log entry does not decode")
	// ErrRejected: apply refused a command (invalid policy, unknown
	// command, a panic in the index); state is unchanged by it.
	ErrRejected = errors.New("fsm: command rejected")
	// ErrRequestIDReused: a command carried a request id still in the
	// dedup window (DedupWindow ids) that was first used for a command
	// with different bytes; it is refused (and wraps ErrRejected too), so
	// a client bug reusing ids never silently drops a write.
	ErrRequestIDReused = errors.New("request id reused for a different payload")
)

// IngestCommand builds an ingest command (SPEC 6).
func IngestCommand(requestID string, evs []index.BlockEvent) *fsmpb.Command {
	return &fsmpb.Command{RequestId: requestID, Body: &fsmpb.Command_Ingest{Ingest: &fsmpb.Ingest{Events: fsmpb.EventsToPB(evs)}}}
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
// since the Unix epoch).
func ExpireCommand(requestID string, nowMs int64) *fsmpb.Command {
	return &fsmpb.Command{RequestId: requestID, Body: &fsmpb.Command_Expire{Expire: &fsmpb.Expire{NowMs: nowMs}}}
}

// CreditCommand builds an LFU credit command.
func CreditCommand(requestID string, p index.Partition, hashes []uint64) *fsmpb.Command {
	return &fsmpb.Command{RequestId: requestID, Body: &fsmpb.Command_Credit{Credit: &fsmpb.Credit{Partition: fsmpb.PartitionToPB(p), Hashes: hashes}}}
}

// RestoreMarkCommand builds the marker committed after a whole-cluster
// restore from a backup whose meta had backupIndex and backupDigest.
func RestoreMarkCommand(requestID string, backupIndex, backupDigest uint64) *fsmpb.Command {
	return &fsmpb.Command{RequestId: requestID, Body: &fsmpb.Command_RestoreMark{RestoreMark: &fsmpb.RestoreMark{BackupAppliedIndex: backupIndex, BackupDigest: backupDigest}}}
}

// MarshalCommand encodes one command for AppendCommand (done by the
// submitting goroutine, so the leader's batcher only concatenates bytes).
func MarshalCommand(c *fsmpb.Command) ([]byte, error) {
	// Deterministic (map keys sorted): a retry must encode to the same
	// bytes, since the dedup window compares payloads by hash.
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("fsm: encode command %q: %w", c.GetRequestId(), err)
	}
	return b, nil
}

// NewEntry starts an encoded fsmpb.Entry of format 1 (protobuf commands
// only, which every binary applies); append commands with AppendCommand.
// The result is what goes into raft.Apply.
func NewEntry(buf []byte) []byte {
	return NewEntryFormat(buf, 1)
}

// NewEntryFormat is NewEntry for an entry of the given format: the
// largest CommandFormat of the commands it will hold.
func NewEntryFormat(buf []byte, format uint32) []byte {
	buf = protowire.AppendTag(buf[:0], 1, protowire.VarintType)
	return protowire.AppendVarint(buf, uint64(format))
}

// AppendCommand appends one MarshalCommand output to an entry started with
// NewEntry (protobuf repeated fields concatenate).
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
		b, err := MarshalCommand(c)
		if err != nil {
			return nil, err
		}
		e = AppendCommand(e, b)
	}
	return e, nil
}

// unmarshalCommand decodes one command's bytes; an error wraps ErrDecode.
func unmarshalCommand(b []byte, c *fsmpb.Command) error {
	if err := proto.Unmarshal(b, c); err != nil {
		return fmt.Errorf("%w: %v", ErrDecode, err)
	}
	return nil
}

// DecodeEntry decodes a log entry.
func DecodeEntry(b []byte) (*fsmpb.Entry, error) {
	var e fsmpb.Entry
	if err := proto.Unmarshal(b, &e); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDecode, err)
	}
	return &e, nil
}
