package raftnode

import (
	"bytes"
	"encoding/json"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/raft"
)

var update = flag.Bool("update", false, "rewrite testdata/membership/*/plan.golden.json from the planner (review every change by hand)")

// planNow is the time of every golden round; the cases give times as
// offsets from it ("-40s"), so a reader checks a grace period by reading
// two numbers.
var planNow = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// planCase is one membership tick on one node, as input.json gives it.
type planCase struct {
	// Rule names the rule the case checks, in words.
	Rule          string `json:"rule"`
	Self          string `json:"self"`
	Configuration []struct {
		ID       string `json:"id"`
		Address  string `json:"address"`
		Suffrage string `json:"suffrage"` // "Voter" or "Nonvoter"
	} `json:"configuration"`
	// PreviousConfiguration: the configuration's ids at the previous tick,
	// each with the nonce gossip showed for it alive then ("" if none).
	PreviousConfiguration map[string]string `json:"previous_configuration"`
	Gossip                []struct {
		ID    string `json:"id"`
		Raft  string `json:"raft"`
		Alive bool   `json:"alive"`
		Since string `json:"since"` // offset from now of the last alive change
		Nonce string `json:"nonce"`
		State bool   `json:"state"`
	} `json:"gossip"`
	Removed map[string]string `json:"removed"`
	// PendingRemovals: RemoveServer calls of this node, by id.
	PendingRemovals map[string]struct {
		Nonce string `json:"nonce"`
		Age   string `json:"age"`
	} `json:"pending_removals"`
	DeadSince       map[string]string `json:"dead_since"` // id → offset from now
	Grace           string            `json:"grace"`      // DeadServerCleanup; "" = off
	BootstrapExpect int               `json:"bootstrap_expect"`
}

// planResult is a tick's decisions, as plan.golden.json holds them.
type planResult struct {
	// Bootstrap: the configuration bootstrapped with, "id@raft" each
	// (only for a node whose configuration is empty).
	Bootstrap []string `json:"bootstrap,omitempty"`
	// ConfigurationNonces: what the next tick gets as its
	// previous_configuration.
	ConfigurationNonces map[string]string `json:"configuration_nonces,omitempty"`
	// Removed: the removal records after this tick's bookkeeping; the
	// record of an add_voter with restarted is dropped when it is applied.
	Removed                map[string]string `json:"removed,omitempty"`
	SettledPendingRemovals []string          `json:"settled_pending_removals,omitempty"`
	AddVoter               *goldenAdd        `json:"add_voter,omitempty"`
	Remove                 []string          `json:"remove,omitempty"`
	DeadSince              map[string]string `json:"dead_since,omitempty"`
	Voters                 int               `json:"voters,omitempty"`
}

type goldenAdd struct {
	ID        string `json:"id"`
	Address   string `json:"address"`
	Restarted bool   `json:"restarted,omitempty"`
}

// tickInputs are the planners' inputs built from a planCase.
type tickInputs struct {
	cfg     raft.Configuration
	gossip  map[string]member
	pending map[string]opRemoval
	in      membershipInput
}

func offset(t *testing.T, s string) time.Time {
	t.Helper()
	if s == "" {
		return time.Time{}
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("offset %q: %v", s, err)
	}
	return planNow.Add(d)
}

func (c planCase) inputs(t *testing.T) tickInputs {
	t.Helper()
	var x tickInputs
	for _, s := range c.Configuration {
		sf := raft.Voter
		switch s.Suffrage {
		case "Voter":
		case "Nonvoter":
			sf = raft.Nonvoter
		default:
			t.Fatalf("configuration %s: suffrage %q, want Voter or Nonvoter", s.ID, s.Suffrage)
		}
		x.cfg.Servers = append(x.cfg.Servers, raft.Server{ID: raft.ServerID(s.ID), Address: raft.ServerAddress(s.Address), Suffrage: sf})
	}
	x.gossip = map[string]member{}
	for _, m := range c.Gossip {
		x.gossip[m.ID] = member{alive: m.Alive, since: offset(t, m.Since),
			meta: gossipMeta{ID: m.ID, Raft: m.Raft, Nonce: m.Nonce, State: m.State}}
	}
	for id, p := range c.PendingRemovals {
		if x.pending == nil {
			x.pending = map[string]opRemoval{}
		}
		d, err := time.ParseDuration(p.Age)
		if err != nil {
			t.Fatalf("pending_removals %s: age %q: %v", id, p.Age, err)
		}
		x.pending[id] = opRemoval{nonce: p.Nonce, at: planNow.Add(-d)}
	}
	var grace time.Duration
	if c.Grace != "" {
		var err error
		if grace, err = time.ParseDuration(c.Grace); err != nil {
			t.Fatalf("grace %q: %v", c.Grace, err)
		}
	}
	var dead map[string]time.Time
	for id, s := range c.DeadSince {
		if dead == nil {
			dead = map[string]time.Time{}
		}
		dead[id] = offset(t, s)
	}
	x.in = membershipInput{Self: c.Self, Config: x.cfg, Gossip: x.gossip, Removed: c.Removed, DeadSince: dead, Now: planNow, Grace: grace}
	return x
}

