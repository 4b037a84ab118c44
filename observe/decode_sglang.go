package observe

import (
	"fmt"
)

// sglangMetadata decodes SGLang's BlockStoredMetadata {"cache_salt": s}.
func (d *Decoder) sglangMetadata(e *Event) error {
	isNil, err := d.isNil()
	if err != nil || isNil {
		return err
	}
	n, err := d.dec.DecodeMapLen()
	if err != nil {
		return err
	}
	if err := d.guardLen(n); err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		k, err := d.key()
		if err != nil {
			return err
		}
		if k == "cache_salt" {
			if e.Extra.Salt, err = d.str(); err != nil {
				return fmt.Errorf("cache_salt: %w", err)
			}
			continue
		}
		if err := d.dec.Skip(); err != nil {
			return err
		}
	}
	return nil
}
