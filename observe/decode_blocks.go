package observe

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// hash decodes one block hash in any of its three representations.
func (d *Decoder) hash() (uint64, error) {
	c, err := d.dec.PeekCode()
	if err != nil {
		return 0, err
	}
	switch {
	case isSigned(c):
		v, err := d.dec.DecodeInt64()
		return uint64(v), err
	case isInt(c):
		return d.dec.DecodeUint64()
	case msgpcode.IsBin(c) || msgpcode.IsString(c):
		b, err := d.dec.DecodeBytes()
		if err != nil {
			return 0, err
		}
		return FoldHashBytes(b), nil
	}
	return 0, fmt.Errorf("block hash: expected an integer or bytes, got code 0x%02x", c)
}

// FoldHashBytes folds a raw-bytes engine block hash to uint64: its last 8
// bytes read big-endian, left-padded with zeros when shorter.
func FoldHashBytes(b []byte) uint64 {
	if len(b) >= 8 {
		return binary.BigEndian.Uint64(b[len(b)-8:])
	}
	var v uint64
	for _, x := range b {
		v = v<<8 | uint64(x)
	}
	return v
}

func (d *Decoder) hashList(e *Event) error {
	n, null, err := d.optArray()
	if err != nil || null {
		return err
	}
	e.hashOff = len(d.hashes)
	for i := 0; i < n; i++ {
		h, err := d.hash()
		if err != nil {
			return fmt.Errorf("block_hashes[%d]: %w", i, err)
		}
		d.hashes = append(d.hashes, h)
	}
	e.hashLen = n
	return nil
}

func (d *Decoder) parent(e *Event) error {
	isNil, err := d.isNil()
	if err != nil || isNil {
		return err
	}
	h, err := d.hash()
	if err != nil {
		return fmt.Errorf("parent_block_hash: %w", err)
	}
	e.Parent, e.HasParent = h, true
	return nil
}

func (d *Decoder) tokenList(e *Event) error {
	n, null, err := d.optArray()
	if err != nil || null {
		return err
	}
	e.tokOff = len(d.tokens)
	for i := 0; i < n; i++ {
		c, err := d.dec.PeekCode()
		if err != nil {
			return err
		}
		if !isInt(c) {
			return fmt.Errorf("token_ids[%d]: expected an integer, got code 0x%02x", i, c)
		}
		v, err := d.dec.DecodeInt64()
		if err != nil {
			return fmt.Errorf("token_ids[%d]: %w", i, err)
		}
		if c == msgpcode.Uint64 || v < 0 || v > math.MaxUint32 {
			return fmt.Errorf("token_ids[%d]: %d is not an unsigned 32-bit token id", i, v)
		}
		d.tokens = append(d.tokens, uint32(v))
	}
	e.tokLen = n
	return nil
}
