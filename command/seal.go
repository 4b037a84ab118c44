package command

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/zeebo/xxh3"
	"google.golang.org/protobuf/encoding/protowire"
)

// Log entries carry a checksum (contract §9.5: a corrupt log is detected and
// refused). raft-boltdb stores entries without one and bbolt does not
// checksum data pages, so a flipped bit in raft.db would otherwise be
// applied as a different write and leave the node silently diverged. The
// checksum is the entry's first field (fsmpb.Entry.checksum, field 15,
// fixed64), which makes a sealed entry recognisable by its first byte:
// entries from before sealing start with field 1 (the format).

// ErrCorrupt: a log entry fails its checksum. The FSM stops applying
// (fsm.Options.OnCorrupt is told) instead of diverging.
var ErrCorrupt = errors.New("fsm: corrupt log entry")

// sealTag is the first byte of a sealed entry: field 15, wire type fixed64.
var sealTag = byte(protowire.EncodeTag(15, protowire.Fixed64Type))

// SealEntry writes body (an entry built with NewEntry and AppendCommand)
// to dst behind its checksum field and returns the result, which is what
// goes into raft.Apply. dst may be nil; it must not overlap body.
func SealEntry(dst, body []byte) []byte {
	dst = append(dst, sealTag)
	dst = binary.LittleEndian.AppendUint64(dst, xxh3.Hash(body))
	return append(dst, body...)
}

// VerifyEntry checks a log entry's checksum and returns the bytes after
// it. An unsealed entry (written before sealing) is returned whole.
// Errors wrap ErrCorrupt and name the stored and computed sums.
func VerifyEntry(b []byte) ([]byte, error) {
	if len(b) == 0 || b[0] != sealTag {
		return b, nil
	}
	if len(b) < 9 {
		return nil, fmt.Errorf("%w: entry of %d bytes is shorter than its checksum", ErrCorrupt, len(b))
	}
	body := b[9:]
	if want, got := binary.LittleEndian.Uint64(b[1:9]), xxh3.Hash(body); want != got {
		return nil, fmt.Errorf("%w: checksum %016x stored, %016x computed over %d bytes", ErrCorrupt, want, got, len(body))
	}
	return body, nil
}
