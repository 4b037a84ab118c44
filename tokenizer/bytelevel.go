package tokenizer

import "unicode/utf8"

// byteToRune is GPT-2's bytes_to_unicode table: printable Latin-1 bytes map
// to themselves, the other 68 bytes to U+0100 onwards in byte order, so
// that every byte sequence becomes a string of visible characters.
var byteToRune = func() (t [256]rune) {
	n := rune(0)
	for b := 0; b < 256; b++ {
		if b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF {
			t[b] = rune(b)
		} else {
			t[b] = 256 + n
			n++
		}
	}
	return t
}()

// byteToUTF8 holds the UTF-8 encoding of each byteToRune entry.
var byteToUTF8 = func() (t [256]string) {
	for b, r := range byteToRune {
		t[b] = string(r)
	}
	return t
}()

// byteLevelEncode maps every byte of s through byteToRune.
func byteLevelEncode(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		n += utf8.RuneLen(byteToRune[s[i]])
	}
	buf := make([]byte, 0, n)
	for i := 0; i < len(s); i++ {
		buf = append(buf, byteToUTF8[s[i]]...)
	}
	return string(buf)
}
