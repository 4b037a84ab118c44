package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/metrics"
	"github.com/inference-cache/inference-cache/raftnode"
	"github.com/inference-cache/inference-cache/snapshot"
)

// BackupChunkBytes is the data size of one Backup stream message (256 KiB,
// far below MaxMessageBytes).
const BackupChunkBytes = 256 << 10

// ClusterService implements inferencecache.v1.Cluster (contract §8.10 admin) over a
// raftnode.Node. Calls that need the leader (AddServer, RemoveServer,
// TransferLeadership) answer UNAVAILABLE on a follower; try another node.
type ClusterService struct {
	pb.UnimplementedClusterServer
	n *raftnode.Node
	// grpcAddr is this node's advertised gRPC address (for Status).
	grpcAddr string
	// tmpDir receives uploaded Restore streams before they are verified.
	tmpDir string
	// metrics supplies Status's lookup counts (nil = none).
	metrics *metrics.Metrics
}

// NewClusterService returns the Cluster service of n. grpcAddr is reported
// in Status; tmpDir ("" = the OS default) holds uploaded restore files
// while they are verified; m (nil = none) gives Status its lookup counts.
func NewClusterService(n *raftnode.Node, grpcAddr, tmpDir string, m *metrics.Metrics) *ClusterService {
	return &ClusterService{n: n, grpcAddr: grpcAddr, tmpDir: tmpDir, metrics: m}
}

// Status reports this node's view of the cluster, whether its answers are
// stale now (the same read state LookupRoute reports), its lookup
// counts by reason code and the pickers whose load it holds.
func (c *ClusterService) Status(context.Context, *pb.StatusRequest) (*pb.StatusResponse, error) {
	out := StatusToPB(c.n.Status(), c.grpcAddr)
	rs := c.n.ReadState()
	out.Stale, out.StaleReason = rs.Stale, rs.StaleReason
	out.LookupRouteCalls = c.metrics.LookupCounts()
	if d, ok := c.n.ClockOffsetToLeader(); ok {
		out.ClockOffsetToLeaderMs = d.Milliseconds()
	}
	for _, p := range c.n.PickerLoad().Pickers() {
		out.Pickers = append(out.Pickers, &pb.PickerLoadStatus{PickerId: p.ID, Replicas: uint32(p.Replicas),
			PrefillingRequests: p.PrefillingRequests, PrefillTokens: p.PrefillTokens, RunningRequests: p.RunningRequests,
			AgeMs: uint64(p.Age.Milliseconds()), IntervalMs: uint32(p.Interval.Milliseconds())})
	}
	return out, nil
}

// StatusToPB converts a raftnode.Status; grpcAddr is this node's address.
func StatusToPB(st raftnode.Status, grpcAddr string) *pb.StatusResponse {
	out := &pb.StatusResponse{
		NodeId: st.NodeID, State: st.State, LeaderId: st.LeaderID, LeaderAddress: st.LeaderAddress,
		Term: st.Term, AppliedIndex: st.AppliedIndex, LastLeaderContactMs: uint64(st.LastLeaderContact.Milliseconds()),
		CommitIndex: st.CommitIndex, LastLogIndex: st.LastLogIndex, GrpcAddress: grpcAddr,
	}
	for _, m := range st.Members {
		out.Members = append(out.Members, &pb.Member{Id: m.ID, RaftAddress: m.RaftAddr, GrpcAddress: m.GRPCAddr, Suffrage: m.Suffrage, Healthy: m.Healthy, UnhealthyReason: m.UnhealthyReason})
	}
	return out
}

// AddServer adds a voter (or, with nonvoter, a non-voter). Leader only.
func (c *ClusterService) AddServer(ctx context.Context, req *pb.AddServerRequest) (*pb.AddServerResponse, error) {
	idx, err := c.n.AddServer(ctx, req.GetId(), req.GetRaftAddress(), !req.GetNonvoter())
	if err != nil {
		return nil, StatusFromError(err)
	}
	return &pb.AddServerResponse{Index: idx}, nil
}

