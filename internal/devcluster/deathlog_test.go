package devcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/internal/proccluster"
)

// The line that says why a node ended is found whole among the lines its
// last process wrote: a panic before the exit's error line before ERROR
// before WARN records, the latest of a kind; nothing from the process
// before; "" without any.
func TestDeathCause_PicksTheLineThatSaysWhy(t *testing.T) {
	long := strings.Repeat("x", 500)
	earlier := "time=t level=ERROR msg=\"an earlier process's error\"\n"
	for _, c := range []struct{ name, log, want string }{
		{"the exit's error after INFO", "time=t level=INFO msg=start\ntime=t level=WARN msg=\"heartbeat timeout reached\"\n" +
			"error: listen tcp 127.0.0.1:7401: bind: address already in use " + long + "\ntime=t level=INFO msg=\"unrelated, later\"\n",
			"error: listen tcp 127.0.0.1:7401: bind: address already in use " + long},
		{"a panic", "time=t level=ERROR msg=x\npanic: runtime error: index out of range [3] with length 2\n\ngoroutine 1 [running]:\nmain.main()\n",
			"panic: runtime error: index out of range [3] with length 2"},
		{"the last ERROR record, JSON", `{"time":"t","level":"ERROR","msg":"first"}` + "\n" + `{"time":"t","level":"ERROR","msg":"second"}` + "\n" + `{"level":"INFO","msg":"x"}` + "\n",
			`{"time":"t","level":"ERROR","msg":"second"}`},
		{"a WARN when nothing worse", "time=t level=WARN msg=\"disk slow\"\ntime=t level=INFO msg=x\n", `time=t level=WARN msg="disk slow"`},
		{"none", "time=t level=INFO msg=x\n", ""},
	} {
		path := filepath.Join(t.TempDir(), "node.log")
		if err := os.WriteFile(path, []byte(earlier+c.log), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := deathCause(path, int64(len(earlier))); got != c.want {
			t.Errorf("%s: %q\nwant %q", c.name, got, c.want)
		}
	}
}

// exitOf runs a shell command and returns how it ended.
func exitOf(t *testing.T, script string) proccluster.Exit {
	t.Helper()
	return proccluster.Exit{Err: exec.Command("sh", "-c", script).Run(), RanFor: 2 * time.Second}
}

// The supervisor reports a node that exits with the line of its log that
// says why, and one killed by a signal with its log's path only (its last
// lines are whatever it was doing).
func TestSuperviseDev_ReportsTheLineThatSaysWhy(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "node2.log")
	if err := os.WriteFile(log, []byte("time=t level=WARN msg=\"heartbeat timeout reached, starting election\"\nerror: open data/raft.db: permission denied\ntime=t level=INFO msg=\"raftnode: leader ready\" node=node2 term=2 barrier=1ms applied_index=12\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	procs := proccluster.New(proccluster.Options{Binary: "/bin/true"})
	n := &node{Node: proccluster.Node{ID: "node2"}, proc: procs.Add(proccluster.Spec{Name: "node2", LogPath: log})}
	for _, c := range []struct {
		exit proccluster.Exit
		want string
	}{
		{exitOf(t, "exit 1"), "node2 exited with code 1 after 2s; its log says: error: open data/raft.db: permission denied (log " + log + ")"},
		{exitOf(t, "kill -9 $$"), "node2 killed by signal SIGKILL after 2s; log " + log},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		exits := make(chan nodeExit, 1)
		lines := make(chan string, 4)
		done := make(chan struct{})
		go func() {
			defer close(done)
			newSupervisor(func(f string, a ...any) { lines <- fmt.Sprintf(f, a...) }).run(ctx, exits)
		}()
		exits <- nodeExit{n: n, exit: c.exit}
		if got := <-lines; got != c.want {
			t.Errorf("%q\nwant %q", got, c.want)
		}
		cancel() // before the restart, 3 s away
		<-done
	}
}
