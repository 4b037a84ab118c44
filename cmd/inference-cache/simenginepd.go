package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"github.com/inference-cache/inference-cache/simengine"
)

// simEngineServing are sim-engine's flags for LoRA adapters and the KV
// connector of disaggregated prefill/decode, named as vLLM's.
type simEngineServing struct {
	enableLoRA       bool
	loraModules      []string
	maxLoRAs         int
	loraLoadTime     time.Duration
	kvTransferConfig string
	transferPerBlock time.Duration
}

func (o *simEngineServing) register(f *pflag.FlagSet) {
	f.BoolVar(&o.enableLoRA, "enable-lora", false, "serve LoRA adapters (vLLM's flag); each --lora-modules entry is then a model name")
	f.StringArrayVar(&o.loraModules, "lora-modules", nil, "a LoRA adapter NAME=PATH (repeatable; vLLM's flag): /v1/models lists it with parent = --model")
	f.IntVar(&o.maxLoRAs, "max-loras", simengine.DefaultMaxLoRAs, "most distinct adapters in a batch, and the adapter slots (vLLM's flag and default)")
	f.DurationVar(&o.loraLoadTime, "lora-load-time", 50*time.Millisecond, "time to load an adapter that is not in a slot, before its request's prefill (sim only)")
	f.StringVar(&o.kvTransferConfig, "kv-transfer-config", "", `vLLM's KV connector JSON for disaggregated prefill/decode, e.g. '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'`)
	f.DurationVar(&o.transferPerBlock, "kv-transfer-time-per-block", simengine.DefaultTransferPerBlock, "a decode's time to pull one KV block from the prefill replica (sim only)")
}

// kvTransferConfig is the part of --kv-transfer-config the sim reads.
type kvTransferConfig struct {
	Connector string `json:"kv_connector"`
	Role      string `json:"kv_role"`
}

// apply checks the flags and sets cfg's LoRA and connector; listen is the
// engine's HOST:PORT (its side channel in a prefill's answer).
func (o *simEngineServing) apply(cfg *simengine.Config, replicaID, listen string) error {
	switch {
	case len(o.loraModules) > 0 && !o.enableLoRA:
		return errors.New("--lora-modules: needs --enable-lora")
	case o.maxLoRAs < 1:
		return fmt.Errorf("--max-loras %d: want at least 1", o.maxLoRAs)
	case o.loraLoadTime < 0:
		return fmt.Errorf("--lora-load-time %v: must not be negative", o.loraLoadTime)
	case o.transferPerBlock < 0:
		return fmt.Errorf("--kv-transfer-time-per-block %v: must not be negative", o.transferPerBlock)
	}
	for _, m := range o.loraModules {
		a, err := simengine.ParseLoRAModule(m)
		if err != nil {
			return err
		}
		cfg.LoRA.Adapters = append(cfg.LoRA.Adapters, a)
	}
	cfg.LoRA.MaxLoRAs, cfg.LoRA.LoadTime = o.maxLoRAs, o.loraLoadTime
	if o.kvTransferConfig == "" {
		return nil
	}
	var kc kvTransferConfig
	if err := json.Unmarshal([]byte(o.kvTransferConfig), &kc); err != nil {
		return fmt.Errorf("--kv-transfer-config %q: %v", o.kvTransferConfig, err)
	}
	if kc.Connector != simengine.ConnectorNixl {
		return fmt.Errorf("--kv-transfer-config: kv_connector %q: the sim engine plays %s", kc.Connector, simengine.ConnectorNixl)
	}
	if kc.Role != "" && kc.Role != "kv_both" && kc.Role != "kv_producer" && kc.Role != "kv_consumer" {
		return fmt.Errorf("--kv-transfer-config: kv_role %q: want kv_both, kv_producer or kv_consumer", kc.Role)
	}
	host, port, _ := net.SplitHostPort(listen) // checked
	p, _ := strconv.Atoi(port)
	cfg.Disagg = simengine.DisaggConfig{Connector: kc.Connector, EngineID: replicaID, Host: host, Port: p, TransferPerBlock: o.transferPerBlock}
	return nil
}
