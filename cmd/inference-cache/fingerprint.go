package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/inference-cache/inference-cache/fingerprint"
)

// fingerprintOutput is the JSON printed by `inference-cache fingerprint`.
// Hashes are unsigned decimal strings because JSON numbers lose precision
// above 2^53.
type fingerprintOutput struct {
	BlockSize        int      `json:"block_size"`
	BlockHashes      []string `json:"block_hashes"`
	BlockTokenCounts []uint32 `json:"block_token_counts"`
	PrefixHash       *string  `json:"prefix_hash"`
}

func newFingerprintCmd() *cobra.Command {
	var blockSize int
	var tokens, salt string
	cmd := &cobra.Command{
		Use:   "fingerprint [--tokens IDS | TOKEN_ID ...]",
		Short: "Print the content fingerprint (block hashes, prefix hash) of token ids",
		Long: `Computes the content fingerprint of contract §3: chained XXH3-64 (seed 1337) block
hashes over little-endian token ids, partial tail dropped; with --cache-salt
the chain is rooted at the salt's hash (contract §3.4), as vLLM's cache_salt
separates prefix caches. Token ids come from
--tokens (comma- or space-separated, as for lookup), from the arguments, or,
when neither is given, from a JSON array on stdin. Use it to check that a
gateway computes the same keys as the server.`,
		Example: `  inference-cache fingerprint --block-size 16 --tokens "$(seq -s, 1 16)"
  inference-cache fingerprint --block-size 16 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16
  echo '[1,2,3,4]' | inference-cache fingerprint --block-size 2
  echo '[1,2,3,4]' | inference-cache fingerprint --block-size 2 --cache-salt tenant-a`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if blockSize < 1 || blockSize > fingerprint.MaxBlockSize {
				return fmt.Errorf("--block-size %d: must be between 1 and %d", blockSize, fingerprint.MaxBlockSize)
			}
			var ids []uint32
			var err error
			switch {
			case tokens != "" && len(args) > 0:
				return fmt.Errorf("token ids both in --tokens and as arguments: give one")
			case tokens != "":
				var vs []uint64
				if vs, err = parseUints(tokens, 32); err != nil {
					return fmt.Errorf("--tokens: %w", err)
				}
				ids = make([]uint32, len(vs))
				for i, v := range vs {
					ids[i] = uint32(v)
				}
			case len(args) > 0:
				ids, err = parseTokenArgs(args)
			default:
				ids, err = parseTokenJSON(cmd.InOrStdin())
			}
			if err != nil {
				return err
			}
			k, err := fingerprint.ComputeSalted(ids, blockSize, salt)
			if err != nil {
				return err
			}
			out := fingerprintOutput{BlockSize: blockSize, BlockHashes: make([]string, len(k.BlockHashes)), BlockTokenCounts: k.BlockTokenCounts}
			for i, h := range k.BlockHashes {
				out.BlockHashes[i] = strconv.FormatUint(h, 10)
			}
			if k.HasPrefix {
				s := strconv.FormatUint(k.PrefixHash, 10)
				out.PrefixHash = &s
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			return enc.Encode(out)
		},
	}
	cmd.Flags().IntVar(&blockSize, "block-size", 16, "tokens per block (1..4096)")
	cmd.Flags().StringVar(&tokens, "tokens", "", "token ids, comma- or space-separated (as for lookup)")
	cmd.Flags().StringVar(&salt, "cache-salt", "", "the request's cache_salt: roots the chain at the salt's hash (empty: unsalted)")
	// A negative token id looks like a flag to the parser; report it as the
	// bad token id it is.
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		msg := err.Error()
		if i := strings.LastIndex(msg, " in -"); i >= 0 {
			bad := msg[i+len(" in "):]
			if _, perr := strconv.ParseFloat(bad, 64); perr == nil {
				return fmt.Errorf("token id %q: must be an integer between 0 and %d", bad, uint32(math.MaxUint32))
			}
		}
		return err
	})
	return cmd
}

// parseTokenArgs parses decimal token ids; the error names the bad value.
func parseTokenArgs(args []string) ([]uint32, error) {
	ids := make([]uint32, 0, len(args))
	for i, a := range args {
		v, err := strconv.ParseUint(strings.TrimSpace(a), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("token id #%d %q: must be an integer between 0 and %d", i, a, uint32(math.MaxUint32))
		}
		ids = append(ids, uint32(v))
	}
	return ids, nil
}

// parseTokenJSON reads one JSON array of token ids. Each id must be a
// JSON number: a string such as "7" is refused, as the Python and Rust
// fingerprint commands refuse it.
func parseTokenJSON(r io.Reader) ([]uint32, error) {
	var raw []json.RawMessage
	if err := json.NewDecoder(r).Decode(&raw); err != nil {
		return nil, fmt.Errorf("stdin: expected a JSON array of token ids: %v", err)
	}
	args := make([]string, len(raw))
	for i, m := range raw {
		t := strings.TrimSpace(string(m))
		if t == "" || !(t[0] == '-' || (t[0] >= '0' && t[0] <= '9')) {
			return nil, fmt.Errorf("token id #%d %s: must be an integer between 0 and %d", i, t, uint32(math.MaxUint32))
		}
		args[i] = t
	}
	return parseTokenArgs(args)
}
