package simengine

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/inference-cache/inference-cache/openai"
)

// Disaggregated prefill/decode, as vLLM's NixlConnector serves it
// (vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py, and
// the proxy of tests/v1/kv_connector/nixl_integration/toy_proxy_server.py
// at 030ea52e that drives it). With a connector (--kv-transfer-config)
// every engine can play either part, chosen per request by the request's
// kv_transfer_params:
//
//   - prefill: {"do_remote_decode": true} (the proxy sends it with
//     max_tokens 1, not streamed): the request is prefilled as any other
//     (its blocks cached and announced in KV events), and the answer
//     carries kv_transfer_params {"do_remote_prefill": true,
//     "do_remote_decode": false, "remote_block_ids", "remote_engine_id",
//     "remote_host", "remote_port", "tp_size"}, the fields
//     NixlConnectorScheduler.request_finished returns (the sim's block ids
//     are the prompt's block positions);
//   - decode: the original request with those kv_transfer_params: the
//     prompt's blocks not already in this engine's cache are pulled at
//     DisaggConfig.TransferPerBlock each instead of computed, then cached
//     and announced as the engine's own (vLLM caches the blocks a
//     connector loaded), and the request decodes as usual. A
//     do_remote_prefill without remote_engine_id or remote_block_ids is
//     refused (400 naming the field).
//
// Without a connector kv_transfer_params is ignored and the answer's is
// null, as vLLM does.

// Connectors the sim engine accepts in --kv-transfer-config.
const ConnectorNixl = "NixlConnector"

// DefaultTransferPerBlock is the modelled time to pull one KV block from
// the prefill replica: 16 tokens of a 8B model's KV (about 2 MiB) over a
// 25 GB/s link is 0.08 ms; 0.1 ms with the handshake spread over a
// request's blocks.
const DefaultTransferPerBlock = 100 * time.Microsecond

// DisaggConfig configures the engine's KV connector; the zero value is
// none.
type DisaggConfig struct {
	// Connector is the KV connector ("" = none, ConnectorNixl).
	Connector string
	// EngineID, Host and Port are the remote_engine_id, remote_host and
	// remote_port a prefill answers with (the engine's side channel).
	EngineID, Host string
	Port           int
	// TransferPerBlock is a decode's time per pulled block; 0 =
	// DefaultTransferPerBlock.
	TransferPerBlock time.Duration
}

func (c *DisaggConfig) fill() error {
	switch c.Connector {
	case "":
		return nil
	case ConnectorNixl:
	default:
		return fmt.Errorf("simengine: KV connector %q: want %s", c.Connector, ConnectorNixl)
	}
	if c.TransferPerBlock == 0 {
		c.TransferPerBlock = DefaultTransferPerBlock
	}
	if c.TransferPerBlock < 0 {
		return fmt.Errorf("simengine: KV transfer time per block %v: must not be negative", c.TransferPerBlock)
	}
	return nil
}

// kvTransferParams is the part of a request's kv_transfer_params the
// engine reads.
type kvTransferParams struct {
	DoRemoteDecode  bool     `json:"do_remote_decode"`
	DoRemotePrefill bool     `json:"do_remote_prefill"`
	RemoteEngineID  *string  `json:"remote_engine_id"`
	RemoteBlockIDs  []uint64 `json:"remote_block_ids"`
}

// transferParams reads req's kv_transfer_params for an engine with a
// connector: prefill is set for do_remote_decode, remote for
// do_remote_prefill. Without a connector, or without the field, both are
// false. A malformed field is a 400 naming it.
func (s *Server) transferParams(req *openai.Request) (prefill, remote bool, err error) {
	raw, ok := req.Raw["kv_transfer_params"]
	if !ok || s.e.cfg.Disagg.Connector == "" || string(raw) == "null" {
		return false, false, nil
	}
	var p kvTransferParams
	if err := json.Unmarshal(raw, &p); err != nil {
		return false, false, openai.Errorf("kv_transfer_params", "must be an object: %v", err)
	}
	switch {
	case p.DoRemoteDecode && p.DoRemotePrefill:
		return false, false, openai.Errorf("kv_transfer_params", "do_remote_decode and do_remote_prefill: set one, not both")
	case p.DoRemotePrefill && (p.RemoteEngineID == nil || *p.RemoteEngineID == ""):
		return false, false, openai.Errorf("kv_transfer_params.remote_engine_id", "required with do_remote_prefill (the prefill replica's answer carries it)")
	case p.DoRemotePrefill && p.RemoteBlockIDs == nil:
		return false, false, openai.Errorf("kv_transfer_params.remote_block_ids", "required with do_remote_prefill (the prefill replica's answer carries it)")
	}
	return p.DoRemoteDecode, p.DoRemotePrefill, nil
}

// prefillAnswer is the kv_transfer_params of a prefill's answer for a
// prompt of n tokens.
func (s *Server) prefillAnswer(n int) map[string]any {
	c := s.e.cfg.Disagg
	bs := s.e.cfg.BlockSize
	ids := make([]int, (n+bs-1)/bs)
	for i := range ids {
		ids[i] = i
	}
	return map[string]any{"do_remote_prefill": true, "do_remote_decode": false, "remote_block_ids": ids,
		"remote_engine_id": c.EngineID, "remote_host": c.Host, "remote_port": c.Port, "tp_size": 1}
}
