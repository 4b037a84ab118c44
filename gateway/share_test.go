package gateway

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/prompt"
)

// sharingLookup is a fakeLookup that also takes load reports, as
// *client.Client does.
type sharingLookup struct {
	fakeLookup
	rmu     sync.Mutex
	reports []*pb.ReportPickerLoadRequest
}

func (s *sharingLookup) ReportPickerLoad(_ context.Context, req *pb.ReportPickerLoadRequest) (*pb.ReportPickerLoadResponse, error) {
	s.rmu.Lock()
	s.reports = append(s.reports, req)
	s.rmu.Unlock()
	return &pb.ReportPickerLoadResponse{Accepted: uint32(len(req.Loads))}, nil
}

func (s *sharingLookup) last() *pb.ReportPickerLoadRequest {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	if len(s.reports) == 0 {
		return nil
	}
	return s.reports[len(s.reports)-1]
}

// With a lookup that takes reports, the picker gateway reports what it
// has in flight under its picker id and its lookups carry that id; Close
// ends the reports with an empty one.
func TestGateway_SharesItsLoadByDefault(t *testing.T) {
	lk := &sharingLookup{fakeLookup: fakeLookup{resp: prefixMatch("b", 64)}}
	g := newGW(t, Config{Prompts: fakePrompts{p: prompt.Prompt{TokenIDs: seq(64)}}, Lookup: lk,
		ShareLoad: sharePicker("gw-7")})
	if g.PickerID() != "gw-7" {
		t.Fatalf("picker id %q, want gw-7", g.PickerID())
	}
	d, err := g.Decide(context.Background(), Request{OpenAI: chatReq(t, `{"model":"m","messages":[{"role":"user","content":"x"}]}`), Candidates: abc})
	if err != nil || d.Replica != "b" {
		t.Fatalf("decide: %v %v, want b", d, err)
	}
	if got := lk.reqs[0].PickerId; got != "gw-7" {
		t.Errorf("lookup picker_id %q, want gw-7", got)
	}
	d.Start(d.Replica)
	poll.Eventually(t, 5*time.Second, 5*time.Millisecond, func() (bool, string) {
		r := lk.last()
		if r == nil || len(r.Loads) != 1 {
			return false, fmt.Sprintf("last report %v, want b's load", r)
		}
		l := r.Loads[0]
		// 64 prompt tokens, all cached on b: 0 uncached, 1 request prefilling.
		return l.ReplicaId == "b" && l.PrefillingRequests == 1 && l.RunningRequests == 1 && l.PrefillTokens == 0 && r.PickerId == "gw-7",
			fmt.Sprintf("last report %v, want gw-7's (1, 0, 1) on b", r)
	})
	g.Close()
	if r := lk.last(); len(r.Loads) != 0 {
		t.Errorf("report after Close %v, want empty", r)
	}
}

// NoShareLoad, or a strategy without the picker, reports nothing and
// lookups carry no picker id.
func TestGateway_NoShareLoad(t *testing.T) {
	for _, cfg := range []Config{{NoShareLoad: true}, {Strategy: StrategyRoundRobin}} {
		lk := &sharingLookup{fakeLookup: fakeLookup{resp: prefixMatch("b", 64)}}
		cfg.Lookup, cfg.Prompts = lk, fakePrompts{p: prompt.Prompt{TokenIDs: seq(64)}}
		g := newGW(t, cfg)
		if _, err := g.Decide(context.Background(), Request{OpenAI: chatReq(t, `{"model":"m","messages":[{"role":"user","content":"x"}]}`), Candidates: abc}); err != nil {
			t.Fatal(err)
		}
		g.Close()
		if g.PickerID() != "" || lk.last() != nil {
			t.Errorf("%+v: picker id %q, reports %v: want none", cfg, g.PickerID(), lk.last())
		}
		for _, r := range lk.reqs {
			if r.PickerId != "" {
				t.Errorf("lookup picker_id %q, want none", r.PickerId)
			}
		}
	}
}

func sharePicker(id string) client.LoadShareConfig {
	return client.LoadShareConfig{PickerID: id, Interval: 10 * time.Millisecond}
}
