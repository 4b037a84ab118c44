package topview

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// Node is one node's Status as the live view shows it; Err is set
// (and the rest empty) when the node did not answer.
type Node struct {
	Addr        string            `json:"addr"`
	ID          string            `json:"node_id,omitempty"`
	State       string            `json:"state,omitempty"`
	Leader      string            `json:"leader_id,omitempty"`
	Term        uint64            `json:"term,omitempty"`
	Applied     uint64            `json:"applied_index,omitempty"`
	Stale       bool              `json:"stale"`
	StaleReason string            `json:"stale_reason,omitempty"`
	Calls       map[string]uint64 `json:"lookup_route_calls,omitempty"`
	Pickers     []Picker          `json:"pickers,omitempty"`
	Err         string            `json:"error,omitempty"`
	// Cause is the call's error behind Err, for the command's own.
	Cause error `json:"-"`
}

// Picker is one picker's load report as a node holds it (Status
// pickers, contract §5.11).
type Picker struct {
	ID         string `json:"picker_id"`
	Replicas   uint32 `json:"replicas"`
	Prefilling uint64 `json:"prefilling_requests"`
	Tokens     uint64 `json:"prefill_tokens"`
	Running    uint64 `json:"running_requests"`
	AgeMs      uint64 `json:"age_ms"`
}

// pickerLine is one picker as the view shows it: the freshest report of
// it among the nodes, and on how many of the answering nodes it is held
// (every node, once the fan-out reached them).
type pickerLine struct {
	Picker
	nodes int
}

// topPickers is how many pickers the views list one by one, those with
// the most requests in flight; the others are summed on one line, so a
// cluster shared by thousands of pickers keeps the frame a screen and the
// plain line a line.
const topPickers = 20

// pickerRest sums the pickers a view leaves out: how many, and their
// requests before the first token and before done (contract §5.11).
type pickerRest struct {
	pickers             int
	prefilling, running uint64
}

// text is the line that stands for the pickers left out, "" when none is.
func (r pickerRest) text() string {
	if r.pickers == 0 {
		return ""
	}
	return fmt.Sprintf("… and %d more pickers (%d prefilling, %d running)", r.pickers, r.prefilling, r.running)
}

// pickerLines merges the nodes' pickers of s, by picker id, and keeps the
// topPickers with the most requests in flight (running_requests, then
// prefilling_requests, then prefill_tokens, largest first; then picker id),
// in that order; rest sums the others.
func pickerLines(s *Sample) (lines []pickerLine, rest pickerRest, answering int) {
	by := map[string]*pickerLine{}
	for _, n := range s.Nodes {
		if n.Err != "" {
			continue
		}
		answering++
		for _, p := range n.Pickers {
			l := by[p.ID]
			if l == nil {
				l = &pickerLine{Picker: p}
				by[p.ID] = l
			} else if p.AgeMs < l.AgeMs {
				l.Picker = p
			}
			l.nodes++
		}
	}
	for _, l := range by {
		lines = append(lines, *l)
	}
	slices.SortFunc(lines, func(a, b pickerLine) int {
		switch {
		case a.Running != b.Running:
			return cmp.Compare(b.Running, a.Running)
		case a.Prefilling != b.Prefilling:
			return cmp.Compare(b.Prefilling, a.Prefilling)
		case a.Tokens != b.Tokens:
			return cmp.Compare(b.Tokens, a.Tokens)
		}
		return strings.Compare(a.ID, b.ID)
	})
	if len(lines) > topPickers {
		for _, l := range lines[topPickers:] {
			rest.pickers++
			rest.prefilling += l.Prefilling
			rest.running += l.Running
		}
		lines = lines[:topPickers]
	}
	return lines, rest, answering
}

// Sample is one poll of every node, taken at At.
type Sample struct {
	At    time.Time `json:"at"`
	Nodes []Node    `json:"nodes"`
}

