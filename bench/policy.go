package bench

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
)

// The cluster's CachePolicy as each strategy's replay needs it.

func getPolicy(ctx context.Context, cl *client.Client) (*pb.CachePolicy, error) {
	var p *pb.CachePolicy
	err := cl.Do(ctx, func(ctx context.Context, _ string, ic pb.InferenceCacheClient, _ pb.ClusterClient) (err error) {
		p, err = ic.GetCachePolicy(ctx, &pb.GetCachePolicyRequest{})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("bench: GetCachePolicy: %w", err)
	}
	return p, nil
}

func setPolicy(ctx context.Context, cl *client.Client, p *pb.CachePolicy) error {
	err := cl.Do(ctx, func(ctx context.Context, _ string, ic pb.InferenceCacheClient, _ pb.ClusterClient) error {
		_, err := ic.SetCachePolicy(ctx, &pb.SetCachePolicyRequest{Policy: p})
		return err
	})
	if err != nil {
		return fmt.Errorf("bench: SetCachePolicy: %w", err)
	}
	return nil
}

// strategyPolicy sets the policy of a hint strategy: the current policy
// with blockSize[model] = 512 and, for v1, rankingVersion v1 without the
// TENANT_HOT and AFFINITY fallbacks (v2 keeps the defaults: ranking v2
// with both fallbacks). It returns a description.
func strategyPolicy(ctx context.Context, cl *client.Client, cfg *Config, name, model string) (string, error) {
	p, err := getPolicy(ctx, cl)
	if err != nil {
		return "", err
	}
	p = proto.Clone(p).(*pb.CachePolicy)
	if p.BlockSize == nil {
		p.BlockSize = map[string]uint32{}
	}
	p.BlockSize[model] = TraceBlockTokens
	if p.Strategy == nil {
		p.Strategy = &pb.Strategy{}
	}
	if name == StrategyLookupRouteV1 {
		p.RankingVersion, p.Strategy.EnableTenantHot, p.AffinityRouting = "v1", false, "Disabled"
	} else {
		p.RankingVersion, p.Strategy.EnableTenantHot, p.AffinityRouting = "v2", !cfg.V2NoTenantHot, "Enabled"
		if cfg.V2NoAffinity {
			p.AffinityRouting = "Disabled"
		}
	}
	if err := setPolicy(ctx, cl, p); err != nil {
		return "", err
	}
	return fmt.Sprintf("rankingVersion %s, enableTenantHot %v, affinityRouting %s, blockSize[%s] %d, minimumMatchedTokens %d, routingFloorScore %s",
		p.RankingVersion, p.Strategy.EnableTenantHot, p.AffinityRouting, model, TraceBlockTokens, p.MinimumMatchedTokens, p.RoutingFloorScore), nil
}
