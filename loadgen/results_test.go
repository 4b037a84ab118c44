package loadgen

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// The results file holds one JSON object per request, in order, that
// decodes back to the request's Result.
func TestWriteResults_OneJSONLinePerRequest(t *testing.T) {
	rs := []Result{{StartMs: 1, TTFTMs: 12.5, Replica: "sim-1", Reason: "PREFIX_MATCH"}, {StartMs: 2, ErrKind: ErrStatus, Replica: "sim-2"}}
	path := filepath.Join(t.TempDir(), "results.jsonl")
	if err := WriteResults(path, rs); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var got []Result
	for sc.Scan() {
		var r Result
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %d: %v", len(got)+1, err)
		}
		got = append(got, r)
	}
	if len(got) != 2 || got[0].Replica != "sim-1" || got[0].TTFTMs != 12.5 || got[0].Reason != "PREFIX_MATCH" || got[1].ErrKind != ErrStatus || !got[1].Failed() {
		t.Fatalf("read back %+v, want %+v", got, rs)
	}
	if err := WriteResults(filepath.Join(t.TempDir(), "no", "such", "dir"), rs); err == nil {
		t.Fatal("no error writing into a missing directory")
	}
}
