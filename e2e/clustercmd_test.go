package e2e

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/internal/poll"
)

// The operator's membership commands reach the leader from any node's
// address: transfer-leadership moves it, remove-server drops a server
// from the voters (and the survivors keep a leader).
func TestClusterCommands_TransferLeadershipAndRemoveServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three server processes")
	}
	c := startCluster(t, 3)
	old := c.waitLeader(20 * time.Second)
	via := c.other(old) // a follower: the command must find the leader itself
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(binPath, append(args, "--addr", via.grpc)...).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		return string(out)
	}

	out := run("cluster", "transfer-leadership")
	nl := c.waitLeader(10 * time.Second)
	if nl == old {
		t.Fatalf("leader still %s after transfer-leadership (%s)", old.id, out)
	}

	// Remove a follower that is not the one we talk through.
	var gone *proc
	for _, p := range c.procs {
		if p != nl && p != via {
			gone = p
		}
	}
	if gone == nil { // via is the new leader: remove the other follower
		for _, p := range c.procs {
			if p != nl {
				gone = p
			}
		}
	}
	out = run("cluster", "remove-server", gone.id)
	if !strings.Contains(out, "removed "+gone.id) {
		t.Fatalf("remove-server output: %q", out)
	}
	c.kill(gone)
	poll.Eventually(t, 10*time.Second, 100*time.Millisecond, func() (bool, string) {
		ctx, cancel := ctxT(2 * time.Second)
		st, err := nl.cl.Status(ctx, &pb.StatusRequest{})
		cancel()
		voters := 0
		for _, m := range st.GetMembers() {
			if m.GetSuffrage() == "Voter" && m.GetId() != gone.id {
				voters++
			}
			if m.GetId() == gone.id && m.GetSuffrage() == "Voter" {
				voters = -100
			}
		}
		return err == nil && voters == 2 && st.GetState() == "Leader",
			fmt.Sprintf("after remove-server, want %s Leader with 2 voters other than %s: %v %v", nl.id, gone.id, st, err)
	})
	// Operator mistakes are refused with the reason, and change nothing.
	refused := []struct {
		args []string
		want string
	}{
		{[]string{"cluster", "remove-server", "no-such-node"}, "not in the Raft configuration"},
		{[]string{"cluster", "add-server", "x", "not an address"}, "want host:port"},
		{[]string{"cluster", "add-server", "y", "127.0.0.1:99999"}, "port in 1..65535"},
		{[]string{"cluster", "add-server", nl.id, "127.0.0.1:5555"}, "already a member"},
		{[]string{"cluster", "transfer-leadership", "nope", "127.0.0.1:5555"}, "not in the Raft configuration"},
		{[]string{"cluster", "transfer-leadership", nl.id, nl.raft}, "this node"},
	}
	for _, r := range refused {
		out, err := exec.Command(binPath, append(r.args, "--addr", nl.grpc)...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), r.want) {
			t.Errorf("%v: err=%v, want a refusal naming %q:\n%s", r.args, err, r.want, out)
		}
	}
	ctx, cancel := ctxT(2 * time.Second)
	st, err := nl.cl.Status(ctx, &pb.StatusRequest{})
	cancel()
	voters := 0
	for _, m := range st.GetMembers() {
		if m.GetSuffrage() == "Voter" {
			voters++
		}
	}
	if err != nil || voters != 2 {
		t.Fatalf("membership changed by refused commands: %v %v", st.GetMembers(), err)
	}
}
