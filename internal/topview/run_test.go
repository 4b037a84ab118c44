package topview

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// fixedSource returns its samples in order, the last one again after.
type fixedSource struct {
	samples []Sample
	polls   int
}

func (f *fixedSource) Poll(context.Context) Sample {
	s := f.samples[min(f.polls, len(f.samples)-1)]
	f.polls++
	return s
}

// twoPolls is a cluster of two nodes polled one second apart, one picker
// reporting to both (n1's report the fresher).
func twoPolls() *fixedSource {
	t0 := time.Date(2026, 12, 1, 13, 0, 0, 0, time.UTC)
	return &fixedSource{samples: []Sample{
		{At: t0, Nodes: []Node{
			{Addr: "a:1", ID: "n1", State: "Leader", Term: 2, Applied: 10, Calls: map[string]uint64{"PREFIX_MATCH": 10}},
			{Addr: "a:2", ID: "n2", State: "Follower", Term: 2, Applied: 10, Calls: map[string]uint64{"NO_HINT": 4}}}},
		{At: t0.Add(time.Second), Nodes: []Node{
			{Addr: "a:1", ID: "n1", State: "Leader", Term: 2, Applied: 30, Calls: map[string]uint64{"PREFIX_MATCH": 25},
				Pickers: []Picker{{ID: "gw-1", Replicas: 3, Prefilling: 2, Tokens: 4096, Running: 5, AgeMs: 120}}},
			{Addr: "a:2", ID: "n2", State: "Follower", Term: 2, Applied: 30, Calls: map[string]uint64{"NO_HINT": 9},
				Pickers: []Picker{{ID: "gw-1", Replicas: 3, Prefilling: 1, Tokens: 2048, Running: 4, AgeMs: 300}}}}},
	}}
}

// Run with Once polls twice and prints the second poll once, in each
// mode, the rates over the second between them; expected output written
// by hand from the two samples (15 + 5 lookups in 1 s).
func TestRun_OncePrintsTheSecondPollInEachMode(t *testing.T) {
	for _, c := range []struct {
		mode Mode
		want string
	}{
		{Plain, "top 13:00:01 | n1 Leader t2 applied 30 | n2 Follower t2 applied 30 | 20.0 lookups/s: PREFIX_MATCH 75%, NO_HINT 25% | leader n1 | pickers: gw-1 2 prefilling, 5 running on 3 replicas (120 ms ago)\n" +
			"proxy http://p: 1.0 requests/s\n"},
		{Terminal, "inference-cache top  13:00:01  (every 1ms; Ctrl-C quits)\n" +
			"NODE  ADDR  STATE     TERM  APPLIED  STALE\n" +
			"n1    a:1   Leader    2     30       no\n" +
			"n2    a:2   Follower  2     30       no\n" +
			"lookups 20.0/s  PREFIX_MATCH 75%, NO_HINT 25%\n" +
			"leader n1\n" +
			"PICKER  REPLICAS  PREFILLING  PREFILL TOKENS  RUNNING  AGE     ON NODES\n" +
			"gw-1    3         2           4096            5        120 ms  2/2\n" +
			"proxy http://p: 1.0 requests/s\n"},
		{JSON, `{"at":"2026-12-01T13:00:01Z","nodes":[` +
			`{"addr":"a:1","node_id":"n1","state":"Leader","term":2,"applied_index":30,"stale":false,"lookup_route_calls":{"PREFIX_MATCH":25},` +
			`"pickers":[{"picker_id":"gw-1","replicas":3,"prefilling_requests":2,"prefill_tokens":4096,"running_requests":5,"age_ms":120}]},` +
			`{"addr":"a:2","node_id":"n2","state":"Follower","term":2,"applied_index":30,"stale":false,"lookup_route_calls":{"NO_HINT":9},` +
			`"pickers":[{"picker_id":"gw-1","replicas":3,"prefilling_requests":1,"prefill_tokens":2048,"running_requests":4,"age_ms":300}]}]}` + "\n"},
	} {
		src := twoPolls()
		v := &View{}
		v.SetProxy("proxy http://p: 1.0 requests/s")
		var out bytes.Buffer
		if err := Run(context.Background(), &out, src, v, RunConfig{Every: time.Millisecond, Mode: c.mode, Once: true}); err != nil {
			t.Fatal(err)
		}
		if out.String() != c.want || src.polls != 2 {
			t.Errorf("mode %d, %d polls:\n%s\nwant 2 polls:\n%s", c.mode, src.polls, out.String(), c.want)
		}
		if err := v.Unanswered(); err != nil {
			t.Errorf("mode %d: nodes answered, yet %v", c.mode, err)
		}
	}
}

// When no node answered the last poll, Unanswered is the first node's
// error, for the command's own.
func TestView_UnansweredIsTheFirstNodesError(t *testing.T) {
	v := &View{}
	if v.Unanswered() != nil {
		t.Fatal("an error before any poll")
	}
	refused := context.DeadlineExceeded
	v.observe(Sample{Nodes: []Node{{Addr: "a:1", Err: "refused", Cause: refused}, {Addr: "a:2", Err: "refused"}}})
	if err := v.Unanswered(); err != refused {
		t.Fatalf("Unanswered = %v, want the first node's cause", err)
	}
}
