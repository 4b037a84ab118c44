package client

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// pickerCasesPath is the table of picker cases shared with the Python
// client's tests (clients/python/tests/test_picker.py), each worked by hand
// from the cost model in Picker's doc, so the two pickers cannot drift.
var pickerCasesPath = filepath.Join("testdata", "picker_cases.json")

type pickerCase struct {
	Name   string `json:"name"`
	Config *struct {
		TokensPerWaitingRequest *float64 `json:"tokens_per_waiting_request"`
		CacheAffinity           *float64 `json:"cache_affinity"`
		RunningWeight           *float64 `json:"running_weight"`
		LoadBound               *float64 `json:"load_bound"`
		DecodeWeight            *float64 `json:"decode_weight"`
		KVWeight                *float64 `json:"kv_weight"`
		Temperature             *float64 `json:"temperature"`
		LoadBoundFloor          *float64 `json:"load_bound_floor"`
		CacheAffinityTokens     *float64 `json:"cache_affinity_tokens"`
		CacheAffinityLoad       *float64 `json:"cache_affinity_load"`
	} `json:"config"`
	RendezvousKey uint64 `json:"rendezvous_key,string"`
	History       []struct {
		Op             string `json:"op"`
		ID             string `json:"id"`
		Replica        string `json:"replica"`
		UncachedTokens int    `json:"uncached_tokens"`
	} `json:"history"`
	Response     json.RawMessage `json:"response"`
	Candidates   []string        `json:"candidates"`
	PromptTokens int             `json:"prompt_tokens"`
	Expect       struct {
		Replica *string  `json:"replica"`
		OneOf   []string `json:"one_of"`
		Index   *int     `json:"index"`
		Costs   []struct {
			Replica         string  `json:"replica"`
			Reason          string  `json:"reason"`
			CachedTokens    int     `json:"cached_tokens"`
			UncachedTokens  int     `json:"uncached_tokens"`
			QueuedTokens    float64 `json:"queued_tokens"`
			Others          float64 `json:"others_tokens"`
			Repeated        float64 `json:"repeated_tokens"`
			InFlight        int     `json:"in_flight"`
			ReportedWaiting uint32  `json:"reported_waiting"`
			ReportedRunning uint32  `json:"reported_running"`
			DecodeTokens    float64 `json:"decode_tokens"`
			KVTokens        float64 `json:"kv_tokens"`
			Pressure        float64 `json:"pressure"`
			OthersPrefill   uint32  `json:"others_prefilling"`
			OthersTokens    uint64  `json:"others_prefill_tokens"`
			OthersRunning   uint32  `json:"others_running"`
			OthersPickers   uint32  `json:"others_pickers"`
			Cost            float64 `json:"cost"`
		} `json:"costs"`
	} `json:"expect"`
}

