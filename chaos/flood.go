package chaos

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// Flood shape: floodConns connections to the leader, floodStreams
// IngestStream streams on each, every stream sending batches of
// floodBatch chains as fast as it can and never reading a response.
const (
	floodConns   = 4
	floodStreams = 64
	floodBatch   = 32
	// floodChains bounds the distinct chains a flood writes (repeats are
	// cheap in the index), so the leader's memory after a flood measures
	// what the flood pinned in transit, not state it legitimately added.
	floodChains = 65536
)

// rssAfter is how long after a flood the leader's resident memory is
// measured again (the Go runtime returns freed memory gradually).
const rssAfter = 30 * time.Second

// ingestFlood floods the leader with ingest streams that never read their
// responses, while the workload's writers go on. It measures the writers'
// throughput and median latency in the window before and during the
// flood, and the leader's resident memory before, at peak and rssAfter
// later. Admission control must keep the other writers going: a violation
// when they get less than half their throughput or a median more than 10
// times the one before.
func (r *Runner) ingestFlood(ctx context.Context, f *FaultRec, leader *Node) error {
	f.Target = fmt.Sprintf("%s: %d connections × %d streams", leader.ID, floodConns, floodStreams)
	pid := leader.proc.Pid()
	rssBefore := rssMiB(pid)
	before := time.Now()
	f.Start = before
	fctx, stop := context.WithTimeout(ctx, r.timing.floodFor)
	defer stop()
	var conns []*grpc.ClientConn
	var wg sync.WaitGroup
	var sent, refused int64
	var mu sync.Mutex
	for c := 0; c < floodConns; c++ {
		cc, err := grpc.NewClient(leader.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		conns = append(conns, cc)
		ic := pb.NewInferenceCacheClient(cc)
		for s := 0; s < floodStreams; s++ {
			wg.Add(1)
			go func(c, s int) {
				defer wg.Done()
				k := 0
				for fctx.Err() == nil {
					st, err := ic.IngestStream(fctx)
					if err != nil {
						mu.Lock()
						refused++
						mu.Unlock()
						sleepCtx(fctx, 50*time.Millisecond)
						continue
					}
					for fctx.Err() == nil {
						evs := make([]*pb.BlockEvent, floodBatch)
						for i := range evs {
							evs[i] = stored(fmt.Sprintf("r-flood-%d", c), chainAt(1_000_000_000+uint32((s*floodBatch*8+(k%8)*floodBatch+i)%floodChains)*256))
						}
						k++
						if err := st.Send(&pb.IngestRequest{Events: evs}); err != nil {
							mu.Lock()
							refused++
							mu.Unlock()
							break
						}
						mu.Lock()
						sent++
						mu.Unlock()
					}
				}
			}(c, s)
		}
	}
	peak := rssBefore
	for fctx.Err() == nil {
		peak = max(peak, rssMiB(pid))
		sleepCtx(fctx, 250*time.Millisecond)
	}
	for _, cc := range conns {
		cc.Close()
	}
	wg.Wait()
	f.Healed = time.Now()
	window := f.Healed.Sub(before)
	writes, _, _ := r.w.History()
	tb, pb50 := writerStats(writes, before.Add(-window), before)
	td, pd50 := writerStats(writes, before, f.Healed)
	f.Notes = append(f.Notes, fmt.Sprintf("flood sent %d batches (%d stream ends or refusals); other writers: %d acks at p50 %.1f ms in %v before, %d acks at p50 %.1f ms during",
		sent, refused, tb, pb50, window.Round(time.Second), td, pd50))
	if tb > 0 && (float64(td) < 0.5*float64(tb) || (pb50 > 0 && pd50 > 10*pb50)) {
		f.Violations = append(f.Violations, fmt.Sprintf("the flood starved the other writers: %d → %d acks, p50 %.1f → %.1f ms", tb, td, pb50, pd50))
	}
	sleepCtx(ctx, rssAfter)
	f.Notes = append(f.Notes, fmt.Sprintf("leader RSS %d MiB before, %d MiB peak, %d MiB %v after", rssBefore, peak, rssMiB(pid), rssAfter))
	f.RSSMiB = [3]int{rssBefore, peak, rssMiB(pid)}
	return nil
}

// writerStats counts the workload writers' acknowledged writes that
// started in [from, to) and their median latency in ms.
func writerStats(ws []*WriteRec, from, to time.Time) (int, float64) {
	var lat []float64
	for _, w := range ws {
		if w.Writer >= 0 && w.Acked && !w.Start.Before(from) && w.Start.Before(to) {
			lat = append(lat, ms(w.End.Sub(w.Start)))
		}
	}
	return len(lat), percentileF(lat, 0.5)
}

// rssMiB is pid's resident set size in MiB (0 when unreadable).
func rssMiB(pid int) int {
	fh, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return kb >> 10
		}
	}
	return 0
}
