package main

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/inference-cache/inference-cache/internal/fixtures"
)

func runCLI(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

// refusal is a command line (after refusedBy's base arguments) and the
// text its error must contain.
type refusal struct {
	args []string
	want string
}

// refusedBy runs base followed by each case's args and fails the test for
// every case that does not end in an error containing its want.
func refusedBy(t *testing.T, base []string, cases []refusal) {
	t.Helper()
	for _, c := range cases {
		_, err := runCLI(t, "", append(slices.Clone(base), c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err %v, want %q", c.args, err, c.want)
		}
	}
}

type goldenFile struct {
	Vectors []struct {
		Name             string   `json:"name"`
		BlockSize        int      `json:"block_size"`
		TokenIDs         []uint32 `json:"token_ids"`
		BlockHashes      []string `json:"block_hashes"`
		BlockTokenCounts []uint32 `json:"block_token_counts"`
		PrefixHash       *string  `json:"prefix_hash"`
	} `json:"vectors"`
}

// The CLI must reproduce the fingerprint package's golden vectors exactly, from arguments
// and from stdin.
func TestFingerprintCmd_ReproducesGoldenVectors(t *testing.T) {
	raw, err := os.ReadFile(fixtures.Path(t, "fingerprint", "testdata", "fingerprint_vectors.json"))
	if err != nil {
		t.Fatalf("golden file: %v", err)
	}
	var g goldenFile
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"three_blocks": false, "random_1000_b16": false, "empty": false}
	for _, v := range g.Vectors {
		if _, ok := want[v.Name]; !ok {
			continue
		}
		want[v.Name] = true
		args := []string{"fingerprint", "--block-size", strconv.Itoa(v.BlockSize)}
		for _, id := range v.TokenIDs {
			args = append(args, strconv.FormatUint(uint64(id), 10))
		}
		stdinIDs, _ := json.Marshal(v.TokenIDs)
		csv := make([]string, len(v.TokenIDs))
		for i, id := range v.TokenIDs {
			csv[i] = strconv.FormatUint(uint64(id), 10)
		}
		for _, mode := range []string{"args", "tokens", "stdin"} {
			var out string
			switch {
			case mode == "args" && len(v.TokenIDs) > 0:
				out, err = runCLI(t, "", args...)
			case mode == "tokens" && len(v.TokenIDs) > 0:
				out, err = runCLI(t, "", "fingerprint", "--block-size", strconv.Itoa(v.BlockSize), "--tokens", strings.Join(csv, ","))
			default:
				out, err = runCLI(t, string(stdinIDs), "fingerprint", "--block-size", strconv.Itoa(v.BlockSize))
			}
			if err != nil {
				t.Fatalf("%s/%s: %v", v.Name, mode, err)
			}
			var got fingerprintOutput
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("%s/%s: output %q: %v", v.Name, mode, out, err)
			}
			wantOut := fingerprintOutput{BlockSize: v.BlockSize, BlockHashes: v.BlockHashes, BlockTokenCounts: v.BlockTokenCounts, PrefixHash: v.PrefixHash}
			if wantOut.BlockTokenCounts == nil {
				wantOut.BlockTokenCounts = []uint32{}
			}
			if d := cmp.Diff(wantOut, got); d != "" {
				t.Errorf("%s/%s (-golden +got):\n%s", v.Name, mode, d)
			}
		}
	}
	for name, seen := range want {
		if !seen {
			t.Errorf("golden vector %s not found", name)
		}
	}
}

func TestFingerprintCmd_RejectsBadInputNamingTheValue(t *testing.T) {
	cases := []struct {
		name, stdin string
		args        []string
		wantErr     string
	}{
		{"negative", "", []string{"fingerprint", "1", "-5"}, `"-5"`},
		{"non-integer", "", []string{"fingerprint", "1", "2.5"}, `"2.5"`},
		{"over uint32", "", []string{"fingerprint", "4294967296"}, `"4294967296"`},
		{"block size 0", "", []string{"fingerprint", "--block-size", "0", "1"}, "--block-size 0"},
		{"stdin not an array", "{}", []string{"fingerprint"}, "JSON array"},
		{"stdin negative", "[1,-2]", []string{"fingerprint"}, `"-2"`},
		{"stdin id as a string", `[1,"7"]`, []string{"fingerprint"}, `#1 "7"`},
		{"stdin id as a bool", `[true]`, []string{"fingerprint"}, `#0 true`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := runCLI(t, c.stdin, c.args...)
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("err = %v, want one naming %s", err, c.wantErr)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error must be one line: %q", err)
			}
		})
	}
}
