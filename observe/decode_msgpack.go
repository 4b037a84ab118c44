package observe

import (
	"fmt"
	"math"

	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// kind of container at the current position.
const (
	isArray = iota
	isMap
)

func (d *Decoder) container() (kind, n int, err error) {
	c, err := d.dec.PeekCode()
	if err != nil {
		return 0, 0, err
	}
	switch {
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		n, err = d.dec.DecodeArrayLen()
		kind = isArray
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		n, err = d.dec.DecodeMapLen()
		kind = isMap
	default:
		return 0, 0, fmt.Errorf("expected an array or a map, got code 0x%02x", c)
	}
	if err != nil {
		return 0, 0, err
	}
	if err := d.guardLen(n); err != nil {
		return 0, 0, err
	}
	return kind, n, nil
}

// guardLen refuses a length that cannot fit in the remaining input (each
// element takes at least one byte), so a forged header cannot make the
// decoder allocate gigabytes.
func (d *Decoder) guardLen(n int) error {
	if n < 0 || n > d.r.Len() {
		return fmt.Errorf("length %d exceeds the %d remaining bytes", n, d.r.Len())
	}
	return nil
}

// optArray reads an array header or nil (null true, n 0); the length is
// guarded (guardLen).
func (d *Decoder) optArray() (n int, null bool, err error) {
	if null, err = d.isNil(); err != nil || null {
		return 0, null, err
	}
	if n, err = d.dec.DecodeArrayLen(); err != nil {
		return 0, false, err
	}
	return n, false, d.guardLen(n)
}

func (d *Decoder) isNil() (bool, error) {
	c, err := d.dec.PeekCode()
	if err != nil {
		return false, err
	}
	if c == msgpcode.Nil {
		return true, d.dec.DecodeNil()
	}
	return false, nil
}

func (d *Decoder) skipN(n int) error {
	for ; n > 0; n-- {
		if err := d.dec.Skip(); err != nil {
			return err
		}
	}
	return nil
}

func (d *Decoder) key() (string, error) {
	c, err := d.dec.PeekCode()
	if err != nil {
		return "", err
	}
	if !msgpcode.IsString(c) && !msgpcode.IsBin(c) {
		return "", fmt.Errorf("map key is not a string (code 0x%02x)", c)
	}
	return d.dec.DecodeString()
}

func (d *Decoder) float() (float64, error) {
	c, err := d.dec.PeekCode()
	if err != nil {
		return 0, err
	}
	if c != msgpcode.Float && c != msgpcode.Double && !isInt(c) {
		return 0, fmt.Errorf("expected a number, got code 0x%02x", c)
	}
	return d.dec.DecodeFloat64()
}

func isInt(c byte) bool {
	return msgpcode.IsFixedNum(c) || (c >= msgpcode.Uint8 && c <= msgpcode.Uint64) || (c >= msgpcode.Int8 && c <= msgpcode.Int64)
}

func isSigned(c byte) bool {
	return (msgpcode.IsFixedNum(c) && int8(c) < 0) || (c >= msgpcode.Int8 && c <= msgpcode.Int64)
}

// int decodes an integer; nilOK maps nil to (0, false).
func (d *Decoder) int() (int64, bool, error) {
	c, err := d.dec.PeekCode()
	if err != nil {
		return 0, false, err
	}
	if c == msgpcode.Nil {
		return 0, false, d.dec.DecodeNil()
	}
	if !isInt(c) {
		return 0, false, fmt.Errorf("expected an integer, got code 0x%02x", c)
	}
	if c == msgpcode.Uint64 {
		v, err := d.dec.DecodeUint64()
		if err != nil {
			return 0, false, err
		}
		if v > math.MaxInt64 {
			return 0, false, fmt.Errorf("integer %d overflows int64", v)
		}
		return int64(v), true, nil
	}
	v, err := d.dec.DecodeInt64()
	return v, true, err
}

// str decodes a string or nil ("").
func (d *Decoder) str() (string, error) {
	c, err := d.dec.PeekCode()
	if err != nil {
		return "", err
	}
	if c == msgpcode.Nil {
		return "", d.dec.DecodeNil()
	}
	if !msgpcode.IsString(c) && !msgpcode.IsBin(c) {
		return "", fmt.Errorf("expected a string, got code 0x%02x", c)
	}
	return d.dec.DecodeString()
}

// peekMap reports whether the next value is a map.
func (d *Decoder) peekMap() bool {
	c, err := d.dec.PeekCode()
	return err == nil && (msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32)
}
