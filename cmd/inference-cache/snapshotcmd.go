package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/inference-cache/inference-cache/api"
	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
	"github.com/inference-cache/inference-cache/snapshot"
)

func newSnapshotCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Args:  cobra.ArbitraryArgs,
		RunE:  groupRunE,
		Short: "Save, restore and inspect snapshot backups",
		Example: `  inference-cache snapshot save backup.snap
  inference-cache snapshot inspect backup.snap
  inference-cache snapshot restore backup.snap`,
	}
	cmd.AddCommand(newSnapshotSaveCmd(), newSnapshotRestoreCmd(), newSnapshotInspectCmd())
	return cmd
}

func newSnapshotSaveCmd() *cobra.Command {
	var saveF clientFlags
	save := &cobra.Command{
		Use:     "save FILE",
		Short:   "Take a snapshot on a node and save it to FILE",
		Example: `  inference-cache snapshot save backup.snap --addr 127.0.0.1:7401`,
		Args:    namedArgs("FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			// Check the destination before the node does the work: a
			// directory or an empty name would only fail at the rename.
			if args[0] == "" {
				return errors.New("snapshot save: FILE is empty")
			}
			if fi, err := os.Stat(args[0]); err == nil && fi.IsDir() {
				return fmt.Errorf("snapshot save: %s is a directory; give a file name", args[0])
			}
			return saveF.run(cmd, func(ctx context.Context, c *client.Client) error {
				return saveSnapshot(ctx, cmd, c, args[0], saveF.json)
			})
		},
	}
	saveF.register(save, addrTurn)
	return save
}

// saveSnapshot receives a node's backup into path (through path.partial,
// verified before it is renamed into place) and prints its metadata.
func saveSnapshot(ctx context.Context, cmd *cobra.Command, c *client.Client, path string, jsonOut bool) error {
	tmp := path + ".partial"
	err := c.Do(ctx, func(ctx context.Context, _ string, _ pb.InferenceCacheClient, cl pb.ClusterClient) error {
		return receiveBackup(ctx, cl, tmp)
	})
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("snapshot save: %w", err)
	}
	meta, err := snapshot.InspectFile(tmp)
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("snapshot save: the received file does not verify: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("snapshot save: %w", err)
	}
	if jsonOut {
		return printMeta(cmd.OutOrStdout(), path, meta, true)
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: %d bytes, applied index %d (term %d), %d residencies of %d replicas, policy version %d, digest %016x (verified)\n",
		filepath.Clean(path), meta.StreamBytes, meta.AppliedIndex, meta.AppliedTerm, meta.Sizes.Residencies, meta.Sizes.Replicas, meta.Policy.Version, meta.Digest)
	return err
}

// receiveBackup streams one Backup call into the file tmp, synced.
func receiveBackup(ctx context.Context, cl pb.ClusterClient, tmp string) error {
	st, err := cl.Backup(ctx, &pb.BackupRequest{})
	if err != nil {
		return err
	}
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer f.Close()
	for {
		ch, err := st.Recv()
		if err == io.EOF {
			return f.Sync()
		}
		if err != nil {
			return err
		}
		if _, err := f.Write(ch.Data); err != nil {
			return err
		}
	}
}

func newSnapshotRestoreCmd() *cobra.Command {
	var restF clientFlags
	var restYes bool
	restore := &cobra.Command{
		Use:   "restore FILE",
		Short: "Replace the whole cluster's state with a saved snapshot",
		Long: `Verifies FILE locally, uploads it to a node, which forwards it to the leader;
the leader installs it through Raft so every node ends with the same state.
Both the index and the CachePolicy are replaced by the snapshot's: everything
written after the snapshot was taken is lost, and a policy set since is rolled
back. Asks for confirmation on a terminal; elsewhere --yes is required.`,
		Example: `  inference-cache snapshot restore backup.snap --addr 127.0.0.1:7401
  inference-cache snapshot restore backup.snap --yes`,
		Args: namedArgs("FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := confirmRestore(cmd, args[0], restYes); err != nil {
				return err
			}
			return restF.run(cmd, func(ctx context.Context, c *client.Client) error {
				return restoreSnapshot(ctx, cmd, c, args[0], restF.json)
			})
		},
	}
	restF.register(restore, addrTurn)
	restore.Flags().BoolVar(&restYes, "yes", false, "confirm replacing the cluster's index and policy without asking")
	return restore
}

