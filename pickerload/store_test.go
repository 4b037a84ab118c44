package pickerload_test

import (
	"errors"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/pickerload"
)

// clock is a hand-moved clock for expiry.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newStore(max int) (*pickerload.Store, *clock) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	return pickerload.New(pickerload.Config{MaxEntries: max, Now: c.Now}), c
}

func load(id string, pre uint32, tok uint64, run uint32) pickerload.ReplicaLoad {
	return pickerload.ReplicaLoad{ReplicaID: id, PrefillingRequests: pre, PrefillTokens: tok, RunningRequests: run}
}

func put(t *testing.T, s *pickerload.Store, r pickerload.Report) pickerload.Outcome {
	t.Helper()
	o, err := s.Put(r)
	if err != nil {
		t.Fatalf("put %s seq %d: %v", r.PickerID, r.Sequence, err)
	}
	return o
}

// Three pickers on two replicas: each replica's sum is, by hand, the sum
// of the other two pickers' numbers, and the asker's own is left out.
func TestOthers_SumsEveryPickerButTheAsker(t *testing.T) {
	s, _ := newStore(0)
	put(t, s, pickerload.Report{PickerID: "g1", Sequence: 1, Loads: []pickerload.ReplicaLoad{load("r1", 2, 3000, 5), load("r2", 0, 0, 1)}})
	put(t, s, pickerload.Report{PickerID: "g2", Sequence: 1, Loads: []pickerload.ReplicaLoad{load("r1", 1, 500, 2)}})
	put(t, s, pickerload.Report{PickerID: "g3", Sequence: 7, Loads: []pickerload.ReplicaLoad{load("r1", 4, 100, 4), load("r2", 3, 9000, 3)}})
	v := s.At()
	for _, c := range []struct {
		asker, replica string
		want           pickerload.Sum
	}{
		// r1: g1 (2, 3000, 5) + g2 (1, 500, 2) + g3 (4, 100, 4).
		{"", "r1", pickerload.Sum{PrefillingRequests: 7, PrefillTokens: 3600, RunningRequests: 11, Pickers: 3}},
		{"g1", "r1", pickerload.Sum{PrefillingRequests: 5, PrefillTokens: 600, RunningRequests: 6, Pickers: 2}},
		{"g2", "r1", pickerload.Sum{PrefillingRequests: 6, PrefillTokens: 3100, RunningRequests: 9, Pickers: 2}},
		{"g3", "r1", pickerload.Sum{PrefillingRequests: 3, PrefillTokens: 3500, RunningRequests: 7, Pickers: 2}},
		// r2: g1 (0, 0, 1) + g3 (3, 9000, 3); g2 has none there.
		{"g2", "r2", pickerload.Sum{PrefillingRequests: 3, PrefillTokens: 9000, RunningRequests: 4, Pickers: 2}},
		{"g3", "r2", pickerload.Sum{PrefillingRequests: 0, PrefillTokens: 0, RunningRequests: 1, Pickers: 1}},
		// An asker nobody knows gets everyone's.
		{"g9", "r2", pickerload.Sum{PrefillingRequests: 3, PrefillTokens: 9000, RunningRequests: 4, Pickers: 2}},
		{"", "r-none", pickerload.Sum{}},
	} {
		if got := v.Others(c.asker, c.replica); got != c.want {
			t.Errorf("Others(%q, %q) = %+v, want %+v", c.asker, c.replica, got, c.want)
		}
	}
	if st := s.Stats(); st.Entries != 5 || st.Pickers != 3 || st.Stored != 3 {
		t.Errorf("stats %+v, want 5 entries of 3 pickers, 3 stored", st)
	}
}

// A report replaces the picker's whole previous one: a replica it leaves
// out has no load from it any more.
func TestPut_ReplacesTheWholeReport(t *testing.T) {
	s, _ := newStore(0)
	put(t, s, pickerload.Report{PickerID: "g1", Sequence: 1, Loads: []pickerload.ReplicaLoad{load("r1", 2, 20, 2), load("r2", 1, 10, 1)}})
	put(t, s, pickerload.Report{PickerID: "g1", Sequence: 2, Loads: []pickerload.ReplicaLoad{load("r2", 5, 50, 6)}})
	v := s.At()
	if got := v.Others("", "r1"); got != (pickerload.Sum{}) {
		t.Errorf("r1 after a report without it: %+v, want nothing", got)
	}
	if got := v.Others("", "r2"); got != (pickerload.Sum{PrefillingRequests: 5, PrefillTokens: 50, RunningRequests: 6, Pickers: 1}) {
		t.Errorf("r2: %+v, want the second report's (5, 50, 6)", got)
	}
	if st := s.Stats(); st.Entries != 1 {
		t.Errorf("entries %d, want 1", st.Entries)
	}
}

