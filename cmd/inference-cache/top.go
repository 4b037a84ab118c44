package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
)

func newTopCmd() *cobra.Command {
	var cf clientFlags
	var every time.Duration
	var once bool
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Live view of a cluster: node states, lookups per second by reason code, leader changes",
		Long: `Polls Status on every --addr (and every member they report) each --interval and
shows each node's Raft state, term, applied index and stale flag; lookups per
second over the last interval with their reason-code mix; the leader (and since
when, once a poll has seen it take over), its last change and how long the
cluster had no leader around it (writes unavailable; measured between polls,
so within one interval); and one line per picker (gateway) sharing its load:
its id, the replicas it has requests on, its requests before their first token,
their prompt tokens, its requests in flight, the age of its latest report and
on how many nodes that report is held; the 20 pickers with the most requests
in flight, the others summed on one line. On a terminal the table is redrawn in place;
otherwise one plain line per interval. --json prints each poll as one JSON
object per line. --once polls twice, one interval apart, prints once and
exits.`,
		Example: `  inference-cache top
  inference-cache top --addr 10.0.0.1:7401 --interval 2s
  inference-cache top --once --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if every < 100*time.Millisecond {
				return fmt.Errorf("--interval %v: must be at least 100ms", every)
			}
			p := &topPoller{cf: &cf, addrs: slices.Clone(cf.addrs), conns: map[string]*client.Client{}}
			defer p.close()
			p.poll(cmd.Context()) // learn the members, so the first rates cover every node
			out := cmd.OutOrStdout()
			var mu sync.Mutex
			v := &topView{}
			mode := topPlain
			switch {
			case cf.json:
				mode = topJSON
			case isTerminal(out):
				mode = topTerminal
			}
			err := runTop(cmd.Context(), out, p, v, &mu, topRun{every: every, mode: mode, once: once})
			if err != nil {
				return err
			}
			if v.cur != nil && !slices.ContainsFunc(v.cur.Nodes, func(n topNode) bool { return n.Err == "" }) {
				return fmt.Errorf("no node answered Status: %w", v.cur.Nodes[0].err) // register's explain words it
			}
			return nil
		},
	}
	cf.register(cmd, addrTop)
	cmd.Flags().DurationVar(&every, "interval", time.Second, "time between polls (at least 100ms)")
	cmd.Flags().BoolVar(&once, "once", false, "poll twice, one interval apart, print once and exit")
	return cmd
}

// topMode is how runTop prints.
type topMode int

const (
	topPlain    topMode = iota // one line per plainEvery
	topTerminal                // a frame redrawn in place
	topJSON                    // one JSON sample per poll
)

// topRun configures runTop: poll every every; print in mode, a plain line
// at most once per plainEvery (0 = every poll); once = two polls, one
// output, return.
type topRun struct {
	every, plainEvery time.Duration
	mode              topMode
	once              bool
}

// runTop polls until ctx ends (or once), folding each sample into v under
// mu (which the dev supervisor, the proxy's line and the demo traffic
// share to add their lines) and printing it.
func runTop(ctx context.Context, out io.Writer, p *topPoller, v *topView, mu *sync.Mutex, r topRun) error {
	lines := 0
	var lastPlain time.Time
	t := time.NewTicker(r.every)
	defer t.Stop()
	for polls := 0; ; polls++ {
		s := p.poll(ctx)
		mu.Lock()
		v.observe(s)
		var err error
		show := !r.once || polls == 1
		switch {
		case !show:
		case r.mode == topJSON:
			err = json.NewEncoder(out).Encode(s)
		case r.mode == topTerminal:
			if lines > 0 {
				fmt.Fprintf(out, "\033[%dA\033[J", lines)
			}
			lines, err = v.writeFrame(out, r.every, terminalWidth(out))
		case s.At.Sub(lastPlain) >= r.plainEvery:
			lastPlain = s.At
			err = v.writeLine(out)
		}
		mu.Unlock()
		if err != nil || r.once && polls == 1 {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// topPoller calls Status on each known node: the addresses it was given
// and the gRPC addresses of the members they report.
type topPoller struct {
	cf    *clientFlags
	addrs []string
	conns map[string]*client.Client
}

// poll returns one sample of every known node, in the order first known.
func (p *topPoller) poll(ctx context.Context) topSample {
	s := topSample{At: time.Now(), Nodes: make([]topNode, len(p.addrs))}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var members []string
	for i, a := range p.addrs {
		c, err := p.conn(a)
		if err != nil {
			s.Nodes[i] = topNode{Addr: a, Err: err.Error(), err: err}
			continue
		}
		wg.Add(1)
		go func(i int, a string, c *client.Client) {
			defer wg.Done()
			n := topNode{Addr: a}
			cctx, cancel := context.WithTimeout(ctx, min(p.cf.timeout, time.Second))
			defer cancel()
			err := c.Do(cctx, func(ctx context.Context, _ string, _ pb.InferenceCacheClient, cl pb.ClusterClient) error {
				st, err := cl.Status(ctx, &pb.StatusRequest{})
				if err != nil {
					return err
				}
				n.ID, n.State, n.Leader, n.Term, n.Applied = st.NodeId, st.State, st.LeaderId, st.Term, st.AppliedIndex
				n.Stale, n.StaleReason, n.Calls = st.Stale, st.StaleReason, st.LookupRouteCalls
				for _, p := range st.Pickers {
					n.Pickers = append(n.Pickers, topPicker{ID: p.PickerId, Replicas: p.Replicas, Prefilling: p.PrefillingRequests,
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
				n.Err, n.err = explainCallErr(err), err
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

func (p *topPoller) conn(a string) (*client.Client, error) {
	if c := p.conns[a]; c != nil {
		return c, nil
	}
	c, err := p.cf.dialAddrs([]string{a})
	if err != nil {
		return nil, err
	}
	p.conns[a] = c
	return c, nil
}

func (p *topPoller) close() {
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
