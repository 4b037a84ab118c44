package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/internal/poll"
)

func runBin(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(binPath, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("inference-cache %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// The operator CLI against the live cluster: ingest from stdin, lookup,
// status, policy get, and a snapshot save → inspect → restore round trip.
func checkCLI(t *testing.T, c *cluster) {
	addrs := []string{"--addr", c.procs[0].grpc, "--addr", c.procs[1].grpc, "--addr", c.procs[2].grpc}
	ev := `[{"kind":"STORED","replica_id":"r-cli","hash_scheme":"vllm","model_id":"m","tenant_id":"t","token_ids":[` + joinInts(toks(40000, 128)) + `],"block_size":16},
	        {"kind":"STORED","replica_id":"","hash_scheme":"vllm","model_id":"m","block_hashes":["1"]}]`
	// One of the two events is invalid: the JSON lists it and the exit
	// status says part of the input was refused.
	ic := exec.Command(binPath, append([]string{"ingest", "--json"}, addrs...)...)
	ic.Stdin = strings.NewReader(ev)
	outB, err := ic.Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(ee.Stderr), "1 events rejected") {
		t.Fatalf("ingest with a rejected event: err %v, want exit 1 naming the rejection", err)
	}
	out := string(outB)
	var ir struct {
		Accepted int `json:"accepted"`
		Rejected []struct {
			EventIndex int    `json:"event_index"`
			Reason     string `json:"reason"`
		} `json:"rejected"`
	}
	if err := json.Unmarshal([]byte(out), &ir); err != nil || ir.Accepted != 1 || len(ir.Rejected) != 1 || ir.Rejected[0].Reason != "replica_id is empty" {
		t.Fatalf("ingest output %s (%v)", out, err)
	}
	c.waitSameDigest(10*time.Second, c.procs...)
	out = runBin(t, "", "lookup", "--addr", c.procs[2].grpc, "--model", "m", "--tenant", "t", "--tokens", joinInts(toks(40000, 128)), "--block-size", "16")
	if !strings.Contains(out, "PREFIX_MATCH") || !strings.Contains(out, "r-cli") {
		t.Fatalf("lookup table:\n%s", out)
	}
	// An election may be in progress (the 2-core machine can delay a
	// heartbeat while three servers start): ask again until one leader
	// shows, as an operator would.
	poll.Eventually(t, 10*time.Second, 200*time.Millisecond, func() (bool, string) {
		out = runBin(t, "", append([]string{"status"}, addrs...)...)
		return strings.Count(out, "Leader") >= 1 && strings.Count(out, "Voter") == 3,
			"status table without a leader and 3 voters:\n" + out
	})
	// Each row names the pid of the server process listening there (the
	// nodes run on this machine).
	for _, p := range c.procs {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(p.grpc) + `\s+` + p.id + `\s+` + strconv.Itoa(p.Pid()) + `\s`).MatchString(out) {
			t.Fatalf("status table: no row %s %s with pid %d:\n%s", p.grpc, p.id, p.Pid(), out)
		}
	}
	// Each node's digest comes with the applied index it was computed at
	// (status and digest are separate calls, so APPLIED may differ).
	if got := len(regexp.MustCompile(`(?m)\s[0-9a-f]{16}@[1-9][0-9]*$`).FindAllString(out, -1)); got != 3 {
		t.Fatalf("status table: %d of 3 rows end in DIGEST@INDEX:\n%s", got, out)
	}
	out = runBin(t, "", "policy", "get", "--addr", c.procs[0].grpc)
	if !strings.Contains(out, "kind: CachePolicy") || !strings.Contains(out, "maxReplicas: 4") {
		t.Fatalf("policy get:\n%s", out)
	}
	checkPolicySet(t, c, out)
	snap := filepath.Join(t.TempDir(), "backup.snap")
	before := c.waitSameDigest(10*time.Second, c.procs...)
	out = runBin(t, "", "snapshot", "save", snap, "--addr", c.procs[1].grpc)
	// One line saying what was written, not the inspect table.
	if !regexp.MustCompile(`^wrote \S*backup\.snap: [1-9]\d* bytes, applied index [1-9]\d* \(term \d+\), .*digest ` + fmt.Sprintf("%016x", before.Digest) + ` \(verified\)\n$`).MatchString(out) {
		t.Fatalf("snapshot save printed:\n%s\nwant one line naming the file, bytes, applied index and digest", out)
	}
	out = runBin(t, "", "snapshot", "inspect", snap, "--json")
	var meta struct {
		AppliedIndex uint64 `json:"applied_index"`
		Digest       string `json:"digest"`
	}
	if err := json.Unmarshal([]byte(out), &meta); err != nil || meta.Digest != fmt.Sprintf("%016x", before.Digest) {
		t.Fatalf("inspect %s (%v), want digest %016x", out, err, before.Digest)
	}
	// Standard input is not a terminal: without --yes nothing is restored.
	ingestOut := runBin(t, `[{"kind":"STORED","replica_id":"r-after","hash_scheme":"vllm","model_id":"m","tenant_id":"t","token_ids":[`+joinInts(toks(60000, 128))+`],"block_size":16}]`,
		append([]string{"ingest"}, addrs...)...)
	if !regexp.MustCompile(`accepted\s+1 `).MatchString(ingestOut) {
		t.Fatalf("ingest after the backup: %s", ingestOut)
	}
	changed := c.waitSameDigest(10*time.Second, c.procs...)
	if o, err := exec.Command(binPath, append([]string{"snapshot", "restore", snap}, addrs...)...).CombinedOutput(); err == nil ||
		!strings.Contains(string(o), "index and policy") || !strings.Contains(string(o), "--yes") {
		t.Fatalf("restore without --yes off a terminal: err %v\n%s\nwant a refusal that says what is replaced and asks for --yes", err, o)
	}
	if d := c.waitSameDigest(10*time.Second, c.procs...); d.Digest != changed.Digest {
		t.Fatalf("a refused restore changed the digest %x → %x", changed.Digest, d.Digest)
	}
	runBin(t, "", append([]string{"snapshot", "restore", snap, "--yes"}, addrs...)...)
	after := c.waitSameDigest(20*time.Second, c.procs...)
	if after.Digest != before.Digest {
		t.Errorf("digest after restoring the backup %x, want %x", after.Digest, before.Digest)
	}
	// A corrupt file is refused before anything changes.
	b, _ := os.ReadFile(snap)
	b[len(b)/2] ^= 0xff
	bad := snap + ".bad"
	_ = os.WriteFile(bad, b, 0o644)
	if out, err := exec.Command(binPath, "snapshot", "restore", bad, "--yes", "--addr", c.procs[0].grpc).CombinedOutput(); err == nil {
		t.Errorf("corrupt snapshot restored: %s", out)
	}
	for _, p := range c.procs {
		if r := lookup(t, p, lookupReq(tenant, chainA)); r.ReasonCode != pb.ReasonCode_PREFIX_MATCH {
			t.Errorf("%s after restore: %v", p.id, r)
		}
	}
}

// checkPolicySet: an unchanged file commits nothing; a file written from
// an older version than the cluster's is refused unless --force. got is
// the output of `policy get` (a "# version N" first line).
func checkPolicySet(t *testing.T, c *cluster, got string) {
	t.Helper()
	dir := t.TempDir()
	cur := filepath.Join(dir, "current.yaml")
	if err := os.WriteFile(cur, []byte(got), 0o644); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`^# version (\d+)\n`).FindStringSubmatch(got)
	if m == nil {
		t.Fatalf("policy get output has no version line:\n%s", got)
	}
	v0, _ := strconv.ParseUint(m[1], 10, 64)
	addr := "--addr=" + c.procs[0].grpc
	out := runBin(t, "", "policy", "set", cur, addr)
	if want := fmt.Sprintf("policy unchanged: %s equals the policy in force (version %d); nothing committed\n", cur, v0); out != want {
		t.Fatalf("policy set of the unchanged policy printed %q, want %q", out, want)
	}
	if again := runBin(t, "", "policy", "get", addr); again != got {
		t.Fatalf("an unchanged policy set moved the policy:\n%s\nbefore:\n%s", again, got)
	}
	edited := filepath.Join(dir, "edited.yaml")
	if err := os.WriteFile(edited, []byte(strings.Replace(got, "maxReplicas: 4", "maxReplicas: 3", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := runBin(t, "", "policy", "set", edited, addr); !strings.Contains(out, fmt.Sprintf("# version %d\n", v0+1)) || !strings.Contains(out, "maxReplicas: 3") {
		t.Fatalf("policy set of an edited file printed:\n%s\nwant version %d with maxReplicas 3", out, v0+1)
	}
	// current.yaml still says version v0: setting it now would undo the edit.
	o, err := exec.Command(binPath, "policy", "set", cur, addr).CombinedOutput()
	if err == nil || !strings.Contains(string(o), fmt.Sprintf("written from policy version %d, and the cluster's policy is now version %d", v0, v0+1)) || !strings.Contains(string(o), "--force") {
		t.Fatalf("policy set of a stale file: err %v\n%s\nwant a refusal naming both versions and --force", err, o)
	}
	if out := runBin(t, "", "policy", "set", cur, "--force", addr); !strings.Contains(out, fmt.Sprintf("# version %d\n", v0+2)) || !strings.Contains(out, "maxReplicas: 4") {
		t.Fatalf("policy set --force of the stale file printed:\n%s\nwant version %d with maxReplicas 4 back", out, v0+2)
	}
}

func joinInts(v []uint32) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(int(x))
	}
	return strings.Join(s, ",")
}
