package proxy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBackends_ParseAndCheckNameTheField(t *testing.T) {
	b, err := ParseBackendFlag("sim-0=http://127.0.0.1:8001/")
	if err != nil || b.ReplicaID != "sim-0" || b.URL != "http://127.0.0.1:8001/" {
		t.Fatalf("%+v %v", b, err)
	}
	for s, want := range map[string]string{
		"http://127.0.0.1:8001":  "want REPLICA_ID=URL",
		"=http://127.0.0.1:8001": "replica_id: required",
		"a=127.0.0.1:8001":       "want http://HOST:PORT",
		"a=ftp://h:1":            "want http://HOST:PORT",
		"a,b=http://h:1":         "must not contain a comma",
	} {
		if _, err := ParseBackendFlag(s); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", s, err, want)
		}
	}
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "b.yaml")
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bs, err := LoadBackends(write("backends:\n  - replica_id: a\n    url: http://h:1\n    model: qwen3\n  - replica_id: b\n    url: https://h:2/v\n"))
	if err != nil || len(bs) != 2 || bs[0].Model != "qwen3" || bs[1].URL != "https://h:2/v" {
		t.Fatalf("%+v %v", bs, err)
	}
	for s, want := range map[string]string{
		"backends:\n  - replica_id: a\n    url: http://h:1\n  - replica_id: a\n    url: http://h:2\n": `backends[1]: replica_id "a" is also backends[0]'s`,
		"backends:\n  - replica_id: a\n    url: http://h:1\n    modle: x\n":                           "field modle not found",
		"backends:\n  - url: http://h:1\n":                                                            "backends[0]: replica_id: required",
		"backends: []\n":                                                                              "no backends",
	} {
		if _, err := LoadBackends(write(s)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", s, err, want)
		}
	}
}
