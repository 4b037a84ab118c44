package loadgen

import (
	"encoding/json"
	"os"
)

// WriteResults writes rs to path (created or truncated), one Result as a
// JSON object per line, in rs's order: the per-request record that
// loadgen --results and bench --live keep beside a run. It errors when
// the file cannot be written.
func WriteResults(path string, rs []Result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for i := range rs {
		if err := enc.Encode(&rs[i]); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}