// View folds polls into what the live view shows: the lookup rate and
// its reason-code mix since the last line shown, the leader and its last change,
// and how long the cluster had no leader (writes unavailable) around that
// change. Pure: the caller polls and passes each sample with its time.
type View struct {
	// mu guards the view between Run, which folds and prints each poll,
	// and the lines the dev supervisor, proxy and demo traffic set.
	mu sync.Mutex

	prev, cur *Sample
	// base is the sample the rates count from: the poll of the last line
	// printed, so a plain line printed every 10 s covers those 10 s, not
	// the last poll's second (nil before the first poll).
	base *Sample

	leader      string        // leader id in the latest sample ("" = none)
	known       string        // the last leader seen in any sample
	leaderSince time.Time     // when known was first seen
	sinceSeen   bool          // leaderSince is when known took over (a poll before showed another or none)
	lastFrom    string        // the leader before the last change
	noLeaderAt  time.Time     // first sample without a leader (zero while one is seen)
	outage      time.Duration // leaderless time around the last change
	changePoll  time.Duration // the poll interval then: the outage's resolution
	hadChange   bool
	interval    time.Duration

	rate  float64           // lookups per second, all nodes, since base
	mix   map[string]uint64 // lookups by reason code, since base
	rated bool              // rate and mix cover an interval (false at the first poll)

	events []string // recent supervisor lines (dev), newest last
	proxy  string   // the routing proxy's latest line (dev)
	demo   string   // the demo traffic's latest status line (dev)
}

// topEvents is how many supervisor lines the terminal view keeps.
const topEvents = 5

// observe folds sample s into the view.
func (v *View) observe(s Sample) {
	v.prev, v.cur = v.cur, &s
	leader := ""
	for _, n := range s.Nodes {
		if n.Err == "" && n.State == "Leader" {
			leader = n.ID
		}
	}
	if v.prev != nil {
		v.interval = s.At.Sub(v.prev.At)
	}
	switch {
	case leader == "":
		if v.noLeaderAt.IsZero() {
			v.noLeaderAt = s.At
		}
	case leader != v.known:
		if v.known != "" { // the first leader seen is no change
			v.hadChange, v.lastFrom, v.outage, v.changePoll = true, v.known, 0, v.interval
			if !v.noLeaderAt.IsZero() {
				v.outage = s.At.Sub(v.noLeaderAt)
			}
		}
		// A leader in the first poll that any node answered led for who
		// knows how long before it.
		v.sinceSeen = v.prev != nil && slices.ContainsFunc(v.prev.Nodes, func(n Node) bool { return n.Err == "" })
		v.known, v.leaderSince, v.noLeaderAt = leader, s.At, time.Time{}
	default:
		v.noLeaderAt = time.Time{}
	}
	v.leader = leader
	v.rate, v.mix, v.rated = 0, nil, false
	if v.base == nil {
		v.base = &s
		return
	}
	v.rated = true
	dt := s.At.Sub(v.base.At).Seconds()
	before := map[string]map[string]uint64{}
	for _, n := range v.base.Nodes {
		if n.Err == "" {
			before[n.Addr] = n.Calls
		}
	}
	mix := map[string]uint64{}
	var total uint64
	for _, n := range s.Nodes {
		b, ok := before[n.Addr]
		if n.Err != "" || !ok {
			continue
		}
		for code, c := range n.Calls {
			d := c - b[code]
			if c < b[code] { // a restarted node's counters start over from 0
				d = c
			}
			mix[code] += d
			total += d
		}
	}
	if dt > 0 {
		v.rate = float64(total) / dt
	}
	v.mix = mix
}

// Event records a supervisor line for the terminal view (the last 5 are
// shown, wrapped to the terminal's width).
func (v *View) Event(line string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.events = append(v.events, line)
	if len(v.events) > topEvents {
		v.events = v.events[len(v.events)-topEvents:]
	}
}

// SetProxy sets the routing proxy's line (dev), shown under the nodes in
// both the frame and the plain line.
func (v *View) SetProxy(line string) {
	v.mu.Lock()
	v.proxy = line
	v.mu.Unlock()
}

