package chaos

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// diskLimit is the size of each node's tmpfs data volume when a full-disk
// fault is scheduled: room for a smoke or long run's log and snapshots.
const diskLimit = 512 << 20

// ballast is the file FillDisk writes into a data directory.
const ballast = "chaos-ballast"

// TmpfsAvailable reports whether size-limited tmpfs volumes can be
// mounted here (root, and a kernel or container that allows mount) and,
// if not, why.
func TmpfsAvailable() (bool, string) {
	dir, err := os.MkdirTemp("", "chaos-tmpfs-")
	if err != nil {
		return false, err.Error()
	}
	defer os.Remove(dir)
	if err := run("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", dir); err != nil {
		return false, "cannot mount a tmpfs: " + err.Error()
	}
	_ = run("umount", dir)
	return true, ""
}

// mountData mounts a tmpfs of limit bytes on dir (created if missing).
func (c *Cluster) mountData(dir string, limit int64) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := run("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", limit), "tmpfs", dir); err != nil {
		return err
	}
	c.mounts = append(c.mounts, dir)
	return nil
}

func (c *Cluster) unmountAll() {
	for _, m := range c.mounts {
		if err := run("umount", "-l", m); err != nil && c.log != nil {
			c.log.Warn("chaos: unmount", "dir", m, "err", err)
		}
	}
	c.mounts = nil
}

// FillDisk takes every free byte of n's data volume with a ballast file
// (allocated, not sparse) and returns how many bytes it took.
func (c *Cluster) FillDisk(n *Node) (int64, error) {
	if len(c.mounts) == 0 {
		return 0, fmt.Errorf("chaos: FillDisk needs Options.DiskLimit")
	}
	var st unix.Statfs_t
	if err := unix.Statfs(n.DataDir, &st); err != nil {
		return 0, err
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	f, err := os.OpenFile(filepath.Join(n.DataDir, ballast), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	// Leave nothing: allocate the free space, then top up whatever a
	// concurrent writer freed meanwhile in small steps until ENOSPC.
	if err := unix.Fallocate(int(f.Fd()), 0, 0, free); err != nil && err != unix.ENOSPC {
		return 0, fmt.Errorf("chaos: fallocate %d bytes in %s: %w", free, n.DataDir, err)
	}
	for off := free; ; off += 64 << 10 {
		if err := unix.Fallocate(int(f.Fd()), 0, off, 64<<10); err != nil {
			break
		}
	}
	var fst unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &fst); err != nil {
		return 0, err
	}
	took := fst.Blocks * 512 // allocated, whatever the file's length
	c.log.Info("chaos: disk filled", "node", n.ID, "ballast_bytes", took)
	return took, nil
}

// RemoveBallast deletes every node's ballast file.
func (c *Cluster) RemoveBallast() {
	for _, n := range c.Nodes {
		_ = os.Remove(filepath.Join(n.DataDir, ballast))
	}
}
