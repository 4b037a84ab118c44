package raftnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"

	"github.com/inference-cache/inference-cache/command"
	"github.com/inference-cache/inference-cache/raftnode/forwardpb"
	"github.com/inference-cache/inference-cache/snapshot"
)

func expireBytes(reqID string, nowMs int64) []byte {
	b, _ := command.Marshal(command.ExpireCommand(reqID, nowMs))
	return b
}

func (n *Node) wait(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return translate(err)
	case <-ctx.Done():
		return fmt.Errorf("%w: %v", ErrTimeout, ctx.Err())
	}
}

// Snapshot takes a Raft snapshot now on this node and returns its index and
// term (when nothing was applied since the last one, that one's).
func (n *Node) Snapshot(ctx context.Context) (uint64, uint64, error) {
	f := n.raft.Snapshot()
	err := n.wait(ctx, f)
	if errors.Is(err, raft.ErrNothingNewToSnapshot) {
		return n.latestSnapshot()
	}
	if err != nil {
		return 0, 0, err
	}
	meta, rc, err := f.Open()
	if err != nil {
		return 0, 0, fmt.Errorf("raftnode: open new snapshot: %w", err)
	}
	rc.Close()
	return meta.Index, meta.Term, nil
}

func (n *Node) latestSnapshot() (uint64, uint64, error) {
	l, err := n.snaps.List()
	if err != nil || len(l) == 0 {
		return 0, 0, fmt.Errorf("raftnode: no snapshot available: %v", err)
	}
	return l[0].Index, l[0].Term, nil
}

// Backup takes a snapshot on this node (any node) and writes the snapshot
// stream (the package snapshot format) to w. The file restores a whole
// cluster with Restore or `snapshot restore`.
func (n *Node) Backup(w io.Writer) error {
	f := n.raft.Snapshot()
	err := translate(f.Error())
	var rc io.ReadCloser
	switch {
	case err == nil:
		_, rc, err = f.Open()
	case errors.Is(err, raft.ErrNothingNewToSnapshot):
		var l []*raft.SnapshotMeta
		l, err = n.snaps.List()
		if err == nil && len(l) == 0 {
			err = errors.New("no snapshot")
		}
		if err == nil {
			_, rc, err = n.snaps.Open(l[0].ID)
		}
	}
	if err != nil {
		if n.shuttingDown() && !errors.Is(err, ErrShutdown) {
			// The shutdown abandoned the snapshot (fsm.AbortSnapshots):
			// another node can take the backup.
			return fmt.Errorf("raftnode: backup: %w: %v", ErrShutdown, err)
		}
		return fmt.Errorf("raftnode: backup: %w", err)
	}
	defer rc.Close()
	if _, err := io.Copy(w, rc); err != nil {
		return fmt.Errorf("raftnode: backup: copy: %w", err)
	}
	return nil
}

// Restore replaces the whole cluster's state with the snapshot stream r
// (a Backup file). The stream is verified first (snapshot.ErrCorrupt,
// ErrTruncated, ErrVersion); on a follower it is forwarded to the leader.
// The leader installs it with Raft's user restore (a new snapshot at an
// index past its log, shipped to every follower by InstallSnapshot), then
// commits a RestoreMark command. Returns that command's index.
//
// An election in progress is waited out like a write's: a not-leader /
// no-leader / leadership-lost / forwarding failure is retried with jitter
// for at most Config.WriteRetry, provided the stream can be sent again
// whole: nothing was read from r yet, or r is an io.Seeker (the gRPC
// service passes its spooled upload) and is rewound. Sending the backup
// again is safe: a restore replaces the whole state, so a repeat leaves
// the same state.
func (n *Node) Restore(ctx context.Context, r io.Reader) (uint64, error) {
	cr := &countingReader{r: r}
	wctx, cancel := context.WithTimeout(ctx, n.cfg.WriteRetry)
	defer cancel()
	for attempt := 0; ; attempt++ {
		idx, err := n.restoreOnce(ctx, cr)
		if err == nil || !retriable(err) {
			return idx, err
		}
		if cr.n > 0 {
			s, ok := r.(io.Seeker)
			if !ok {
				return idx, err
			}
			if _, serr := s.Seek(0, io.SeekStart); serr != nil {
				return idx, err
			}
			cr.n = 0
		}
		n.metrics.retries.Add(1)
		n.log.Info("raftnode: restore retried", "attempt", attempt+1, "err", err)
		select {
		case <-time.After(retryBackoff(attempt)):
		case <-wctx.Done():
			return 0, fmt.Errorf("%w: restore: gave up after %d attempts: %w", ErrTimeout, attempt+1, err)
		case <-n.shutdownCh:
			return 0, ErrShutdown
		}
	}
}