// plan runs one tick's decisions in the membership loop's order: a node
// without configuration plans its bootstrap; one with a configuration
// notes removals, then plans the reconcile round it makes as leader.
func (c planCase) plan(t *testing.T) planResult {
	x := c.inputs(t)
	var r planResult
	if len(x.cfg.Servers) == 0 {
		for _, s := range planBootstrap(c.Self, x.gossip, c.BootstrapExpect) {
			r.Bootstrap = append(r.Bootstrap, string(s.ID)+"@"+string(s.Address))
		}
		return r
	}
	cur, removed, settled := noteRemovals(c.PreviousConfiguration, x.cfg, x.gossip, c.Removed, x.pending, planNow)
	r.ConfigurationNonces, r.Removed, r.SettledPendingRemovals = cur, removed, settled
	x.in.Removed = removed
	ch := planMembership(x.in)
	if ch.Add != nil {
		r.AddVoter = &goldenAdd{ID: ch.Add.ID, Address: ch.Add.Address, Restarted: ch.Add.Restarted}
	}
	r.Remove, r.Voters = ch.Remove, ch.Voters
	for id, at := range ch.DeadSince {
		if r.DeadSince == nil {
			r.DeadSince = map[string]string{}
		}
		r.DeadSince[id] = at.Sub(planNow).String()
	}
	return r
}

// The membership decisions of one tick, case by case: each directory of
// testdata/membership holds a tick's inputs (input.json, with the rule it
// checks) and the decisions the rule calls for (plan.golden.json). No
// network, no clock: every time is an offset from planNow.
func TestPlan_MembershipGolden(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join("testdata", "membership", "*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) == 0 {
		t.Fatal("no cases under testdata/membership")
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join(dir, "input.json"))
			if err != nil {
				t.Fatal(err)
			}
			var c planCase
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&c); err != nil {
				t.Fatalf("input.json: %v", err)
			}
			if c.Rule == "" {
				t.Fatal("input.json: rule is empty: say which rule the case checks")
			}
			got := c.plan(t)
			out, err := json.MarshalIndent(got, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, '\n')
			golden := filepath.Join(dir, "plan.golden.json")
			if *update {
				if err := os.WriteFile(golden, out, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to write it, then review it)", err)
			}
			if d := cmp.Diff(string(want), string(out)); d != "" {
				t.Errorf("%s\nplan (-golden +got):\n%s", c.Rule, d)
			}
		})
	}
}

// The planners leave their inputs as they were: the loop keeps its state
// only through what they return.
func TestPlan_LeavesInputsUnchanged(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join("testdata", "membership", "*", "input.json"))
	if err != nil {
		t.Fatal(err)
	}
	opts := cmp.Options{cmp.AllowUnexported(member{}, opRemoval{})}
	for _, path := range dirs {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var c planCase
		if err := json.Unmarshal(raw, &c); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		x, before := c.inputs(t), c.inputs(t)
		prev := maps.Clone(c.PreviousConfiguration)
		removed := maps.Clone(c.Removed)
		planBootstrap(c.Self, x.gossip, c.BootstrapExpect)
		noteRemovals(c.PreviousConfiguration, x.cfg, x.gossip, c.Removed, x.pending, planNow)
		planMembership(x.in)
		for what, pair := range map[string][2]any{
			"configuration": {before.cfg, x.cfg}, "gossip": {before.gossip, x.gossip},
			"pending removals": {before.pending, x.pending}, "dead since": {before.in.DeadSince, x.in.DeadSince},
			"previous configuration": {prev, c.PreviousConfiguration}, "removed": {removed, c.Removed},
		} {
			if d := cmp.Diff(pair[0], pair[1], opts); d != "" {
				t.Errorf("%s: %s changed (-before +after):\n%s", path, what, d)
			}
		}
	}
}
