package client

import (
	"context"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// RecordStreamPositions commits engine stream positions (contract §6.11)
// with the retry rules of Ingest: a request without request_id gets one,
// kept across retries.
func (c *Client) RecordStreamPositions(ctx context.Context, req *pb.RecordStreamPositionsRequest) (*pb.RecordStreamPositionsResponse, error) {
	r := &pb.RecordStreamPositionsRequest{Positions: req.GetPositions(), RequestId: req.GetRequestId()}
	if r.RequestId == "" {
		r.RequestId = NewRequestID()
	}
	var resp *pb.RecordStreamPositionsResponse
	err := c.write(ctx, func(ctx context.Context, n *node) (err error) {
		resp, err = n.ic.RecordStreamPositions(ctx, r)
		return err
	})
	return resp, err
}

// GetStreamPositions reads the stream positions a node holds for
// replicaIDs (contract §6.11), moving to the next node on the retriable
// outcomes of writes, within the write retry budget. The answer leaves
// out replicas without a position.
func (c *Client) GetStreamPositions(ctx context.Context, replicaIDs []string) (*pb.GetStreamPositionsResponse, error) {
	req := &pb.GetStreamPositionsRequest{ReplicaIds: replicaIDs}
	var resp *pb.GetStreamPositionsResponse
	err := c.write(ctx, func(ctx context.Context, n *node) (err error) {
		resp, err = n.ic.GetStreamPositions(ctx, req)
		return err
	})
	return resp, err
}
