package command

import (
	"errors"
	"testing"
)

// Every single-bit flip after the seal's tag is detected.
func TestVerifyEntry_DetectsEveryBitFlip(t *testing.T) {
	body, _ := EncodeEntry(IngestCommand("r1", events("a", 1, 4, 1_000)))
	e := SealEntry(nil, body)
	if got, err := VerifyEntry(e); err != nil || string(got) != string(body) {
		t.Fatalf("intact entry: %v", err)
	}
	for i := 1; i < len(e); i++ {
		for bit := 0; bit < 8; bit++ {
			c := append([]byte(nil), e...)
			c[i] ^= 1 << bit
			if _, err := VerifyEntry(c); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("flip of byte %d bit %d not detected", i, bit)
			}
		}
	}
	if _, err := VerifyEntry(e[:5]); !errors.Is(err, ErrCorrupt) {
		t.Fatal("an entry cut inside its checksum was accepted")
	}
}
