package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every bad flag is refused before anything starts, naming the flag and
// what it must be.
func TestProxyCmd_BadFlagsNameTheFlag(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("backends:\n  - url: http://127.0.0.1:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	base := []string{"proxy", "--listen", "127.0.0.1:0"}
	with := func(extra ...string) []string { return append(append([]string{}, base...), extra...) }
	be := []string{"--backend", "a=http://127.0.0.1:1"}
	cases := []struct {
		args []string
		want string
	}{
		{with(), "--backend or --backends: give at least one backend"},
		{with("--backend", "a"), `--backend "a": want REPLICA_ID=URL`},
		{with("--backend", "a=localhost:8000"), `want http://HOST:PORT`},
		{with("--backend", "a=http://h:1", "--backend", "a=http://h:2"), `replica_id "a" is also backends[0]'s`},
		{with("--backends", bad), "--backends: backends file " + bad + ": backends[0]: replica_id: required"},
		{with("--backends", filepath.Join(dir, "none.yaml")), "--backends: backends file"},
		{with(append(be, "--strategy", "random")...), `--strategy: strategy "random": want picker, round-robin, least-loaded, dynamo, llm-d or sglang`},
		{with(append(be, "--lookup-budget", "0s")...), "--lookup-budget 0s: must be positive"},
		{with(append(be, "--block-size", "0")...), "--block-size 0: want 1 to 4096"},
		{with(append(be, "--max-body-bytes", "0")...), "--max-body-bytes 0: must be positive"},
		{with(append(be, "--addr", "127.0.0.1")...), `--addr "127.0.0.1": want HOST:PORT`},
		{with(append(be, "--models-dir", filepath.Join(dir, "nope"))...), `--models-dir "`},
		{with(append(be, "--health-interval", "0s")...), "--health-interval 0s: must be positive"},
		{with(append(be, "--listen", "8080")...), `--listen "8080": want HOST:PORT`},
	}
	for _, c := range cases {
		_, err := runCLI(t, "", c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v:\n got  %v\n want an error containing %q", c.args[1:], err, c.want)
		}
	}
}