// Reports of one picker are ordered by sequence: an older or repeated one
// that arrives after a newer one changes nothing.
func TestPut_OlderSequenceIgnored(t *testing.T) {
	s, _ := newStore(0)
	put(t, s, pickerload.Report{PickerID: "g1", Sequence: 10, Loads: []pickerload.ReplicaLoad{load("r1", 1, 100, 1)}})
	for _, seq := range []uint64{9, 10} {
		if o := put(t, s, pickerload.Report{PickerID: "g1", Sequence: seq, Loads: []pickerload.ReplicaLoad{load("r1", 8, 800, 8)}}); o != pickerload.Ignored {
			t.Errorf("sequence %d after 10: outcome %v, want Ignored", seq, o)
		}
	}
	if got := s.At().Others("", "r1"); got.PrefillTokens != 100 {
		t.Errorf("r1 tokens %d, want 100 (sequence 10's)", got.PrefillTokens)
	}
	if o := put(t, s, pickerload.Report{PickerID: "g1", Sequence: 11, Loads: []pickerload.ReplicaLoad{load("r1", 2, 200, 2)}}); o != pickerload.Stored {
		t.Fatalf("sequence 11: %v, want Stored", o)
	}
	if got := s.At().Others("", "r1"); got.PrefillTokens != 200 {
		t.Errorf("r1 tokens %d, want 200 (sequence 11's)", got.PrefillTokens)
	}
	if st := s.Stats(); st.Ignored != 2 || st.Stored != 2 {
		t.Errorf("stats %+v, want 2 ignored, 2 stored", st)
	}
}

// A report is held for 2 of its picker's intervals after it arrived:
// visible just before, gone at that instant, and swept (counted expired)
// then. A picker restarted under the same id may start its sequence over
// once its old report expired.
func TestExpiry_AfterTwoIntervals(t *testing.T) {
	s, c := newStore(0)
	put(t, s, pickerload.Report{PickerID: "g1", Sequence: 5, Interval: 40 * time.Millisecond, Loads: []pickerload.ReplicaLoad{load("r1", 1, 10, 1)}})
	put(t, s, pickerload.Report{PickerID: "g2", Sequence: 1, Loads: []pickerload.ReplicaLoad{load("r1", 2, 20, 2)}}) // default 50 ms: 100 ms
	c.Add(79 * time.Millisecond)
	if got := s.At().Others("", "r1"); got.Pickers != 2 || got.PrefillTokens != 30 {
		t.Fatalf("at 79 ms: %+v, want both pickers (30 tokens)", got)
	}
	c.Add(time.Millisecond) // 80 ms = 2 × 40 ms: g1 expires
	if got := s.At().Others("", "r1"); got != (pickerload.Sum{PrefillingRequests: 2, PrefillTokens: 20, RunningRequests: 2, Pickers: 1}) {
		t.Fatalf("at 80 ms: %+v, want g2's only", got)
	}
	if n := s.Sweep(); n != 1 {
		t.Errorf("sweep at 80 ms dropped %d, want 1 (g1)", n)
	}
	if ps := s.Pickers(); len(ps) != 1 || ps[0].ID != "g2" || ps[0].Age != 80*time.Millisecond {
		t.Errorf("pickers %+v, want g2 aged 80ms", ps)
	}
	// g1 restarts and counts from 1 again: accepted, its old report gone.
	if o := put(t, s, pickerload.Report{PickerID: "g1", Sequence: 1, Loads: []pickerload.ReplicaLoad{load("r1", 3, 30, 3)}}); o != pickerload.Stored {
		t.Fatalf("restarted picker's sequence 1: %v, want Stored", o)
	}
	c.Add(20 * time.Millisecond) // 100 ms: g2 expires; g1 arrived at 80 ms
	if got := s.At().Others("g1", "r1"); got != (pickerload.Sum{}) {
		t.Errorf("at 100 ms, others of g1: %+v, want none (g2 expired)", got)
	}
	if st := s.Stats(); st.Expired != 1 || st.Pickers != 2 {
		t.Errorf("stats %+v: want 1 expired so far and 2 pickers held until the next sweep", st)
	}
	s.Sweep()
	if st := s.Stats(); st.Expired != 2 || st.Pickers != 1 || st.Entries != 1 {
		t.Errorf("stats after sweep %+v, want 2 expired, 1 picker, 1 entry", st)
	}
}

