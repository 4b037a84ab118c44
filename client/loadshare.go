package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/pickerload"
)

// Defaults and limits of load sharing (contract §5.11).
const (
	// DefaultLoadShareInterval is how often a LoadShare reports: a report
	// reaches every node within a few milliseconds, so another picker's
	// lookups see a load change within about 100 ms of wall time.
	DefaultLoadShareInterval = 50 * time.Millisecond
	// MinLoadShareInterval and MaxLoadShareInterval are the server's
	// bounds on a report's interval_ms.
	MinLoadShareInterval = 10 * time.Millisecond
	MaxLoadShareInterval = time.Minute
	// MaxPickerIDBytes is the server's bound on a picker id.
	MaxPickerIDBytes = 128
	// loadShareWarnEvery bounds the warnings of a failing reporter.
	loadShareWarnEvery = time.Minute
	// loadShareStopTimeout bounds the last, empty report Stop sends (and
	// so Stop) when the interval is longer: the last report only saves
	// the other pickers the wait for expiry, and a gateway told to stop
	// must stop within its grace period even with a hung node.
	loadShareStopTimeout = time.Second
)

// ReportPickerLoad sends one picker's load report to one node (round
// robin, skipping nodes whose lookups failed recently) in a single
// attempt bounded by ctx: a report is superseded by the next one, so it
// is never retried. A node that does not answer (UNAVAILABLE,
// DEADLINE_EXCEEDED) is skipped for lookups and reports as Config.FailBackoff
// says. Errors are the call's.
func (c *Client) ReportPickerLoad(ctx context.Context, req *pb.ReportPickerLoadRequest) (*pb.ReportPickerLoadResponse, error) {
	return softStateCall(c, func(n *node) (*pb.ReportPickerLoadResponse, error) { return n.ic.ReportPickerLoad(ctx, req) })
}

// LoadReportSender sends a load report; *Client is one.
type LoadReportSender interface {
	ReportPickerLoad(ctx context.Context, req *pb.ReportPickerLoadRequest) (*pb.ReportPickerLoadResponse, error)
}

// LoadShareConfig configures a LoadShare.
type LoadShareConfig struct {
	// PickerID names this picker among those sharing the cluster; lookups
	// made for the picker carry it (LookupRouteRequest.picker_id) so that
	// their others_* leave its own load out. At most MaxPickerIDBytes.
	// "" = DefaultPickerID().
	PickerID string
	// Interval is the time between reports; 0 = DefaultLoadShareInterval
	// (50 ms), else MinLoadShareInterval to MaxLoadShareInterval. The
	// nodes drop the picker's load 2 intervals after its last report.
	Interval time.Duration
	// Load, when set, is what each report carries in place of the
	// Picker's InFlight: a gateway that pushes its picks leaves out the
	// load of picks not pushed yet, so that no node holds a pick's load
	// before the pick (contract §5.12). It must not block.
	Load func() []*pb.PickerReplicaLoad
	// Logger receives a warning when reports fail, at most once a
	// minute; nil = slog.Default().
	Logger *slog.Logger
	// Manual starts no goroutine: the caller sends the reports, one at a
	// time, with BeginReport and EndReport, at its own ticks and after
	// anything that may ask for one (a simulation, on its virtual
	// clock). The sender is then not called and may be nil.
	Manual bool
	// Now is the clock of the hold of Carried's reports (carriedHoldMax);
	// nil = time.Now. A Manual caller passes its virtual clock.
	Now func() time.Time
}

// DefaultPickerID returns a picker id unique to this process:
// hostname-pid-random (8 hex digits), cut to MaxPickerIDBytes.
func DefaultPickerID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "picker"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	id := fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	if len(id) > MaxPickerIDBytes {
		id = id[len(id)-MaxPickerIDBytes:]
	}
	return id
}

// pickerIDProblem is the node's objection to id as a picker_id (contract
// §9.2: no control or invisible format characters, not blank), "" when
// there is none.
func pickerIDProblem(id string) string {
	var fe *pickerload.FieldError
	if errors.As((&pickerload.Report{PickerID: id, Sequence: 1}).Validate(), &fe) {
		return fe.Msg
	}
	return ""
}

