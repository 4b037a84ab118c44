package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A bad --policy file stops the server at start with an error naming the
// file, the line, the field and the reason; `policy set` reports the same
// before contacting any server.
func TestPolicyFileErrorsNameFileFieldReason(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(file, []byte("kind: CachePolicy\nspec:\n  maxReplicas: 4\n  evictionPolicy: MRU\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := []string{file + ":4", "spec.evictionPolicy", "must be LRU or LFU"}
	for _, args := range [][]string{
		{"server", "--node-id", "x", "--data-dir", filepath.Join(dir, "data"), "--policy", file, "--grpc-addr", "127.0.0.1:0", "--http-addr", ""},
		{"policy", "set", file, "--addr", "127.0.0.1:1"},
	} {
		cmd := exec.Command(binPath, args...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		done := make(chan error, 1)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err == nil {
				t.Fatalf("%s: exit 0 with a bad policy file", args[0])
			}
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("%s: still running with a bad policy file", args[0])
		}
		for _, w := range want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s: output %q lacks %q", args[0], out.String(), w)
			}
		}
	}
}

// Every subcommand has --help with an example.
func TestEverySubcommandHasExample(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	for _, sub := range [][]string{{"server"}, {"dev"}, {"lookup"}, {"ingest"}, {"stats"}, {"status"}, {"policy"}, {"policy", "get"},
		{"policy", "set"}, {"snapshot"}, {"snapshot", "save"}, {"snapshot", "restore"}, {"snapshot", "inspect"}, {"fingerprint"}, {"picker"}, {"version"}} {
		out, err := exec.Command(binPath, append(sub, "--help")...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "Examples:") {
			t.Errorf("%v --help: err=%v, no Examples section:\n%s", sub, err, out)
		}
	}
}
