package proccluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Spec is one server process's command line, fixed for the life of its
// Proc so that every Start runs the same server again.
type Spec struct {
	// Name identifies the process in errors; callers use the node id.
	Name string
	// Args follow the binary, starting with the subcommand ("server").
	Args []string
	// Env is added to this process's environment (KEY=value).
	Env []string
	// LogPath receives the process's stdout and stderr, appended across
	// restarts so one file tells a node's whole story.
	LogPath string
	// Prefix, when set, runs the binary under another command: the chaos
	// harness puts each server in a network namespace with
	// ["ip", "netns", "exec", name]. The prefix must exec the binary
	// (not fork it) so that signals reach the server itself.
	Prefix []string
}

// ErrNotRunning is returned by the signalling calls of a Proc that has no
// running process.
var ErrNotRunning = errors.New("proccluster: process not running")

// Proc is one server process of a Cluster, started and restarted from
// its Spec.
type Proc struct {
	spec Spec
	c    *Cluster

	mu   sync.Mutex
	cmd  *exec.Cmd     // nil while no process runs
	done chan struct{} // closed when the latest process was reaped
	pid  int           // of the latest process
	last Exit          // of the latest process, once done is closed
}

// Name is the Spec's name.
func (p *Proc) Name() string { return p.spec.Name }

// SetEnv replaces the Spec's extra environment (KEY=value) for the next
// Start; a running process keeps its own.
func (p *Proc) SetEnv(env []string) {
	p.mu.Lock()
	p.spec.Env = append([]string(nil), env...)
	p.mu.Unlock()
}

// LogPath is the file the process writes to.
func (p *Proc) LogPath() string { return p.spec.LogPath }

// Start runs the Spec's command line. It fails when a process of p is
// already running, so a restart cannot leave two servers on one data
// directory.
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("start %s: already running as pid %d", p.spec.Name, p.pid)
	}
	logf, err := os.OpenFile(p.spec.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("start %s: %w", p.spec.Name, err)
	}
	argv := append(append(append([]string{}, p.spec.Prefix...), p.c.opts.Binary), p.spec.Args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), p.spec.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if p.c.opts.OwnProcessGroup {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", p.spec.Name, err)
	}
	started := time.Now()
	done := make(chan struct{})
	p.cmd, p.done, p.pid = cmd, done, cmd.Process.Pid
	go func() {
		err := cmd.Wait()
		logf.Close()
		e := Exit{Err: err, RanFor: time.Since(started)}
		p.mu.Lock()
		p.cmd, p.last = nil, e
		p.mu.Unlock()
		close(done)
		if p.c.opts.OnExit != nil {
			p.c.opts.OnExit(p, e)
		}
	}()
	return nil
}

// Running reports whether a process of p runs (paused counts).
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil
}

// Pid is the running process's id, or the last one's after it exited
// (0 before the first Start), so a message about a dead node can still
// name it.
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid
}

// Done is closed when the latest process has exited (nil before the first
// Start). A Start afterwards makes a new channel.
func (p *Proc) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// Wait blocks until the latest process has exited and says how. Before
// the first Start it returns at once with a zero Exit.
func (p *Proc) Wait() Exit {
	done := p.Done()
	if done == nil {
		return Exit{}
	}
	<-done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// Signal sends sig to the running process.
func (p *Proc) Signal(sig os.Signal) error {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("%w: %s", ErrNotRunning, p.spec.Name)
	}
	return cmd.Process.Signal(sig)
}

// Kill sends SIGKILL (after SIGCONT, in case it is paused) and waits
// until the process is gone: a crash, with no chance to shut down. A
// Proc with no running process returns its last Exit.
func (p *Proc) Kill() Exit {
	_ = p.Signal(syscall.SIGCONT)
	_ = p.Signal(syscall.SIGKILL)
	return p.Wait()
}

// Stop asks the server to shut down (SIGTERM: a leader hands over its
// leadership first) and kills it when it has not exited within limit.
func (p *Proc) Stop(limit time.Duration) Exit {
	_ = p.Signal(syscall.SIGCONT) // a paused process cannot act on SIGTERM
	_ = p.Signal(syscall.SIGTERM)
	return p.waitOrKill(time.Now().Add(limit))
}

// waitOrKill waits for the process to exit, killing it at deadline.
func (p *Proc) waitOrKill(deadline time.Time) Exit {
	done := p.Done()
	if done == nil {
		return Exit{}
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		_ = p.Signal(syscall.SIGKILL)
	}
	return p.Wait()
}

// Pause stops the process with SIGSTOP: it holds its ports and state but
// answers nothing, like a node stuck in a long GC pause or a frozen VM.
func (p *Proc) Pause() error { return p.Signal(syscall.SIGSTOP) }

// Resume continues a paused process with SIGCONT.
func (p *Proc) Resume() error { return p.Signal(syscall.SIGCONT) }

// LogContains reports whether the process's log holds s.
func (p *Proc) LogContains(s string) bool {
	b, err := os.ReadFile(p.spec.LogPath)
	return err == nil && bytes.Contains(b, []byte(s))
}

// LogTail is the last n bytes of the process's log ("" when unreadable).
func (p *Proc) LogTail(n int) string {
	b, err := readTail(p.spec.LogPath, int64(n))
	if err != nil {
		return ""
	}
	return string(b)
}

// LastLogLine is the last non-empty line of the process's log (read from
// its last 8 KiB), or "" when there is none: usually why it died.
func (p *Proc) LastLogLine() string {
	b, err := readTail(p.spec.LogPath, 8<<10)
	if err != nil {
		return ""
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(string(lines[i])); l != "" {
			return l
		}
	}
	return ""
}

// readTail reads at most the last n bytes of the file at path.
func readTail(path string, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	off := max(st.Size()-n, 0)
	b := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return b, nil
}
