package bench

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// TraceBlockTokens is the number of prompt tokens one Mooncake hash id
// stands for. The engines of the simulated fleet use it as their block
// size, so one trace block is one engine block.
const TraceBlockTokens = 512

// Request is one trace record (Mooncake JSONL: timestamp, input_length,
// output_length, hash_ids).
type Request struct {
	// Timestamp is the arrival time in ms from the start of the trace.
	Timestamp int64 `json:"timestamp"`
	// InputLength is the prompt length in tokens.
	InputLength int `json:"input_length"`
	// OutputLength is the number of generated tokens.
	OutputLength int `json:"output_length"`
	// HashIDs name the prompt's 512-token blocks, first to last; the last
	// block is usually partial. Ids form a prefix tree: an id always has
	// the same predecessor and position.
	HashIDs []uint64 `json:"hash_ids"`
}

// FullBlocks is the number of complete 512-token blocks of the prompt (the
// partial tail is dropped, as an engine's prefix cache does).
func (r *Request) FullBlocks() int {
	return min(r.InputLength/TraceBlockTokens, len(r.HashIDs))
}

// Blocks returns the hash ids of the full blocks.
func (r *Request) Blocks() []uint64 { return r.HashIDs[:r.FullBlocks()] }

// Trace is a request trace in arrival order.
type Trace struct {
	// Name identifies the trace in reports (the file's base name, or
	// "generator(seed=…)").
	Name string
	// Requests are sorted by Timestamp (stable: equal timestamps keep file
	// order).
	Requests []Request
}

// ErrTrace wraps every trace format error; the message names the line.
var ErrTrace = errors.New("bench: invalid trace")

// LoadMooncake reads a Mooncake JSONL trace from path, plain or
// gzip-compressed (recognised by the gzip magic bytes, whatever the file's
// name; the repository's traces are testdata/mooncake/*.jsonl.gz). The
// trace's Name is the file's base name without a ".gz" suffix. A corrupt
// compressed stream is an ErrTrace naming the line it broke.
func LoadMooncake(path string) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("bench: open trace: %w", err)
	}
	defer f.Close()
	br := bufio.NewReader(f)
	var r io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%s: %w: %v", path, ErrTrace, err)
		}
		defer zr.Close()
		r = zr
	}
	t, err := ReadMooncake(r, strings.TrimSuffix(filepath.Base(path), ".gz"))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// ReadMooncake reads Mooncake JSONL records (one JSON object per line; blank
// lines are skipped) and sorts them by timestamp.
func ReadMooncake(r io.Reader, name string) (*Trace, error) {
	t := &Trace{Name: name}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(b) == 0 {
			continue
		}
		var q Request
		if err := json.Unmarshal(b, &q); err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrTrace, line, err)
		}
		if q.InputLength < 0 || q.OutputLength < 0 || q.Timestamp < 0 {
			return nil, fmt.Errorf("%w: line %d: negative timestamp or length", ErrTrace, line)
		}
		if need := (q.InputLength + TraceBlockTokens - 1) / TraceBlockTokens; len(q.HashIDs) < need {
			return nil, fmt.Errorf("%w: line %d: %d hash_ids for %d input tokens, want %d", ErrTrace, line, len(q.HashIDs), q.InputLength, need)
		}
		t.Requests = append(t.Requests, q)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: line %d: %v", ErrTrace, line+1, err)
	}
	if len(t.Requests) == 0 {
		return nil, fmt.Errorf("%w: no records", ErrTrace)
	}
	sort.SliceStable(t.Requests, func(i, j int) bool { return t.Requests[i].Timestamp < t.Requests[j].Timestamp })
	return t, nil
}

// DistinctBlocks counts the distinct hash ids of the trace (full and
// partial blocks alike).
func (t *Trace) DistinctBlocks() int {
	seen := make(map[uint64]struct{}, len(t.Requests)*4)
	for i := range t.Requests {
		for _, h := range t.Requests[i].HashIDs {
			seen[h] = struct{}{}
		}
	}
	return len(seen)
}

// PromptTokens is the sum of the requests' input lengths.
func (t *Trace) PromptTokens() int64 {
	var n int64
	for i := range t.Requests {
		n += int64(t.Requests[i].InputLength)
	}
	return n
}

// SpanMs is the time from the first to the last arrival, in ms.
func (t *Trace) SpanMs() int64 {
	if len(t.Requests) == 0 {
		return 0
	}
	return t.Requests[len(t.Requests)-1].Timestamp - t.Requests[0].Timestamp
}

// IdealHitRate is the trace's ideal token-weighted prefix-cache hit rate:
// the share of prompt tokens whose block was seen in an earlier request,
// with an infinite cache (PROVENANCE.md). Block j of a request covers
// tokens [512j, min(512(j+1), input_length)), so a partial last block
// counts its own tokens. Because ids form a prefix tree, a block seen
// before has its whole prefix seen before, so this bounds every router:
// no strategy's token hit rate can exceed it.
func (t *Trace) IdealHitRate() float64 {
	seen := make(map[uint64]struct{}, len(t.Requests)*4)
	var hit, total int64
	for i := range t.Requests {
		q := &t.Requests[i]
		for j, h := range q.HashIDs {
			n := min(TraceBlockTokens, q.InputLength-j*TraceBlockTokens)
			if n <= 0 {
				break
			}
			total += int64(n)
			if _, ok := seen[h]; ok {
				hit += int64(n)
			}
		}
		for _, h := range q.HashIDs {
			seen[h] = struct{}{}
		}
	}
	if total == 0 {
		return 0
	}
	return float64(hit) / float64(total)
}

// Head returns a trace of the first n requests (all when n <= 0 or n is
// larger than the trace).
func (t *Trace) Head(n int) *Trace {
	if n <= 0 || n >= len(t.Requests) {
		return t
	}
	return &Trace{Name: fmt.Sprintf("%s[:%d]", t.Name, n), Requests: t.Requests[:n]}
}

// Window is records skip … skip+n−1 of t (n ≤ 0: to the end), their
// timestamps taken from the first of them and divided by speedup (1 =
// as recorded), rounded to the millisecond: the records bench --live
// replays with --skip, --requests and --speedup, for a modelled run of
// the same load. It errors when skip is outside the trace or speedup is
// not a positive finite number.
func (t *Trace) Window(skip, n int, speedup float64) (*Trace, error) {
	if skip < 0 || skip >= len(t.Requests) {
		return nil, fmt.Errorf("--skip %d: want 0 to %d (the trace has %d records)", skip, len(t.Requests)-1, len(t.Requests))
	}
	if !(speedup > 0) || math.IsInf(speedup, 1) {
		return nil, fmt.Errorf("--speedup %v: want a number above 0", speedup)
	}
	if skip == 0 && speedup == 1 {
		return t.Head(n), nil
	}
	end := len(t.Requests)
	if n > 0 {
		end = min(end, skip+n)
	}
	src := t.Requests[skip:end]
	w := &Trace{Name: fmt.Sprintf("%s[%d:%d]", t.Name, skip, end), Requests: make([]Request, len(src))}
	if speedup != 1 {
		w.Name += fmt.Sprintf(" at speed-up %g", speedup)
	}
	for i, r := range src {
		r.Timestamp = int64(math.Round(float64(r.Timestamp-src[0].Timestamp) / speedup))
		w.Requests[i] = r
	}
	return w, nil
}