// LoadShareStats are a LoadShare's counters.
type LoadShareStats struct {
	// Sent counts reports a node accepted (or answered superseded);
	// Failed counts reports that failed or timed out (dropped: the next
	// report replaces them).
	Sent, Failed uint64
	// Held counts the ticks and kicks whose report waited for a carried
	// report's push (LoadShare.Carried): sent once it is answered.
	Held uint64
	// Superseded counts the sent reports a node answered superseded: it
	// holds a report of this picker id with a higher sequence, so another
	// live picker reports under the same id (or this host's clock stepped
	// back across a restart), and the cluster does not see this picker's
	// load. Warned about, at most once a minute.
	Superseded uint64
}

// LoadShare reports a Picker's in-flight load (Picker.InFlight) to the
// cluster every interval (contract §5.11), so that the other pickers'
// lookups see it in ReplicaLoad.others_*. It fails open: a report that
// fails or takes longer than the interval is dropped and the next one
// replaces it; nothing of it ever blocks or fails a request. Reports go
// out from one goroutine, one at a time, each bounded by the interval.
type LoadShare struct {
	p    *Picker
	to   LoadReportSender
	cfg  LoadShareConfig
	log  *slog.Logger
	seq  atomic.Uint64 // the last report's sequence (Report takes them too)
	stop chan struct{}
	done chan struct{}
	kick chan struct{} // Kick: report now
	once sync.Once

	// mu orders the reports: a report's sequence is taken with its load
	// read, so a newer sequence never carries an older load.
	mu      sync.Mutex
	settled []uint64 // turns for the next report (Settle)
	// open: a report is in flight (BeginReport to EndReport); want: one
	// was asked for and has not begun.
	open, want bool
	// carried counts the reports handed to pushes (Carried) whose push is
	// not answered yet, since carriedAt: the reports of the ticker and
	// the kicks wait for them (Answered).
	carried   int
	carriedAt time.Time

	sent, failed, superseded, held atomic.Uint64
	// carriedSeq is the highest sequence handed to a push (Carried): a
	// report answered superseded below it was overtaken by this picker's
	// own carried report, not by another picker under its id.
	carriedSeq        atomic.Uint64
	warnAt, dupWarnAt time.Time
}

// StartLoadShare starts reporting p's load through to. Errors name the
// field of cfg at fault and its bound.
func StartLoadShare(p *Picker, to LoadReportSender, cfg LoadShareConfig) (*LoadShare, error) {
	if p == nil || (to == nil && !cfg.Manual) {
		return nil, errors.New("client: StartLoadShare needs a Picker and a sender")
	}
	if cfg.PickerID == "" {
		cfg.PickerID = DefaultPickerID()
	}
	switch {
	case len(cfg.PickerID) > MaxPickerIDBytes:
		return nil, fmt.Errorf("client: picker id: %d bytes, over the limit of %d", len(cfg.PickerID), MaxPickerIDBytes)
	case !utf8.ValidString(cfg.PickerID):
		return nil, errors.New("client: picker id: not valid UTF-8")
	case pickerIDProblem(cfg.PickerID) != "":
		// The node would refuse every report: refused here, at start.
		return nil, fmt.Errorf("client: picker id %q: %s", cfg.PickerID, pickerIDProblem(cfg.PickerID))
	case cfg.Interval == 0:
		cfg.Interval = DefaultLoadShareInterval
	case cfg.Interval < MinLoadShareInterval || cfg.Interval > MaxLoadShareInterval:
		return nil, fmt.Errorf("client: load share interval %v: want %v to %v", cfg.Interval, MinLoadShareInterval, MaxLoadShareInterval)
	}
	s := &LoadShare{p: p, to: to, cfg: cfg, log: cfg.Logger, stop: make(chan struct{}), done: make(chan struct{}), kick: make(chan struct{}, 1)}
	// Counting from the clock keeps a picker restarted under the same id
	// ahead of its old reports.
	s.seq.Store(uint64(time.Now().UnixNano()))
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.cfg.Now == nil {
		s.cfg.Now = time.Now
	}
	if cfg.Manual {
		close(s.done)
		return s, nil
	}
	go s.run()
	return s, nil
}

