package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/internal/syncbuf"
	"github.com/inference-cache/inference-cache/pickerload"
)

// The snapshot of a picker's in-flight load, worked by hand: r1 has two
// requests (one past its first token), r2 one done, r3 one prefilling.
func TestPicker_InFlightPerReplica(t *testing.T) {
	p := NewPicker(DefaultPickerConfig())
	a := p.StartOn("r1", 1000)
	p.StartOn("r1", 300)
	b := p.StartOn("r2", 50)
	p.StartOn("r3", 7)
	a.FirstToken()
	b.Done()
	p.Pick(nil, []string{"r4"}, 10) // a candidate seen, nothing sent: left out
	got := p.InFlight()
	want := []*pb.PickerReplicaLoad{
		{ReplicaId: "r1", PrefillingRequests: 1, PrefillTokens: 300, RunningRequests: 2},
		{ReplicaId: "r3", PrefillingRequests: 1, PrefillTokens: 7, RunningRequests: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("in flight %v, want %v", got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.ReplicaId != w.ReplicaId || g.PrefillingRequests != w.PrefillingRequests || g.PrefillTokens != w.PrefillTokens || g.RunningRequests != w.RunningRequests {
			t.Errorf("[%d] = %v, want %v", i, g, w)
		}
	}
}

// fakeSender records reports; fail makes every report fail, block makes
// it wait for its context.
type fakeSender struct {
	mu      sync.Mutex
	reports []*pb.ReportPickerLoadRequest
	fail    bool
	block   bool
}

func (f *fakeSender) ReportPickerLoad(ctx context.Context, req *pb.ReportPickerLoadRequest) (*pb.ReportPickerLoadResponse, error) {
	f.mu.Lock()
	f.reports = append(f.reports, req)
	fail, block := f.fail, f.block
	f.mu.Unlock()
	if block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if fail {
		return nil, errors.New("unavailable")
	}
	return &pb.ReportPickerLoadResponse{Accepted: uint32(len(req.Loads))}, nil
}

func (f *fakeSender) all() []*pb.ReportPickerLoadRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*pb.ReportPickerLoadRequest(nil), f.reports...)
}