// The store holds at most MaxEntries (picker, replica) entries: a report
// past it is refused with an error naming loads and the limit, and what
// the store held stays. A picker may still replace its own report within
// the bound, and room freed by expiry is usable.
func TestPut_BoundRefusesAndKeepsWhatItHeld(t *testing.T) {
	s, c := newStore(4)
	put(t, s, pickerload.Report{PickerID: "g1", Sequence: 1, Loads: []pickerload.ReplicaLoad{load("r1", 1, 1, 1), load("r2", 1, 1, 1), load("r3", 1, 1, 1)}})
	_, err := s.Put(pickerload.Report{PickerID: "g2", Sequence: 1, Interval: time.Second, Loads: []pickerload.ReplicaLoad{load("r1", 9, 9, 9), load("r2", 9, 9, 9)}})
	if !errors.Is(err, pickerload.ErrFull) || !strings.Contains(err.Error(), "loads") || !strings.Contains(err.Error(), "limit of 4") || !strings.Contains(err.Error(), "make 5") {
		t.Fatalf("over the bound: %v, want ErrFull naming loads, 5 entries and the limit of 4", err)
	}
	if got := s.At().Others("", "r1"); got != (pickerload.Sum{PrefillingRequests: 1, PrefillTokens: 1, RunningRequests: 1, Pickers: 1}) {
		t.Errorf("r1 after the refusal: %+v, want g1's alone", got)
	}
	// g1 replacing its 3 entries by 4 fits (4 ≤ 4); g2's empty report
	// (one entry) then does not.
	put(t, s, pickerload.Report{PickerID: "g1", Sequence: 2, Loads: []pickerload.ReplicaLoad{load("r1", 1, 1, 1), load("r2", 1, 1, 1), load("r3", 1, 1, 1), load("r4", 1, 1, 1)}})
	if _, err := s.Put(pickerload.Report{PickerID: "g2", Sequence: 1}); !errors.Is(err, pickerload.ErrFull) {
		t.Fatalf("an empty report past the bound: %v, want ErrFull", err)
	}
	c.Add(100 * time.Millisecond) // g1 expires
	put(t, s, pickerload.Report{PickerID: "g2", Sequence: 2, Loads: []pickerload.ReplicaLoad{load("r1", 9, 9, 9), load("r2", 9, 9, 9)}})
	// One report larger than the whole bound is refused before its
	// replicas are checked.
	big := pickerload.Report{PickerID: "g3", Sequence: 1}
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		big.Loads = append(big.Loads, load(id, 1, 1, 1))
	}
	if _, err := s.Put(big); !errors.Is(err, pickerload.ErrFull) || !strings.Contains(err.Error(), "5 replicas in one report, over the node's limit of 4") {
		t.Fatalf("a report over the whole bound: %v", err)
	}
	if st := s.Stats(); st.Refused != 3 || st.Entries != 2 || st.Expired != 1 {
		t.Errorf("stats %+v, want 3 refused, 2 entries, 1 expired", st)
	}
}

