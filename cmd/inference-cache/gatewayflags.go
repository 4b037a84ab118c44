package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/inference-cache/inference-cache/client"
	"github.com/inference-cache/inference-cache/fingerprint"
	"github.com/inference-cache/inference-cache/gateway"
	"github.com/inference-cache/inference-cache/prompt"
)

// gatewayFlags are the flags of the commands built on the gateway core
// (proxy, picker): the cluster to ask, the models to key requests with,
// the choice, the index partition, load sharing and the client's
// security (contract §12.8, §14).
type gatewayFlags struct {
	addrs               []string
	modelsDir, strategy string
	lookupBudget        time.Duration
	blockSize           int
	hashScheme, tenant  string
	share               shareFlags
	security            clientSecurityFlags
}

// registerGateway adds the flags to cmd; what names the command in the
// help ("proxy", "endpoint picker").
func (g *gatewayFlags) registerGateway(cmd *cobra.Command, f *pflag.FlagSet, what string) {
	f.StringSliceVar(&g.addrs, "addr", nil, "gRPC address of a cluster node HOST:PORT (repeatable); none = no lookups, every pick by load")
	f.StringVar(&g.modelsDir, "models-dir", "", "directory of <model>/tokenizer.json and chat template; empty = no keys, every pick by load")
	f.StringVar(&g.strategy, "strategy", string(gateway.StrategyPicker), "picker (prefix hints and the load-aware cost model), round-robin, least-loaded, or a peer's router: dynamo, llm-d, sglang (docs/proxy.md)")
	f.DurationVar(&g.lookupBudget, "lookup-budget", gateway.DefaultLookupBudget, "bound on one lookup; past it the request is picked by load")
	f.IntVar(&g.blockSize, "block-size", fingerprint.DefaultBlockSize, "tokens per KV block of the engines (their --block-size, the subscriber's block_size)")
	f.StringVar(&g.hashScheme, "hash-scheme", gateway.DefaultHashScheme, "the index partition's hash scheme (the subscriber's hash_scheme)")
	f.StringVar(&g.tenant, "tenant", "", "the index partition's tenant (the subscriber's tenant_id for these engines)")
	g.share.register(f, what)
	g.security.register(cmd)
}

// checkGateway validates the flags, each error naming its flag and the
// limit.
func (g *gatewayFlags) checkGateway() error {
	if _, err := gateway.ParseStrategy(g.strategy); err != nil {
		return fmt.Errorf("--strategy: %w", err)
	}
	switch {
	case g.lookupBudget <= 0:
		return fmt.Errorf("--lookup-budget %v: must be positive", g.lookupBudget)
	case g.blockSize < 1 || g.blockSize > fingerprint.MaxBlockSize:
		return fmt.Errorf("--block-size %d: want 1 to %d", g.blockSize, fingerprint.MaxBlockSize)
	case g.hashScheme == "":
		return errors.New("--hash-scheme: must not be empty")
	}
	if err := g.share.check(); err != nil {
		return err
	}
	for _, a := range g.addrs {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			return fmt.Errorf("--addr %q: want HOST:PORT, e.g. 127.0.0.1:7401", a)
		}
	}
	if g.modelsDir != "" {
		if fi, err := os.Stat(g.modelsDir); err != nil || !fi.IsDir() {
			return fmt.Errorf("--models-dir %q: not a readable directory", g.modelsDir)
		}
	}
	return nil
}

