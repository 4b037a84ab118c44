package devcluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"unicode"

	"github.com/inference-cache/inference-cache/internal/proccluster"
)

// causeWindow bounds how much of a dead node's log is read for the
// line that says why it ended: its last 64 KiB.
const causeWindow = 64 << 10

// logSize is the size of the log at path (0 when there is none yet): the
// offset from which the next process's lines are appended.
func logSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// deathCause is the line of the log at path, written after byte from
// (by the process that just ended), that most likely says why it ended,
// whole: the last "panic:" or "fatal error:" line of a crash, else the
// last "error: …" the command exits with, else the last ERROR record,
// else the last WARN record; "" when there is none. Records are slog's
// text (level=ERROR) or JSON ("level":"ERROR") form.
func deathCause(path string, from int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	size := logSize(path)
	start := max(from, size-causeWindow, 0)
	b := make([]byte, size-start)
	if _, err := f.ReadAt(b, start); err != nil && !errors.Is(err, io.EOF) {
		return ""
	}
	if start > from {
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:] // the window's first line is cut
		}
	}
	rank := func(l string) int {
		switch {
		case strings.HasPrefix(l, "panic:") || strings.HasPrefix(l, "fatal error:"):
			return 4
		case strings.HasPrefix(l, "error:"):
			return 3
		case strings.Contains(l, "level=ERROR") || strings.Contains(l, `"level":"ERROR"`):
			return 2
		case strings.Contains(l, "level=WARN") || strings.Contains(l, `"level":"WARN"`):
			return 1
		}
		return 0
	}
	best, bestRank := "", 0
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if r := rank(l); r > 0 && r >= bestRank {
			best, bestRank = l, r
		}
	}
	return best
}

// killedBySignal reports whether the process ended by a signal (kill -9,
// the OOM killer): its log then holds no reason.
func killedBySignal(e proccluster.Exit) bool {
	var ee *exec.ExitError
	if !errors.As(e.Err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled()
}

// deathReport says where to look for why node n's process ended: the
// log's line that says so (deathCause), whole, or that its log holds
// none, always with the log's path. A process killed by a signal has its
// reason in the signal; its log is named without a line, which would be
// whatever it was doing.
func deathReport(n *node, e proccluster.Exit) string {
	log := n.proc.LogPath()
	if killedBySignal(e) {
		return "log " + log
	}
	if cause := deathCause(log, n.logFrom); cause != "" {
		return fmt.Sprintf("its log says: %s (log %s)", printable(cause), log)
	}
	return fmt.Sprintf("no warning or error in its log since it started (log %s)", log)
}

// startNode starts n's process, marking where its lines begin in the log.
func startNode(n *node) error {
	n.logFrom = logSize(n.proc.LogPath())
	return n.proc.Start()
}

// printable returns s as is when every rune is printable, else quoted
// with escapes: a log line may hold a control character (a terminal
// escape, a NUL) that must not reach the operator's terminal raw.
func printable(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) < 0 {
		return s
	}
	return strconv.Quote(s)
}