// Every rule of a report is refused with the wire name of the field.
func TestValidate_NamesTheField(t *testing.T) {
	long := strings.Repeat("p", pickerload.MaxPickerIDBytes+1)
	ok := pickerload.Report{PickerID: "g", Sequence: 1}
	for _, c := range []struct {
		name string
		r    pickerload.Report
		want string
	}{
		{"no picker id", pickerload.Report{Sequence: 1}, "picker_id: required"},
		{"long picker id", pickerload.Report{PickerID: long, Sequence: 1}, "picker_id: 129 bytes, over the limit of 128"},
		{"bad utf-8", pickerload.Report{PickerID: "g\xff", Sequence: 1}, "picker_id: not valid UTF-8"},
		{"no sequence", pickerload.Report{PickerID: "g"}, "sequence: required"},
		{"interval low", pickerload.Report{PickerID: "g", Sequence: 1, Interval: 5 * time.Millisecond}, "interval_ms: 5: want 0 (the default, 50) or 10 to 60000"},
		{"interval high", pickerload.Report{PickerID: "g", Sequence: 1, Interval: 2 * time.Minute}, "interval_ms: 120000"},
		{"no replica id", pickerload.Report{PickerID: "g", Sequence: 1, Loads: []pickerload.ReplicaLoad{load("r1", 0, 0, 0), {}}}, "loads[1].replica_id: required"},
		{"long replica id", pickerload.Report{PickerID: "g", Sequence: 1, Loads: []pickerload.ReplicaLoad{load(strings.Repeat("r", 257), 0, 0, 0)}}, "loads[0].replica_id: 257 bytes, over the limit of 256"},
		{"repeated replica", pickerload.Report{PickerID: "g", Sequence: 1, Loads: []pickerload.ReplicaLoad{load("a", 0, 0, 0), load("b", 0, 0, 0), load("a", 0, 0, 0)}}, `loads[2].replica_id: "a" repeats loads[0]`},
	} {
		s, _ := newStore(0)
		_, err := s.Put(c.r)
		var fe *pickerload.FieldError
		if !errors.As(err, &fe) || !errors.Is(err, pickerload.ErrInvalid) || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s: %v, want a FieldError starting %q", c.name, err, c.want)
		}
	}
	if err := ok.Validate(); err != nil {
		t.Errorf("a minimal report: %v", err)
	}
	// A repeat among many replicas (the map path) is found too.
	many := pickerload.Report{PickerID: "g", Sequence: 1}
	for _, id := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "c"} {
		many.Loads = append(many.Loads, load(id, 0, 0, 0))
	}
	if err := many.Validate(); err == nil || !strings.HasPrefix(err.Error(), `loads[9].replica_id: "c" repeats loads[2]`) {
		t.Errorf("repeat among 10: %v", err)
	}
}