// newGateway builds the gateway core from checked flags: the models
// preloaded (a broken one logged, its requests picked by load), the
// cluster client when --addr is given. close releases both.
func (g *gatewayFlags) newGateway(ctx context.Context, log *slog.Logger) (gw *gateway.Gateway, close func(), err error) {
	strategy, _ := gateway.ParseStrategy(g.strategy)
	gcfg := gateway.Config{Strategy: strategy, LookupBudget: g.lookupBudget, HashScheme: g.hashScheme, TenantID: g.tenant}
	g.share.apply(&gcfg, log)
	if g.modelsDir != "" {
		reg := prompt.New(g.modelsDir, prompt.Options{})
		preloadPrompts(ctx, reg, log)
		gcfg.Prompts = reg
		if g.blockSize != fingerprint.DefaultBlockSize {
			gcfg.BlockSizes = blockSizesFor(g.modelsDir, g.blockSize)
		}
	} else {
		log.Warn("no --models-dir: requests have no key; every pick is by load")
	}
	var cl *client.Client
	if len(g.addrs) > 0 {
		if err := g.refuseNotGRPC(ctx); err != nil {
			return nil, nil, err
		}
		ccfg := client.Config{Addrs: g.addrs, LookupTimeout: g.lookupBudget, Logger: log}
		if err := g.security.apply(&ccfg); err != nil {
			return nil, nil, err
		}
		if cl, err = client.New(ccfg); err != nil {
			return nil, nil, err
		}
		gcfg.Lookup = cl
	} else if strategy == gateway.StrategyPicker {
		log.Warn("no --addr: no prefix hints; every pick is by load")
	}
	if gw, err = gateway.New(gcfg); err != nil {
		if cl != nil {
			cl.Close()
		}
		return nil, nil, err
	}
	return gw, func() {
		gw.Close()
		if cl != nil {
			cl.Close()
		}
	}, nil
}

// refuseNotGRPC refuses an --addr that accepts connections but closes
// them at gRPC's handshake (a node's Raft or gossip port), in the words
// the client commands use. An address that refuses connections or does
// not answer passes: the cluster may not be up yet, and the command then
// picks by load until it is.
func (g *gatewayFlags) refuseNotGRPC(ctx context.Context) error {
	probe := &clientFlags{addrs: g.addrs, timeout: time.Second, security: g.security}
	for _, a := range g.addrs {
		_, err := probe.status(ctx, a)
		if err == nil {
			continue
		}
		if k := failure(err.Error()); k == "notgrpc" || k == "reset" {
			return fmt.Errorf("--addr %s: %s", a, probe.explainAddr(ctx, a, err))
		}
	}
	return nil
}

// blockSizesFor gives every model of dir the block size bs (models
// outside dir have no key anyway).
func blockSizesFor(dir string, bs int) map[string]int {
	out := map[string]int{}
	ms, _ := prompt.New(dir, prompt.Options{}).Models()
	for _, m := range ms {
		out[m] = bs
	}
	return out
}

// preloadPrompts loads every model's tokenizer and chat template before
// the command serves, logging (not failing on) a broken one: its requests
// are then picked by load.
func preloadPrompts(ctx context.Context, reg *prompt.Registry, log *slog.Logger) {
	ms, err := reg.Models()
	if err != nil {
		log.Warn("models directory unreadable: requests have no key", "err", err)
		return
	}
	for _, m := range ms {
		start := time.Now()
		if err := reg.Preload(ctx, m); err != nil {
			log.Warn("model not loaded: its requests are picked by load", "model", m, "err", err)
			continue
		}
		log.Info("model loaded", "model", m, "took", time.Since(start).Round(time.Millisecond))
	}
}

// listFlag reads a repeatable flag's values (parsed one by one) and a
// YAML file's list together, and checks the whole list: a command's
// --backend/--backends or --endpoint/--endpoints.
func listFlag[T any](values []string, parse func(string) (T, error), file, fileFlag string,
	load func(string) ([]T, error), check func([]T) error, bothFlags string) ([]T, error) {
	var out []T
	for _, s := range values {
		v, err := parse(s)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if file != "" {
		fv, err := load(file)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", fileFlag, err)
		}
		out = append(out, fv...)
	}
	if err := check(out); err != nil {
		return nil, fmt.Errorf("%s: %w", bothFlags, err)
	}
	return out, nil
}