// BeginReport is the next report at a tick or a kick, nil when there is
// none to send now: one report is in flight at a time (nil until
// EndReport), and a report is sent only when asked for (asked: the
// caller's tick or kick; else a Kick, Settle or Answered since the last
// report), and the asks made while one is in flight make one report
// after it. It carries the
// turns queued (Settle) and the load read as it begins. While the push of
// a Carried report is unanswered it is held: nil, the turns stay queued,
// and Answered asks again. The reporting goroutine calls it at each tick
// and kick; a Manual caller at its ticks (asked) and after anything that
// may kick (not asked). BeginReport and EndReport are for one goroutine at
// a time; Kick, Settle, Carried and Answered may be called from any.
func (s *LoadShare) BeginReport(asked bool) *pb.ReportPickerLoadRequest {
	select {
	case <-s.kick:
		asked = true
	default:
	}
	s.mu.Lock()
	s.want = s.want || asked
	if s.open || !s.want {
		s.mu.Unlock()
		return nil
	}
	s.want = false
	s.mu.Unlock()
	r := s.next(false)
	if r != nil {
		s.mu.Lock()
		s.open = true
		s.mu.Unlock()
	}
	return r
}

// EndReport ends report req with the node's answer (resp, err): counted,
// warned about at most once a minute when it failed or another picker
// holds this one's id; context.Canceled is a report cut by Stop, not a
// failure.
func (s *LoadShare) EndReport(req *pb.ReportPickerLoadRequest, resp *pb.ReportPickerLoadResponse, err error) {
	s.mu.Lock()
	s.open = false
	s.mu.Unlock()
	if err == nil {
		s.sent.Add(1)
		if resp.GetSuperseded() && req.Sequence > s.carriedSeq.Load() {
			// One process's sequences only increase: the node holds a
			// higher one from another picker under the same id (below a
			// carried report's sequence it is that report, which the
			// push delivered first).
			s.superseded.Add(1)
			if now := time.Now(); now.Sub(s.dupWarnAt) >= loadShareWarnEvery {
				s.dupWarnAt = now
				s.log.Warn("picker load report superseded: another picker reports under the same picker_id (give each gateway its own --picker-id, or leave it empty), so the cluster does not see this one's load",
					"picker_id", s.cfg.PickerID, "sequence", req.Sequence, "superseded_so_far", s.superseded.Load())
			}
		}
		return
	}
	if errors.Is(err, context.Canceled) {
		return // cancelled by Stop: superseded by the last report, not a failure
	}
	s.failed.Add(1)
	if now := time.Now(); now.Sub(s.warnAt) >= loadShareWarnEvery {
		s.warnAt = now
		s.log.Warn("picker load report failed; the other pickers see this one's load only once a report succeeds (requests are unaffected)",
			"picker_id", s.cfg.PickerID, "err", err, "failed_so_far", s.failed.Load())
	}
}

// PickerID is the id the reports carry; set it as the picker_id of the
// picker's lookups.
func (s *LoadShare) PickerID() string { return s.cfg.PickerID }

// Interval is the time between reports.
func (s *LoadShare) Interval() time.Duration { return s.cfg.Interval }

// Kick asks for a report now, besides the periodic ones: a gateway kicks
// at each pick, so the other pickers see its load delta as it happens
// (contract §5.11), not at the next tick. It never blocks; kicks made
// while a report is in flight make one report after it.
func (s *LoadShare) Kick() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Settle queues the end of a turn the picker's lookup took (contract
// §5.13: LookupRouteResponse.turn) for the next report, and asks for it
// now: the report then carries the load of the request the turn decided.
// It never blocks. A settle lost with a failed report costs the other
// pickers at most the node's turn wait, once; past maxQueuedSettles
// queued, the oldest is dropped.
func (s *LoadShare) Settle(turn uint64) {
	if turn == 0 {
		return
	}
	s.mu.Lock()
	if len(s.settled) >= maxQueuedSettles {
		s.settled = s.settled[1:]
	}
	s.settled = append(s.settled, turn)
	s.mu.Unlock()
	s.Kick()
}

// maxQueuedSettles bounds the turns waiting for a report (the node's
// limit per report, api.MaxSettledTurns).
const maxQueuedSettles = 1024

// Stats returns the counters.
func (s *LoadShare) Stats() LoadShareStats {
	return LoadShareStats{Sent: s.sent.Load(), Failed: s.failed.Load(), Superseded: s.superseded.Load(), Held: s.held.Load()}
}

// Stop ends the reports: it cancels the report in flight (the last one
// supersedes it), sends one last, empty report (so the other pickers stop
// counting this one's load at once rather than at expiry), bounded by the
// interval and by loadShareStopTimeout (1 s), and returns once the
// goroutine ended. Idempotent.
func (s *LoadShare) Stop() {
	s.once.Do(func() { close(s.stop) })
	<-s.done
}