// restoreOnce is one attempt of Restore: locally on the leader, else
// streamed to the leader this node knows.
func (n *Node) restoreOnce(ctx context.Context, r io.Reader) (uint64, error) {
	if n.raft.State() == raft.Leader {
		return n.restoreLocal(ctx, r)
	}
	c, _, err := n.leaderClient()
	if err != nil {
		return 0, err
	}
	st, err := c.Restore(ctx)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrForward, err)
	}
	buf := make([]byte, 1<<20)
	for {
		k, rerr := r.Read(buf)
		if k > 0 {
			if err := st.Send(&forwardpb.RestoreChunk{Data: buf[:k]}); err != nil {
				break // the server ended the stream; CloseAndRecv says why
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return 0, fmt.Errorf("raftnode: restore: read input: %w", rerr)
		}
	}
	resp, err := st.CloseAndRecv()
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrForward, err)
	}
	return resp.GetIndex(), fromCode(resp.GetCode(), resp.GetMessage())
}

// countingReader counts the bytes read through it (Restore: may a failed
// attempt be retried without rewinding?).
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	c.n += int64(k)
	return k, err
}

func (n *Node) restoreLocal(ctx context.Context, r io.Reader) (uint64, error) {
	if n.raft.State() != raft.Leader {
		return 0, n.notLeaderErr()
	}
	tmp, err := os.CreateTemp(filepath.Join(n.cfg.DataDir, "tmp"), "restore-*.snap")
	if err != nil {
		return 0, fmt.Errorf("raftnode: restore: %w", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	size, err := io.Copy(tmp, r)
	if err != nil {
		return 0, fmt.Errorf("raftnode: restore: receive: %w", err)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	meta, err := snapshot.Inspect(tmp, filepath.Join(n.cfg.DataDir, "tmp"))
	if err != nil {
		return 0, fmt.Errorf("%w: restore: %w", ErrInvalid, err)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	timeout := 5 * time.Minute
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	rm := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Index: meta.AppliedIndex, Term: meta.AppliedTerm, Size: size}
	if err := n.raft.Restore(rm, tmp, timeout); err != nil {
		return 0, fmt.Errorf("raftnode: restore: %w", translate(err))
	}
	n.log.Warn("raftnode: cluster restored from backup", "backup_index", meta.AppliedIndex, "residencies", meta.Sizes.Residencies, "bytes", size)
	// The state is restored: the mark goes through the ordinary write
	// path, so a leadership change right after the restore (its
	// InstallSnapshots can delay heartbeats) retries it on the new leader
	// under the same request id instead of failing a restore that
	// happened.
	cmd, _ := command.Marshal(command.RestoreMarkCommand(n.NewRequestID(), meta.AppliedIndex, meta.Digest))
	res, err := n.submitEncoded(ctx, cmd)
	if errors.Is(err, ErrRejected) {
		// Writes landed between the restore and the mark (see fsm).
		n.log.Info("raftnode: restore mark not matched", "err", err)
		err = nil
	}
	if err != nil {
		return 0, err
	}
	return res.Index, nil
}