// Reports carry the picker id, the interval, increasing sequences and the
// picker's load; Stop sends a last, empty report and ends.
func TestLoadShare_ReportsAndStopsWithAnEmptyReport(t *testing.T) {
	p := NewPicker(DefaultPickerConfig())
	p.StartOn("r1", 100)
	f := &fakeSender{}
	s, err := StartLoadShare(p, f, LoadShareConfig{PickerID: "gw-1", Interval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 5*time.Second, 5*time.Millisecond, func() (bool, string) {
		n := len(f.all())
		return n >= 3, fmt.Sprintf("%d reports so far, want 3", n)
	})
	s.Stop()
	s.Stop() // idempotent
	rs := f.all()
	for i, r := range rs {
		if r.PickerId != "gw-1" || r.IntervalMs != 10 {
			t.Fatalf("report %d: %v, want picker gw-1 at 10 ms", i, r)
		}
		if i > 0 && r.Sequence != rs[i-1].Sequence+1 {
			t.Fatalf("report %d: sequence %d after %d", i, r.Sequence, rs[i-1].Sequence)
		}
	}
	if l := rs[0].Loads; len(l) != 1 || l[0].ReplicaId != "r1" || l[0].PrefillTokens != 100 || l[0].RunningRequests != 1 {
		t.Errorf("first report's loads %v, want r1 (1, 100, 1)", l)
	}
	if last := rs[len(rs)-1]; len(last.Loads) != 0 {
		t.Errorf("last report %v, want empty (sent by Stop)", last)
	}
	if st := s.Stats(); st.Sent != uint64(len(rs)) || st.Failed != 0 {
		t.Errorf("stats %+v, want %d sent", st, len(rs))
	}
}

// Kick reports at once, between the ticks of a long interval.
func TestLoadShare_KickReportsNow(t *testing.T) {
	p := NewPicker(DefaultPickerConfig())
	f := &fakeSender{}
	s, err := StartLoadShare(p, f, LoadShareConfig{PickerID: "gw-1", Interval: MaxLoadShareInterval})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	poll.Eventually(t, 5*time.Second, 5*time.Millisecond, func() (bool, string) {
		return len(f.all()) == 1, "no first report"
	})
	p.StartOn("r1", 300)
	s.Kick()
	poll.Eventually(t, 5*time.Second, 5*time.Millisecond, func() (bool, string) {
		rs := f.all()
		if len(rs) < 2 {
			return false, "no report after Kick"
		}
		l := rs[len(rs)-1].Loads
		return len(l) == 1 && l[0].PrefillTokens == 300, fmt.Sprintf("last report %v", rs[len(rs)-1])
	})
}

// A report handed to a push (Carried) takes the next sequence and holds
// the ticker's reports back until Answered, which sends one at once with
// a newer sequence and the queued turns; Carried is nil after Stop.
func TestLoadShare_CarriedHoldsTheReportsUntilAnswered(t *testing.T) {
	p := NewPicker(DefaultPickerConfig())
	f := &fakeSender{}
	s, err := StartLoadShare(p, f, LoadShareConfig{PickerID: "gw-1", Interval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 5*time.Second, 5*time.Millisecond, func() (bool, string) {
		return len(f.all()) >= 1, "no first report"
	})
	c := s.Carried([]uint64{7}, []*pb.PickerReplicaLoad{{ReplicaId: "r1", PrefillTokens: 300}})
	sent := len(f.all())
	if c == nil || c.PickerId != "gw-1" || c.Sequence <= f.all()[sent-1].Sequence || !slices.Equal(c.SettledTurns, []uint64{7}) {
		t.Fatalf("carried report %v, want gw-1's next sequence settling turn 7", c)
	}
	s.Settle(9)
	poll.Eventually(t, 5*time.Second, time.Millisecond, func() (bool, string) {
		return s.Stats().Held >= 3, fmt.Sprintf("%d reports held, want 3", s.Stats().Held)
	})
	if n := len(f.all()); n > sent+1 {
		// One report may have been on its way when Carried was called.
		t.Fatalf("%d reports sent while the carried one's push was unanswered", n-sent)
	}
	s.Answered()
	poll.Eventually(t, 5*time.Second, time.Millisecond, func() (bool, string) {
		for _, r := range f.all()[sent:] {
			if r.Sequence > c.Sequence && slices.Equal(r.SettledTurns, []uint64{9}) {
				return true, ""
			}
		}
		return false, "no report after Answered with the queued turn"
	})
	s.Stop()
	if c := s.Carried(nil, nil); c != nil {
		t.Fatalf("Carried after Stop: %v, want nil", c)
	}
}

// A cluster that fails or hangs costs the reporter its reports only: each
// is bounded by the interval, counted failed, and Stop still returns.
func TestLoadShare_FailingClusterDropsReports(t *testing.T) {
	for _, block := range []bool{false, true} {
		f := &fakeSender{fail: !block, block: block}
		s, err := StartLoadShare(NewPicker(DefaultPickerConfig()), f, LoadShareConfig{Interval: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		poll.Eventually(t, 5*time.Second, 5*time.Millisecond, func() (bool, string) {
			return s.Stats().Failed >= 2, "fewer than 2 failed reports"
		})
		s.Stop()
		if st := s.Stats(); st.Sent != 0 {
			t.Errorf("block=%t: %+v, want nothing sent", block, st)
		}
		if !strings.Contains(s.PickerID(), "-") {
			t.Errorf("default picker id %q, want hostname-pid-random", s.PickerID())
		}
	}
}

func TestStartLoadShare_RefusesBadConfig(t *testing.T) {
	p, f := NewPicker(DefaultPickerConfig()), &fakeSender{}
	for cfg, want := range map[*LoadShareConfig]string{
		{PickerID: strings.Repeat("g", 129)}: "picker id: 129 bytes, over the limit of 128",
		{Interval: time.Millisecond}:         "interval 1ms: want 10ms to 1m0s",
		{Interval: 2 * time.Minute}:          "interval 2m0s: want 10ms to 1m0s",
		// The node refuses ids breaking contract §9.2; so does the start.
		{PickerID: "gw\n2"}: `picker id "gw\n2": holds control character U+000A at byte 2`,
		{PickerID: "  "}:    `picker id "  ": blank (only whitespace)`,
	} {
		if _, err := StartLoadShare(p, f, *cfg); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v, want %q", *cfg, err, want)
		}
	}
	if a, b := DefaultPickerID(), DefaultPickerID(); a == b {
		t.Errorf("two default picker ids are equal: %q", a)
	}
}

// ctxSender blocks every report until its context ends and records how
// each ended and the deadline it was given.
type ctxSender struct {
	started chan struct{} // one value per report begun
	mu      sync.Mutex
	ends    []error
	left    []time.Duration // deadline − start of each report
}

func (c *ctxSender) ReportPickerLoad(ctx context.Context, _ *pb.ReportPickerLoadRequest) (*pb.ReportPickerLoadResponse, error) {
	d, _ := ctx.Deadline()
	c.mu.Lock()
	c.left = append(c.left, time.Until(d))
	c.mu.Unlock()
	c.started <- struct{}{}
	<-ctx.Done()
	c.mu.Lock()
	c.ends = append(c.ends, ctx.Err())
	c.mu.Unlock()
	return nil, ctx.Err()
}

// A node that accepts the connection and never answers (a hung node, a
// black-holed address) holds each report for its whole interval. Stop
// must not wait on it: the report in flight is cancelled (the empty last
// report supersedes it) and the last report is bounded by
// loadShareStopTimeout, not by an interval of up to a minute, so a
// gateway told to stop stops within its grace period.
func TestLoadShare_StopDoesNotWaitOnAHungNode(t *testing.T) {
	p := NewPicker(DefaultPickerConfig())
	p.StartOn("r1", 100)
	f := &ctxSender{started: make(chan struct{}, 4)}
	s, err := StartLoadShare(p, f, LoadShareConfig{PickerID: "gw-hung", Interval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	<-f.started // the first report is in flight, blocked
	stopped := make(chan struct{})
	go func() { s.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(20 * time.Second):
		t.Fatal("Stop still waiting 20 s on a report to a hung node (interval 1m)")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.ends) != 2 || !errors.Is(f.ends[0], context.Canceled) {
		t.Fatalf("reports ended %v, want the one in flight cancelled, then the last one", f.ends)
	}
	if f.left[1] > loadShareStopTimeout {
		t.Errorf("the last report was given %v, want at most %v", f.left[1], loadShareStopTimeout)
	}
}

// storeSender is a node's answer to reports, over a real store as the
// server answers them (api.ReportPickerLoad: superseded when the store
// ignored the report).
type storeSender struct{ s *pickerload.Store }

func (n storeSender) ReportPickerLoad(_ context.Context, req *pb.ReportPickerLoadRequest) (*pb.ReportPickerLoadResponse, error) {
	o, err := n.s.Put(pickerload.FromPB(req))
	if err != nil {
		return nil, err
	}
	if o == pickerload.Ignored {
		return &pb.ReportPickerLoadResponse{Superseded: true}, nil
	}
	return &pb.ReportPickerLoadResponse{Accepted: uint32(len(req.Loads))}, nil
}

// gatedStoreSender is a storeSender whose first report waits for gate,
// after telling entered it is on its way.
type gatedStoreSender struct {
	storeSender
	once          sync.Once
	entered, gate chan struct{}
}

func (n *gatedStoreSender) ReportPickerLoad(ctx context.Context, req *pb.ReportPickerLoadRequest) (*pb.ReportPickerLoadResponse, error) {
	n.once.Do(func() {
		close(n.entered)
		<-n.gate
	})
	return n.storeSender.ReportPickerLoad(ctx, req)
}

// A periodic report on its way when a push carries the picker's next one
// can reach the node after it and be answered superseded: that is the
// picker's own newer report, not another picker under its id, so it is
// neither counted nor warned about.
func TestLoadShare_OvertakenByItsOwnCarriedReportIsNoDuplicate(t *testing.T) {
	st := pickerload.New(pickerload.Config{})
	n := &gatedStoreSender{storeSender: storeSender{st}, entered: make(chan struct{}), gate: make(chan struct{})}
	var logs syncbuf.Buffer
	s, err := StartLoadShare(NewPicker(DefaultPickerConfig()), n, LoadShareConfig{PickerID: "gw-1", Interval: time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	<-n.entered
	c := s.Carried([]uint64{3}, nil)
	if _, err := st.Put(pickerload.FromPB(c)); err != nil { // the push reached the node first
		t.Fatal(err)
	}
	close(n.gate)
	poll.Eventually(t, 5*time.Second, time.Millisecond, func() (bool, string) {
		return s.Stats().Sent >= 1, "the first report not answered"
	})
	if st := s.Stats(); st.Superseded != 0 || strings.Contains(logs.String(), "superseded") {
		t.Fatalf("stats %+v, log %q: want the overtaken report neither counted nor warned about", st, logs.String())
	}
}

// Two gateways given the same --picker-id (a fixed value in a Deployment
// of several replicas): the one started later counts its sequence from a
// later clock reading, so the node answers every report of the earlier
// one superseded, and its load is never seen. That must not be silent:
// the earlier one counts its superseded reports and warns, naming the id.
func TestLoadShare_WarnsWhenAnotherPickerHasItsID(t *testing.T) {
	node := storeSender{pickerload.New(pickerload.Config{})}
	var logs syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	p1, p2 := NewPicker(DefaultPickerConfig()), NewPicker(DefaultPickerConfig())
	p1.StartOn("r1", 100)
	p2.StartOn("r2", 200)
	first, err := StartLoadShare(p1, node, LoadShareConfig{PickerID: "gw-same", Interval: 10 * time.Millisecond, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Stop()
	poll.Eventually(t, 5*time.Second, 2*time.Millisecond, func() (bool, string) {
		return first.Stats().Sent >= 1, "no report of the first gateway yet"
	})
	second, err := StartLoadShare(p2, node, LoadShareConfig{PickerID: "gw-same", Interval: 10 * time.Millisecond, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Stop()
	poll.Eventually(t, 5*time.Second, 5*time.Millisecond, func() (bool, string) {
		return first.Stats().Superseded >= 2, fmt.Sprintf("first gateway's stats %+v, want 2 superseded", first.Stats())
	})
	if out := logs.String(); !strings.Contains(out, "picker_id=gw-same") || !strings.Contains(out, "superseded") {
		t.Errorf("log %q, want a warning naming gw-same and its superseded reports", out)
	}
	if st := second.Stats(); st.Superseded != 0 {
		t.Errorf("second gateway's stats %+v, want none superseded", st)
	}
}

// BeginReport and EndReport run the reports one at a time, each asked
// for: an ask made while one is in flight makes one report after it; a
// carried report's unanswered push holds them, until Answered or until
// carriedHoldMax passes on the given clock.
func TestLoadShare_ManualOneReportInFlight(t *testing.T) {
	now := time.Unix(100, 0)
	s, err := StartLoadShare(NewPicker(DefaultPickerConfig()), nil, LoadShareConfig{PickerID: "gw-1", Manual: true, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if r := s.BeginReport(false); r != nil {
		t.Fatalf("a report nobody asked for: %v", r)
	}
	r1 := s.BeginReport(true)
	if r1 == nil || r1.PickerId != "gw-1" {
		t.Fatalf("first report %v", r1)
	}
	s.Settle(7) // asks, while r1 is in flight
	if r := s.BeginReport(true); r != nil {
		t.Fatalf("a second report while one is in flight: %v", r)
	}
	s.EndReport(r1, &pb.ReportPickerLoadResponse{}, nil)
	r2 := s.BeginReport(false)
	if r2 == nil || r2.Sequence <= r1.Sequence || !slices.Equal(r2.SettledTurns, []uint64{7}) {
		t.Fatalf("report after the ask %v: want a later sequence settling turn 7", r2)
	}
	s.EndReport(r2, nil, errors.New("node down"))
	if r := s.BeginReport(false); r != nil {
		t.Fatalf("a report after every ask was answered: %v", r)
	}

	c := s.Carried(nil, nil)
	if r := s.BeginReport(true); r != nil {
		t.Fatalf("a report while the carried one's push is unanswered: %v", r)
	}
	now = now.Add(carriedHoldMax)
	r3 := s.BeginReport(true)
	if r3 == nil || r3.Sequence <= c.Sequence {
		t.Fatalf("report once the hold lapsed %v: want one after the carried %d", r3, c.Sequence)
	}
	s.EndReport(r3, &pb.ReportPickerLoadResponse{}, nil)
	s.Answered() // the first carried push ends, late: it asks for a report
	r4 := s.BeginReport(false)
	if r4 == nil {
		t.Fatal("no report after the late answer")
	}
	s.EndReport(r4, &pb.ReportPickerLoadResponse{}, nil)
	s.Carried(nil, nil)
	if r := s.BeginReport(true); r != nil {
		t.Fatalf("a report while the second carried push is unanswered: %v", r)
	}
	s.Answered()
	if r := s.BeginReport(false); r == nil {
		t.Fatal("no report once the carried push was answered")
	}
	if st := s.Stats(); st.Sent != 3 || st.Failed != 1 || st.Held != 2 {
		t.Fatalf("stats %+v: want 3 sent, 1 failed, 2 held", st)
	}
}
