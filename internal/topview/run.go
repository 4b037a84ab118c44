package topview

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"golang.org/x/term"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
)

// Mode is how Run prints.
type Mode int

const (
	// Plain prints one line at most once per RunConfig.PlainEvery.
	Plain Mode = iota
	// Terminal redraws a frame in place.
	Terminal
	// JSON prints each poll as one JSON Sample per line.
	JSON
)

// RunConfig configures Run: poll every Every; print in Mode, a plain line
// at most once per PlainEvery (0 = every poll); Once = two polls, one
// output, return.
type RunConfig struct {
	Every, PlainEvery time.Duration
	Mode              Mode
	Once              bool
}

// Source is what Run polls: one Sample of every known node per call
// (a Poller, or a fixed one in tests).
type Source interface {
	Poll(ctx context.Context) Sample
}

// Run polls p every r.Every until ctx ends (or, with r.Once, twice),
// folding each sample into v under v's lock (which the dev supervisor,
// the proxy's line and the demo traffic share to set their lines) and
// printing it to out in r.Mode. It returns nil when ctx ends, else the
// first write error.
func Run(ctx context.Context, out io.Writer, p Source, v *View, r RunConfig) error {
	lines := 0
	var lastPlain time.Time
	t := time.NewTicker(r.Every)
	defer t.Stop()
	for polls := 0; ; polls++ {
		s := p.Poll(ctx)
		var err error
		v.mu.Lock()
		v.observe(s)
		if !r.Once || polls == 1 {
			err = v.print(out, s, r, &lines, &lastPlain)
		}
		v.mu.Unlock()
		if err != nil || r.Once && polls == 1 {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// print writes the view after sample s in r.Mode; lines is the height of
// the frame printed last (Terminal), lastPlain the time of the last plain
// line (Plain).
func (v *View) print(out io.Writer, s Sample, r RunConfig, lines *int, lastPlain *time.Time) error {
	var err error
	switch {
	case r.Mode == JSON:
		err = json.NewEncoder(out).Encode(s)
	case r.Mode == Terminal:
		if *lines > 0 {
			fmt.Fprintf(out, "\033[%dA\033[J", *lines)
		}
		*lines, err = v.writeFrame(out, r.Every, terminalWidth(out))
		v.shown()
	case s.At.Sub(*lastPlain) >= r.PlainEvery:
		*lastPlain = s.At
		err = v.writeLine(out)
		v.shown()
	}
	return err
}

// Poller calls Status on each known node: the addresses it was given
// and the gRPC addresses of the members they report.
type Poller struct {
	dial    func(addr string) (*client.Client, error)
	timeout time.Duration
	explain func(error) string
	addrs   []string
	conns   map[string]*client.Client
}

// NewPoller polls addrs (gRPC HOST:PORT) and the members they report,
// dialling each once with dial; each Status call is bounded by timeout,
// at most 1 s; explain words a failed call for Node.Err.
func NewPoller(addrs []string, dial func(addr string) (*client.Client, error), timeout time.Duration, explain func(error) string) *Poller {
	return &Poller{dial: dial, timeout: timeout, explain: explain, addrs: slices.Clone(addrs), conns: map[string]*client.Client{}}
}

// Poll returns one sample of every known node, in the order first known.
func (p *Poller) Poll(ctx context.Context) Sample {
	s := Sample{At: time.Now(), Nodes: make([]Node, len(p.addrs))}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var members []string
	for i, a := range p.addrs {
		c, err := p.conn(a)
		if err != nil {
			s.Nodes[i] = Node{Addr: a, Err: err.Error(), Cause: err}
			continue
		}
		wg.Add(1)
		go func(i int, a string, c *client.Client) {
			defer wg.Done()
			n := Node{Addr: a}
			cctx, cancel := context.WithTimeout(ctx, min(p.timeout, time.Second))
			defer cancel()
			err := c.Do(cctx, func(ctx context.Context, _ string, _ pb.InferenceCacheClient, cl pb.ClusterClient) error {
				st, err := cl.Status(ctx, &pb.StatusRequest{})
				if err != nil {
					return err
				}
				n.ID, n.State, n.Leader, n.Term, n.Applied = st.NodeId, st.State, st.LeaderId, st.Term, st.AppliedIndex
				n.Stale, n.StaleReason, n.Calls = st.Stale, st.StaleReason, st.LookupRouteCalls
				for _, p := range st.Pickers {
					n.Pickers = append(n.Pickers, Picker{ID: p.PickerId, Replicas: p.Replicas, Prefilling: p.PrefillingRequests,
						Tokens: p.PrefillTokens, Running: p.RunningRequests, AgeMs: p.AgeMs})
				}
				mu.Lock()
				for _, m := range st.Members {
					if m.GrpcAddress != "" {
						members = append(members, m.GrpcAddress)
					}
				}
				mu.Unlock()
				return nil
			})
			if err != nil {
				n.Err, n.Cause = p.explain(err), err
			}
			s.Nodes[i] = n
		}(i, a, c)
	}
	wg.Wait()
	slices.Sort(members)
	for _, m := range slices.Compact(members) {
		if !slices.Contains(p.addrs, m) {
			p.addrs = append(p.addrs, m)
		}
	}
	return s
}

func (p *Poller) conn(a string) (*client.Client, error) {
	if c := p.conns[a]; c != nil {
		return c, nil
	}
	c, err := p.dial(a)
	if err != nil {
		return nil, err
	}
	p.conns[a] = c
	return c, nil
}

// Close closes every connection the poller dialled.
func (p *Poller) Close() {
	for _, c := range p.conns {
		c.Close()
	}
}

// terminalWidth is w's width in columns when it is a terminal, else 0.
func terminalWidth(w io.Writer) int {
	f, ok := w.(*os.File)
	if !ok {
		return 0
	}
	cols, _, err := term.GetSize(int(f.Fd()))
	if err != nil {
		return 0
	}
	return cols
}