func (s *LoadShare) run() {
	defer close(s.done)
	// stopped ends the report in flight when Stop is called, so a node
	// that holds a report for its whole interval never delays Stop.
	stopped, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-stopped.Done():
		}
	}()
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	s.report(stopped, s.cfg.Interval, s.BeginReport(true))
	for {
		select {
		case <-s.stop:
			s.report(context.Background(), min(s.cfg.Interval, loadShareStopTimeout), s.next(true))
			return
		case <-t.C:
			if stopped.Err() != nil {
				continue // Stop was called: the case above ends the loop
			}
			s.report(stopped, s.cfg.Interval, s.BeginReport(true))
		case <-s.kick:
			if stopped.Err() != nil {
				continue
			}
			s.report(stopped, s.cfg.Interval, s.BeginReport(true))
		}
	}
}

// load is the load a report carries: Config.Load's, else the Picker's.
func (s *LoadShare) load() []*pb.PickerReplicaLoad {
	if s.cfg.Load != nil {
		return s.cfg.Load()
	}
	return s.p.InFlight()
}

// Carried returns the picker's next load report, of loads and settling
// turns (at most maxQueuedSettles, the node's limit), for a picks push to
// carry (SharePicksRequest.load, contract §5.13): its sequence is the
// next of this LoadShare's, so the nodes order it among the periodic
// reports. Until Answered is called (or carriedHoldMax passed), the
// ticker's and the kicks' reports wait: one sent meanwhile would carry a
// newer sequence without the push's picks' load, and a node would hold it
// in place of the carried one. nil once Stop was called. It never blocks
// on the network and sends nothing.
func (s *LoadShare) Carried(turns []uint64, loads []*pb.PickerReplicaLoad) *pb.ReportPickerLoadRequest {
	select {
	case <-s.stop:
		return nil
	default:
	}
	if len(turns) > maxQueuedSettles {
		turns = turns[len(turns)-maxQueuedSettles:]
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.carried == 0 {
		s.carriedAt = s.cfg.Now()
	}
	s.carried++
	r := s.newReport(turns, loads)
	s.carriedSeq.Store(r.Sequence)
	return r
}

// Answered ends the wait of one Carried report: the push that carried it
// was answered, or failed. It asks for a report now, which carries the
// load as the periodic reports count it from then on.
func (s *LoadShare) Answered() {
	s.mu.Lock()
	s.carried = max(0, s.carried-1)
	s.mu.Unlock()
	s.Kick()
}

// carriedHoldMax bounds the wait of the periodic reports for a carried
// report's push (Answered): past it, they go out again, so a push whose
// answer is never reported cannot silence the picker's load.
const carriedHoldMax = time.Second

// newReport is the next report, under mu.
func (s *LoadShare) newReport(turns []uint64, loads []*pb.PickerReplicaLoad) *pb.ReportPickerLoadRequest {
	return &pb.ReportPickerLoadRequest{PickerId: s.cfg.PickerID, Sequence: s.seq.Add(1),
		IntervalMs: uint32(s.cfg.Interval.Milliseconds()), Loads: loads, SettledTurns: turns}
}

// next is the ticker's or a kick's report, with the queued turns and the
// load read now; nil while a carried report's push is unanswered (the
// turns stay queued). last is Stop's: empty, and never held back.
func (s *LoadShare) next(last bool) *pb.ReportPickerLoadRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !last && s.carried > 0 && s.cfg.Now().Sub(s.carriedAt) < carriedHoldMax {
		s.held.Add(1)
		return nil
	}
	turns := s.settled
	s.settled = nil
	var loads []*pb.PickerReplicaLoad
	if !last {
		loads = s.load()
	}
	return s.newReport(turns, loads)
}

// report sends req (nil: nothing), bounded by parent and by limit.
func (s *LoadShare) report(parent context.Context, limit time.Duration, req *pb.ReportPickerLoadRequest) {
	if req == nil {
		return
	}
	ctx, cancel := context.WithTimeout(parent, limit)
	resp, err := s.to.ReportPickerLoad(ctx, req)
	cancel()
	if err != nil && parent.Err() != nil {
		err = context.Canceled
	}
	s.EndReport(req, resp, err)
}