func loadPickerCases(t *testing.T) []pickerCase {
	t.Helper()
	raw, err := os.ReadFile(pickerCasesPath)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Cases []pickerCase `json:"cases"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatalf("%s: %v", pickerCasesPath, err)
	}
	if len(f.Cases) < 10 {
		t.Fatalf("%s: %d cases", pickerCasesPath, len(f.Cases))
	}
	return f.Cases
}

// replay runs a case's history on a fresh picker and returns its pick.
func (c *pickerCase) replay(t *testing.T, seed uint64) Decision {
	t.Helper()
	cfg := DefaultPickerConfig()
	cfg.Seed = seed
	if k := c.Config; k != nil {
		for dst, src := range map[*float64]*float64{&cfg.TokensPerWaitingRequest: k.TokensPerWaitingRequest,
			&cfg.CacheAffinity: k.CacheAffinity, &cfg.RunningWeight: k.RunningWeight, &cfg.LoadBound: k.LoadBound,
			&cfg.DecodeWeight: k.DecodeWeight, &cfg.KVWeight: k.KVWeight, &cfg.Temperature: k.Temperature,
			&cfg.LoadBoundFloor: k.LoadBoundFloor, &cfg.CacheAffinityTokens: k.CacheAffinityTokens,
			&cfg.CacheAffinityLoad: k.CacheAffinityLoad} {
			if src != nil {
				*dst = *src
			}
		}
	}
	p := NewPicker(cfg)
	started := map[string]*Inflight{}
	for _, op := range c.History {
		switch op.Op {
		case "start":
			started[op.ID] = p.StartOn(op.Replica, op.UncachedTokens)
		case "first_token":
			started[op.ID].FirstToken()
		case "done":
			started[op.ID].Done()
		default:
			t.Fatalf("unknown history op %q", op.Op)
		}
	}
	var resp *pb.LookupRouteResponse
	if len(c.Response) > 0 && string(c.Response) != "null" {
		resp = &pb.LookupRouteResponse{}
		if err := protojson.Unmarshal(c.Response, resp); err != nil {
			t.Fatalf("response: %v", err)
		}
	}
	return p.PickKeyed(resp, c.Candidates, c.PromptTokens, c.RendezvousKey)
}

func TestPicker_SharedTable(t *testing.T) {
	for _, c := range loadPickerCases(t) {
		t.Run(c.Name, func(t *testing.T) {
			for _, seed := range []uint64{1, 2, 3} {
				d := c.replay(t, seed)
				switch {
				case c.Expect.OneOf != nil:
					if !slices.Contains(c.Expect.OneOf, d.Replica) {
						t.Errorf("seed %d: picked %q, want one of %q", seed, d.Replica, c.Expect.OneOf)
					}
				case c.Expect.Replica == nil:
					t.Fatal("case expects neither replica nor one_of")
				case d.Replica != *c.Expect.Replica:
					t.Errorf("seed %d: picked %q, want %q", seed, d.Replica, *c.Expect.Replica)
				}
				if c.Expect.Index != nil && d.Index != *c.Expect.Index {
					t.Errorf("index %d, want %d", d.Index, *c.Expect.Index)
				} else if c.Expect.Index == nil && d.Replica != "" && c.Candidates[d.Index] != d.Replica {
					t.Errorf("index %d is not %q", d.Index, d.Replica)
				}
				if d.PromptTokens != c.PromptTokens {
					t.Errorf("prompt tokens %d, want %d", d.PromptTokens, c.PromptTokens)
				}
				if len(d.Costs) != len(c.Expect.Costs) {
					t.Fatalf("%d costs, want %d", len(d.Costs), len(c.Expect.Costs))
				}
				for i, w := range c.Expect.Costs {
					g := d.Costs[i]
					if g.Replica != w.Replica || g.Reason.String() != w.Reason || g.CachedTokens != w.CachedTokens ||
						g.UncachedTokens != w.UncachedTokens || !near(g.QueuedTokens, w.QueuedTokens) ||
						!near(g.OthersTokens, w.Others) || !near(g.RepeatedTokens, w.Repeated) || g.InFlight != w.InFlight ||
						g.ReportedWaiting != w.ReportedWaiting || g.ReportedRunning != w.ReportedRunning || !near(g.Cost, w.Cost) ||
						!near(g.DecodeTokens, w.DecodeTokens) || !near(g.KVTokens, w.KVTokens) || !near(g.Pressure, w.Pressure) ||
						g.OthersPrefilling != w.OthersPrefill || g.OthersPrefillTokens != w.OthersTokens ||
						g.OthersRunning != w.OthersRunning || g.OthersPickers != w.OthersPickers {
						t.Errorf("cost %d:\n got %+v\nwant %+v", i, g, w)
					}
				}
			}
		})
	}
}

// The idle tie of the table is broken at random, and the softmax draws
// among near-equal candidates, reaching every candidate of one_of over a
// few seeds rather than always the first.
func TestPicker_SharedTableRandomTieSpreads(t *testing.T) {
	for _, name := range []string{"idle_no_hint_is_a_random_tie", "softmax_draws_among_near_equal_candidates"} {
		t.Run(name, func(t *testing.T) { spreads(t, name) })
	}
}

func spreads(t *testing.T, name string) {
	for _, c := range loadPickerCases(t) {
		if c.Name != name {
			continue
		}
		seen := map[string]bool{}
		for seed := uint64(1); seed < 40; seed++ {
			seen[c.replay(t, seed).Replica] = true
		}
		if len(seen) != len(c.Expect.OneOf) {
			t.Fatalf("picked %v over 39 seeds, want each of %q", seen, c.Expect.OneOf)
		}
		return
	}
	t.Fatalf("no %s case", name)
}