// RemoveServer removes a server from the Raft configuration. Leader only.
func (c *ClusterService) RemoveServer(ctx context.Context, req *pb.RemoveServerRequest) (*pb.RemoveServerResponse, error) {
	idx, err := c.n.RemoveServer(ctx, req.GetId())
	if err != nil {
		return nil, StatusFromError(err)
	}
	return &pb.RemoveServerResponse{Index: idx}, nil
}

// TransferLeadership hands leadership to the given server (or the most
// up-to-date follower) and returns the new leader's id once known (within
// 5 s; "" if not yet known).
func (c *ClusterService) TransferLeadership(ctx context.Context, req *pb.TransferLeadershipRequest) (*pb.TransferLeadershipResponse, error) {
	if err := c.n.TransferLeadership(ctx, req.GetId(), req.GetAddress()); err != nil {
		return nil, StatusFromError(err)
	}
	// The new leader's id once this node sees it, for at most 5 s; an
	// empty answer means the transfer started but was not seen to end.
	leader := ""
	_ = poll.Until(ctx, 5*time.Second, 20*time.Millisecond, func() (bool, string) {
		st := c.n.Status()
		if st.LeaderID != "" && st.LeaderID != st.NodeID {
			leader = st.LeaderID
			return true, ""
		}
		return false, "this node still leads or sees no leader"
	})
	return &pb.TransferLeadershipResponse{LeaderId: leader}, nil
}

// Snapshot takes a Raft snapshot on this node now.
func (c *ClusterService) Snapshot(ctx context.Context, _ *pb.SnapshotRequest) (*pb.SnapshotResponse, error) {
	idx, term, err := c.n.Snapshot(ctx)
	if err != nil {
		return nil, StatusFromError(err)
	}
	return &pb.SnapshotResponse{Index: idx, Term: term}, nil
}

// Digest returns the applied index and index digest as a consistent pair.
func (c *ClusterService) Digest(context.Context, *pb.DigestRequest) (*pb.DigestResponse, error) {
	idx, d := c.n.Digest()
	return &pb.DigestResponse{AppliedIndex: idx, Digest: d}, nil
}

type chunkWriter struct {
	send func(*pb.BackupChunk) error
}

func (w chunkWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), BackupChunkBytes)
		if err := w.send(&pb.BackupChunk{Data: p[:k]}); err != nil {
			return n, err
		}
		n += k
		p = p[k:]
	}
	return n, nil
}

// Backup streams a fresh snapshot of this node's state in chunks of at
// most BackupChunkBytes.
func (c *ClusterService) Backup(_ *pb.BackupRequest, stream pb.Cluster_BackupServer) error {
	if err := c.n.Backup(chunkWriter{stream.Send}); err != nil {
		return StatusFromError(err)
	}
	return nil
}

// Restore receives a snapshot file in chunks, verifies it (a corrupt,
// truncated or unsupported file is INVALID_ARGUMENT naming the problem) and
// replaces the whole cluster's state with it through the leader.
func (c *ClusterService) Restore(stream pb.Cluster_RestoreServer) error {
	f, err := os.CreateTemp(c.tmpDir, "upload-*.snap")
	if err != nil {
		return status.Errorf(codes.Internal, "restore: temp file: %v", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	for {
		ch, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if _, err := f.Write(ch.GetData()); err != nil {
			return status.Errorf(codes.Internal, "restore: write temp file: %v", err)
		}
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return status.Errorf(codes.Internal, "restore: %v", err)
	}
	meta, err := snapshot.Inspect(f, c.tmpDir)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "restore: the uploaded file is not a valid snapshot: %v", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return status.Errorf(codes.Internal, "restore: %v", err)
	}
	idx, err := c.n.Restore(stream.Context(), f)
	if err != nil {
		if errors.Is(err, raftnode.ErrInvalid) {
			return status.Error(codes.InvalidArgument, err.Error())
		}
		return StatusFromError(fmt.Errorf("restore: %w", err))
	}
	return stream.SendAndClose(&pb.RestoreResponse{AppliedIndex: idx, RestoredFromIndex: meta.AppliedIndex})
}