// Readers run while writers replace reports: every sum a reader sees is
// one some set of whole reports makes (here every report carries the
// same numbers, so a sum is a multiple of them), never a torn one.
func TestOthers_ConcurrentWithPuts(t *testing.T) {
	s, _ := newStore(0)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := uint64(1); ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := s.Put(pickerload.Report{PickerID: string(rune('a' + g)), Sequence: seq, Loads: []pickerload.ReplicaLoad{load("r1", 1, 100, 2)}}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for range 2000 {
		got := s.At().Others("", "r1")
		n := got.Pickers
		if got != (pickerload.Sum{PrefillingRequests: n, PrefillTokens: 100 * uint64(n), RunningRequests: 2 * n, Pickers: n}) || n > 4 {
			t.Fatalf("torn sum %+v", got)
		}
	}
	close(stop)
	wg.Wait()
}

// Many pickers on one replica expiring together (a fleet of gateways cut
// off at once) are swept in one pass over the replica, not one copy of
// its contributions per picker: that was quadratic, 3 minutes under the
// store's lock for 65,536 pickers, during which every report and status
// call waited. By hand: the sweep publishes r1's one survivor in one new
// slice, so it allocates a handful of objects, where a copy per expired
// picker allocates one per picker (2,000 here).
func TestSweep_ManyPickersOnOneReplicaInOnePass(t *testing.T) {
	const pickers = 2000
	s, c := newStore(0)
	for i := range pickers {
		put(t, s, pickerload.Report{PickerID: "g" + strconv.Itoa(i), Sequence: 1, Loads: []pickerload.ReplicaLoad{load("r1", 1, 1, 1)}})
	}
	c.Add(60 * time.Millisecond)
	put(t, s, pickerload.Report{PickerID: "survivor", Sequence: 1, Loads: []pickerload.ReplicaLoad{load("r1", 2, 2, 2)}})
	c.Add(40 * time.Millisecond) // the 2,000 reports are 100 ms old: expired
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	n := s.Sweep()
	runtime.ReadMemStats(&after)
	if n != pickers {
		t.Fatalf("swept %d, want %d", n, pickers)
	}
	if got := s.At().Others("", "r1"); got != (pickerload.Sum{PrefillingRequests: 2, PrefillTokens: 2, RunningRequests: 2, Pickers: 1}) {
		t.Errorf("r1 after the sweep: %+v, want the survivor's alone", got)
	}
	if st := s.Stats(); st.Entries != 1 || st.Pickers != 1 {
		t.Errorf("stats %+v, want 1 entry of 1 picker", st)
	}
	if allocs := after.Mallocs - before.Mallocs; allocs > 100 {
		t.Errorf("the sweep allocated %d objects, want a handful (one pass over r1)", allocs)
	}
}

// Ids follow contract §9.2 as every other id: no control or invisible
// format characters, not blank. A picker id with an escape sequence was
// printed raw by `inference-cache top` (clearing the operator's screen),
// and one with a newline broke its one-line-per-picker view.
func TestValidate_IDsFollowTheIdentifierRules(t *testing.T) {
	for _, c := range []struct {
		name string
		r    pickerload.Report
		want string
	}{
		{"escape in picker id", pickerload.Report{PickerID: "gw\x1b[2J", Sequence: 1}, "picker_id: holds control character U+001B at byte 2"},
		{"newline in picker id", pickerload.Report{PickerID: "gw\nfake line", Sequence: 1}, "picker_id: holds control character U+000A at byte 2"},
		{"zero-width in picker id", pickerload.Report{PickerID: "g\u200bw", Sequence: 1}, "picker_id: holds invisible format character U+200B at byte 1"},
		{"blank picker id", pickerload.Report{PickerID: "   ", Sequence: 1}, "picker_id: blank (only whitespace)"},
		{"bidi in replica id", pickerload.Report{PickerID: "g", Sequence: 1, Loads: []pickerload.ReplicaLoad{load("r1", 0, 0, 0), load("r\u202e2", 0, 0, 0)}}, "loads[1].replica_id: holds invisible format character U+202E at byte 1"},
		{"DEL in replica id", pickerload.Report{PickerID: "g", Sequence: 1, Loads: []pickerload.ReplicaLoad{load("r\x7f", 0, 0, 0)}}, "loads[0].replica_id: holds control character U+007F at byte 1"},
		{"blank replica id", pickerload.Report{PickerID: "g", Sequence: 1, Loads: []pickerload.ReplicaLoad{load(" \t", 0, 0, 0)}}, "loads[0].replica_id: holds control character U+0009 at byte 1"},
		{"spaces replica id", pickerload.Report{PickerID: "g", Sequence: 1, Loads: []pickerload.ReplicaLoad{load("  ", 0, 0, 0)}}, "loads[0].replica_id: blank (only whitespace)"},
	} {
		err := c.r.Validate()
		if !errors.Is(err, pickerload.ErrInvalid) || err.Error() != c.want {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	// Printable ids of any script pass.
	ok := pickerload.Report{PickerID: "gw-东京-1 a", Sequence: 1, Loads: []pickerload.ReplicaLoad{load("vllm-ünïcode-0", 0, 0, 0)}}
	if err := ok.Validate(); err != nil {
		t.Errorf("printable ids: %v", err)
	}
}

// A report passed on by a peer carries its age since it first reached
// the cluster: its expiry is dated from then, so a dead picker's load
// leaves a slow peer as soon as it leaves the node the picker reported
// to; a report older than its expiry is ignored.
func TestPut_AgeDatesTheExpiryFromTheFirstArrival(t *testing.T) {
	s, c := newStore(0)
	// 50 ms interval: expiry 100 ms after arrival; it arrived 70 ms ago.
	if o := put(t, s, pickerload.Report{PickerID: "g1", Sequence: 1, Age: 70 * time.Millisecond, Loads: []pickerload.ReplicaLoad{load("r1", 1, 10, 1)}}); o != pickerload.Stored {
		t.Fatalf("put: %v, want Stored", o)
	}
	if ps := s.Pickers(); len(ps) != 1 || ps[0].Age != 70*time.Millisecond {
		t.Fatalf("pickers %+v, want g1 aged 70ms", ps)
	}
	c.Add(29 * time.Millisecond) // 99 ms since arrival
	if got := s.At().Others("", "r1"); got.Pickers != 1 {
		t.Fatalf("99 ms after the first arrival: %+v, want g1 held", got)
	}
	c.Add(time.Millisecond) // 100 ms: expired, though this store got it 30 ms ago
	if got := s.At().Others("", "r1"); got != (pickerload.Sum{}) {
		t.Fatalf("100 ms after the first arrival: %+v, want nothing", got)
	}
	// Older than its expiry on arrival: ignored, nothing held.
	if o := put(t, s, pickerload.Report{PickerID: "g2", Sequence: 1, Age: 100 * time.Millisecond, Loads: []pickerload.ReplicaLoad{load("r1", 1, 10, 1)}}); o != pickerload.Ignored {
		t.Fatalf("a report already expired on arrival: %v, want Ignored", o)
	}
	if got := s.At().Others("", "r1"); got != (pickerload.Sum{}) {
		t.Errorf("after the expired report: %+v, want nothing", got)
	}
}