// SetDemo sets the demo traffic's status line (dev), shown in the frame.
func (v *View) SetDemo(line string) {
	v.mu.Lock()
	v.demo = line
	v.mu.Unlock()
}

// Unanswered is the first node's error when no node answered the latest
// poll; nil when one did, or before any poll.
func (v *View) Unanswered() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.cur == nil || slices.ContainsFunc(v.cur.Nodes, func(n Node) bool { return n.Err == "" }) || len(v.cur.Nodes) == 0 {
		return nil
	}
	return v.cur.Nodes[0].Cause
}

// rateText is the lookup rate since the last line shown and its mix,
// "20.0<unit>PREFIX_MATCH 75%, NO_HINT 25%", or, at the first poll, first
// (no interval yet: a rate of 0 would read as no traffic).
func (v *View) rateText(unit, first string) string {
	if !v.rated {
		return first
	}
	return fmt.Sprintf("%.1f%s%s", v.rate, unit, v.mixText())
}

// shown marks the latest poll as the one the next line's rates count
// from: a line printed every 10 s shows the lookups of those 10 s.
func (v *View) shown() {
	if v.cur != nil {
		v.base = v.cur
	}
}

// mixText is the reason-code mix as "PREFIX_MATCH 62%, NO_HINT 38%",
// largest first, or "no lookups".
func (v *View) mixText() string {
	var total uint64
	codes := make([]string, 0, len(v.mix))
	for c, n := range v.mix {
		if n > 0 {
			codes = append(codes, c)
			total += n
		}
	}
	if total == 0 {
		return "no lookups"
	}
	slices.SortFunc(codes, func(a, b string) int {
		if v.mix[a] != v.mix[b] {
			return int(v.mix[b]) - int(v.mix[a])
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(codes))
	for i, c := range codes {
		parts[i] = fmt.Sprintf("%s %.0f%%", c, 100*float64(v.mix[c])/float64(total))
	}
	return strings.Join(parts, ", ")
}

// leaderText says who leads, since when when a poll saw it take over (a
// leader already there at the first poll has no "since": top cannot know;
// with no node answering it cannot tell whether one leads), and the last
// change with how long writes were unavailable (measured
// between polls, so ± one interval).
func (v *View) leaderText() string {
	var b strings.Builder
	switch {
	case v.cur != nil && !slices.ContainsFunc(v.cur.Nodes, func(n Node) bool { return n.Err == "" }):
		b.WriteString("no node answered") // a leader may well be there
	case v.leader == "":
		b.WriteString("no leader")
		if !v.noLeaderAt.IsZero() && v.cur != nil {
			fmt.Fprintf(&b, " for %.1f s: writes unavailable", v.cur.At.Sub(v.noLeaderAt).Seconds())
		}
	case v.sinceSeen:
		fmt.Fprintf(&b, "leader %s since %s", v.leader, v.leaderSince.Format("15:04:05"))
	default:
		fmt.Fprintf(&b, "leader %s", v.leader)
	}
	if v.hadChange {
		if v.outage > 0 {
			fmt.Fprintf(&b, "; last change %s → %s at %s, writes unavailable ≈ %.1f s (± %.1f s poll)", v.lastFrom, v.known, v.leaderSince.Format("15:04:05"), v.outage.Seconds(), v.changePoll.Seconds())
		} else {
			fmt.Fprintf(&b, "; last change %s → %s at %s, within one %.1f s poll", v.lastFrom, v.known, v.leaderSince.Format("15:04:05"), v.changePoll.Seconds())
		}
	}
	return b.String()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// writeLine prints the view as one plain line (logs, CI, pipes).
func (v *View) writeLine(w io.Writer) error {
	if v.cur == nil {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "top %s |", v.cur.At.Format("15:04:05"))
	for _, n := range v.cur.Nodes {
		if n.Err != "" {
			fmt.Fprintf(&b, " %s down |", n.Addr)
			continue
		}
		stale := ""
		if n.Stale {
			stale = " STALE"
		}
		fmt.Fprintf(&b, " %s %s t%d applied %d%s |", n.ID, n.State, n.Term, n.Applied, stale)
	}
	fmt.Fprintf(&b, " %s | %s", v.rateText(" lookups/s: ", "lookups counted from this poll on"), v.leaderText())
	if ps, rest, _ := pickerLines(v.cur); len(ps) > 0 {
		b.WriteString(" | pickers:")
		for i, p := range ps {
			if i > 0 {
				b.WriteString(";")
			}
			fmt.Fprintf(&b, " %s %d prefilling, %d running on %d replicas (%d ms ago)", p.ID, p.Prefilling, p.Running, p.Replicas, p.AgeMs)
		}
		if t := rest.text(); t != "" {
			b.WriteString("; " + t)
		}
	}
	b.WriteString("\n")
	if v.proxy != "" {
		b.WriteString(v.proxy + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeFrame prints the view as the terminal table, each line cut to
// width characters (0 = not cut) so none wraps, except the supervisor's
// events, which are wrapped to that width; it returns the number of
// lines written so the next frame can move back over exactly them.
func (v *View) writeFrame(w io.Writer, every time.Duration, width int) (int, error) {
	var b strings.Builder
	if v.cur != nil {
		fmt.Fprintf(&b, "inference-cache top  %s  (every %v; Ctrl-C quits)\n", v.cur.At.Format("15:04:05"), every)
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "NODE\tADDR\tSTATE\tTERM\tAPPLIED\tSTALE")
		for _, n := range v.cur.Nodes {
			if n.Err != "" {
				fmt.Fprintf(tw, "-\t%s\tdown\t-\t-\t-\n", n.Addr)
				continue
			}
			stale := yesNo(n.Stale)
			if n.Stale && n.StaleReason != "" {
				stale += " (" + n.StaleReason + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", n.ID, n.Addr, n.State, n.Term, n.Applied, stale)
		}
		tw.Flush()
		fmt.Fprintf(&b, "lookups %s\n%s\n", v.rateText("/s  ", "counted from this poll on"), v.leaderText())
		if ps, rest, answering := pickerLines(v.cur); len(ps) > 0 {
			tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "PICKER\tREPLICAS\tPREFILLING\tPREFILL TOKENS\tRUNNING\tAGE\tON NODES")
			for _, p := range ps {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d ms\t%d/%d\n", p.ID, p.Replicas, p.Prefilling, p.Tokens, p.Running, p.AgeMs, p.nodes, answering)
			}
			tw.Flush()
			if t := rest.text(); t != "" {
				b.WriteString(t + "\n")
			}
		}
	}
	if v.proxy != "" {
		b.WriteString(v.proxy + "\n")
	}
	if v.demo != "" {
		b.WriteString(v.demo + "\n")
	}
	for _, e := range v.events {
		// Events are wrapped, not cut: a dead node's log line is the
		// reason it died, and is worth its lines.
		for _, l := range wrapRunes("  "+e, width-1, "      ") {
			b.WriteString(l + "\n")
		}
	}
	s := b.String()
	if width > 0 {
		lines := strings.SplitAfter(s, "\n")
		for i, l := range lines {
			if r := []rune(strings.TrimSuffix(l, "\n")); len(r) >= width {
				lines[i] = string(r[:width-1]) + "\n"
			}
		}
		s = strings.Join(lines, "")
	}
	_, err := io.WriteString(w, s)
	return strings.Count(s, "\n"), err
}

// wrapRunes splits s into lines of at most width characters, the lines
// after the first starting with indent; width 0 or one too narrow for
// indent leaves s whole.
func wrapRunes(s string, width int, indent string) []string {
	r := []rune(s)
	in := []rune(indent)
	if width <= len(in) || len(r) <= width {
		return []string{s}
	}
	lines := []string{string(r[:width])}
	for r = r[width:]; len(r) > 0; {
		n := min(len(r), width-len(in))
		lines = append(lines, indent+string(r[:n]))
		r = r[n:]
	}
	return lines
}