// confirmRestore verifies the snapshot at path and, without --yes, asks
// on a terminal whether to replace the cluster's state with it.
func confirmRestore(cmd *cobra.Command, path string, yes bool) error {
	meta, err := snapshot.InspectFile(path)
	if err != nil {
		return fmt.Errorf("snapshot restore: %w", pathErr(path, err))
	}
	what := fmt.Sprintf("replaces the whole cluster's index and policy with %s (applied index %d, policy version %d, taken %s): writes made since and policy changes since are lost",
		filepath.Clean(path), meta.AppliedIndex, meta.Policy.Version, meta.CreatedAt.UTC().Format(time.RFC3339))
	if yes {
		return nil
	}
	if !isTerminalReader(cmd.InOrStdin()) {
		return fmt.Errorf("snapshot restore %s; pass --yes to confirm (standard input is not a terminal to ask on)", what)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "snapshot restore %s.\nRestore? [y/N] ", what)
	line, _ := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
	if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
		return errors.New("snapshot restore: not confirmed; nothing changed")
	}
	return nil
}

// restoreSnapshot uploads the snapshot at path and prints the result.
func restoreSnapshot(ctx context.Context, cmd *cobra.Command, c *client.Client, path string, jsonOut bool) error {
	var resp *pb.RestoreResponse
	err := c.Do(ctx, func(ctx context.Context, _ string, _ pb.InferenceCacheClient, cl pb.ClusterClient) error {
		var err error
		resp, err = uploadSnapshot(ctx, cl, path)
		return err
	})
	if err != nil {
		return fmt.Errorf("snapshot restore: %w", err)
	}
	if jsonOut {
		return printJSON(cmd.OutOrStdout(), resp)
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "restored the cluster from %s (snapshot of index %d); restore committed at index %d\n", path, resp.RestoredFromIndex, resp.AppliedIndex)
	return err
}

// uploadSnapshot streams the file at path in one Restore call.
func uploadSnapshot(ctx context.Context, cl pb.ClusterClient, path string) (*pb.RestoreResponse, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := cl.Restore(ctx)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, api.BackupChunkBytes)
	for {
		n, rerr := f.Read(buf)
		if n > 0 {
			if err := st.Send(&pb.RestoreChunk{Data: buf[:n]}); err != nil {
				break // CloseAndRecv reports why
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return nil, rerr
		}
	}
	return st.CloseAndRecv()
}

func newSnapshotInspectCmd() *cobra.Command {
	var inspJSON bool
	inspect := &cobra.Command{
		Use:   "inspect FILE",
		Short: "Verify a snapshot file and print its metadata (offline)",
		Example: `  inference-cache snapshot inspect backup.snap
  inference-cache snapshot inspect data/raft/snapshots/2-123-456/state.bin --json`,
		Args: namedArgs("FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			meta, err := snapshot.InspectFile(args[0])
			if err != nil {
				return fmt.Errorf("snapshot inspect: %w", pathErr(args[0], err))
			}
			return printMeta(cmd.OutOrStdout(), args[0], meta, inspJSON)
		},
	}
	inspect.Flags().BoolVar(&inspJSON, "json", false, "print JSON instead of a table")
	return inspect
}

// snapshotInfo is the JSON form of snapshot metadata.
type snapshotInfo struct {
	File          string `json:"file"`
	FormatVersion uint32 `json:"format_version"`
	AppliedIndex  uint64 `json:"applied_index"`
	AppliedTerm   uint64 `json:"applied_term"`
	CreatedAt     string `json:"created_at"`
	Digest        string `json:"digest"`
	Checksum      string `json:"checksum"`
	Bytes         int64  `json:"bytes"`
	Partitions    int    `json:"partitions"`
	Blocks        int    `json:"blocks"`
	Residencies   int    `json:"residencies"`
	Replicas      int    `json:"replicas"`
	PolicyVersion uint64 `json:"policy_version"`
}

func printMeta(w io.Writer, file string, m snapshot.Meta, asJSON bool) error {
	info := snapshotInfo{File: filepath.Clean(file), FormatVersion: m.FormatVersion, AppliedIndex: m.AppliedIndex, AppliedTerm: m.AppliedTerm,
		CreatedAt: m.CreatedAt.UTC().Format(time.RFC3339), Digest: fmt.Sprintf("%016x", m.Digest), Checksum: fmt.Sprintf("%016x", m.Checksum),
		Bytes: m.StreamBytes, Partitions: m.Sizes.Partitions, Blocks: m.Sizes.Blocks, Residencies: m.Sizes.Residencies,
		Replicas: m.Sizes.Replicas, PolicyVersion: m.Policy.Version}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(info)
	}
	tw := table(w)
	fmt.Fprintf(tw, "file\t%s\nformat version\t%d\napplied index\t%d (term %d)\ncreated at\t%s\ndigest\t%s\nchecksum\t%s (verified)\nbytes\t%d\n",
		info.File, info.FormatVersion, info.AppliedIndex, info.AppliedTerm, info.CreatedAt, info.Digest, info.Checksum, info.Bytes)
	fmt.Fprintf(tw, "partitions\t%d\nblocks\t%d\nresidencies\t%d\nreplicas\t%d\npolicy version\t%d\n", info.Partitions, info.Blocks, info.Residencies, info.Replicas, info.PolicyVersion)
	return tw.Flush()
}
