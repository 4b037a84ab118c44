package bench

import (
	"bytes"
	"compress/gzip"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/inference-cache/inference-cache/internal/fixtures"
)

// The ideal bound on a hand-made trace: a block counts its own tokens (a
// partial last block its remainder) when its id was seen in an earlier
// request.
func TestIdealHitRate_HandMade(t *testing.T) {
	tr, err := ReadMooncake(strings.NewReader(`{"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2]}
{"timestamp": 1, "input_length": 1300, "output_length": 1, "hash_ids": [1, 2, 3]}

{"timestamp": 2, "input_length": 600, "output_length": 1, "hash_ids": [1, 4]}
{"timestamp": 3, "input_length": 1300, "output_length": 1, "hash_ids": [1, 2, 3]}
`), "hand")
	if err != nil {
		t.Fatal(err)
	}
	// hits: r1 0; r2 512+512; r3 512; r4 512+512+276. total 1024+1300+600+1300.
	want := float64(0+1024+512+1300) / float64(1024+1300+600+1300)
	if got := tr.IdealHitRate(); math.Abs(got-want) > 1e-12 {
		t.Fatalf("ideal %v, want %v", got, want)
	}
	if d := tr.DistinctBlocks(); d != 4 {
		t.Fatalf("distinct blocks %d, want 4", d)
	}
	if f := tr.Requests[1].FullBlocks(); f != 2 {
		t.Fatalf("full blocks of 1300 tokens = %d, want 2", f)
	}
}

func TestReadMooncake_SortsByTimestampAndNamesBadLines(t *testing.T) {
	tr, err := ReadMooncake(strings.NewReader(`{"timestamp": 5, "input_length": 10, "output_length": 1, "hash_ids": [1]}
{"timestamp": 2, "input_length": 10, "output_length": 1, "hash_ids": [2]}
`), "x")
	if err != nil {
		t.Fatal(err)
	}
	if tr.Requests[0].Timestamp != 2 || tr.SpanMs() != 3 {
		t.Fatalf("not sorted: %+v", tr.Requests)
	}
	for _, bad := range []string{
		`{"timestamp": 0, "input_length": 1025, "output_length": 1, "hash_ids": [1, 2]}` + "\n{",
		`{"timestamp": 0, "input_length": 1025, "output_length": 1, "hash_ids": [1]}`,
		``,
	} {
		if _, err := ReadMooncake(strings.NewReader(bad), "bad"); !errors.Is(err, ErrTrace) {
			t.Errorf("%q: err %v, want ErrTrace", bad, err)
		}
	}
	_, err = ReadMooncake(strings.NewReader(`{"timestamp": 0, "input_length": 1025, "output_length": 1, "hash_ids": [1]}`), "bad")
	if !strings.Contains(err.Error(), "line 1") {
		t.Errorf("error %q does not name the line", err)
	}
}

// The repository's Mooncake traces, read compressed as committed: record
// counts and the ideal bounds testdata/PROVENANCE.md states.
func TestLoadMooncake_RepositoryTraces(t *testing.T) {
	for _, c := range []struct {
		name     string
		requests int
		ideal    float64 // PROVENANCE.md, one decimal of a percent
	}{
		{"conversation_trace", 12031, 0.374},
		{"synthetic_trace", 3993, 0.651},
	} {
		tr, err := LoadMooncake(fixtures.TracePath(t, c.name))
		if err != nil {
			t.Fatal(err)
		}
		if want := c.name + ".jsonl"; tr.Name != want {
			t.Errorf("name %q, want %q", tr.Name, want)
		}
		if len(tr.Requests) != c.requests {
			t.Errorf("%s: %d requests, want %d", c.name, len(tr.Requests), c.requests)
		}
		if got := math.Round(tr.IdealHitRate()*1000) / 1000; got != c.ideal {
			t.Errorf("%s: ideal %.4f, want %.3f", c.name, tr.IdealHitRate(), c.ideal)
		}
	}
}

// A gzip-compressed trace reads as the same trace plain, whatever its
// file's name says; a truncated one is an ErrTrace naming the file.
func TestLoadMooncake_GzipRecognisedByContent(t *testing.T) {
	const jsonl = `{"timestamp": 5, "input_length": 600, "output_length": 2, "hash_ids": [1, 2]}
{"timestamp": 1, "input_length": 512, "output_length": 1, "hash_ids": [1]}
`
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(jsonl))
	zw.Close()
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	want := []Request{
		{Timestamp: 1, InputLength: 512, OutputLength: 1, HashIDs: []uint64{1}},
		{Timestamp: 5, InputLength: 600, OutputLength: 2, HashIDs: []uint64{1, 2}},
	}
	for _, c := range []struct{ file, name string }{
		{write("t.jsonl", []byte(jsonl)), "t.jsonl"},
		{write("t.jsonl.gz", gz.Bytes()), "t.jsonl"},
		{write("renamed.jsonl", gz.Bytes()), "renamed.jsonl"},
	} {
		tr, err := LoadMooncake(c.file)
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		if tr.Name != c.name || !reflect.DeepEqual(tr.Requests, want) {
			t.Errorf("%s: %q %+v, want %q %+v", c.file, tr.Name, tr.Requests, c.name, want)
		}
	}
	cut := write("cut.jsonl.gz", gz.Bytes()[:gz.Len()-6])
	if _, err := LoadMooncake(cut); !errors.Is(err, ErrTrace) || !strings.Contains(err.Error(), cut) {
		t.Errorf("truncated gzip: %v, want ErrTrace naming %s", err, cut)
	}
}

func TestGenerate_DeterministicFromSeed(t *testing.T) {
	a := Generate(GeneratorConfig{Seed: 42, Requests: 500})
	b := Generate(GeneratorConfig{Seed: 42, Requests: 500})
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed, different traces")
	}
	c := Generate(GeneratorConfig{Seed: 43, Requests: 500})
	if reflect.DeepEqual(a.Requests, c.Requests) {
		t.Fatal("different seeds, same trace")
	}
	if len(a.Requests) != 500 {
		t.Fatalf("%d requests, want 500", len(a.Requests))
	}
}

// The generator's ids form a prefix tree like Mooncake's (an id always has
// the same predecessor and position), every request has exactly
// ceil(input_length/512) ids, timestamps do not decrease, and there is
// prefix reuse to find (a positive ideal bound) but not all of it.
func TestGenerate_MooncakeShape(t *testing.T) {
	tr := Generate(GeneratorConfig{Seed: 7, Requests: 2000})
	type pos struct {
		prev uint64
		at   int
	}
	where := map[uint64]pos{}
	for i, r := range tr.Requests {
		if i > 0 && r.Timestamp < tr.Requests[i-1].Timestamp {
			t.Fatalf("request %d goes back in time", i)
		}
		if want := (r.InputLength + 511) / 512; len(r.HashIDs) != want {
			t.Fatalf("request %d: %d ids for %d tokens", i, len(r.HashIDs), r.InputLength)
		}
		for j, h := range r.HashIDs {
			p := pos{prev: ^uint64(0), at: j}
			if j > 0 {
				p.prev = r.HashIDs[j-1]
			}
			if old, ok := where[h]; ok && old != p {
				t.Fatalf("id %d at %+v and at %+v", h, old, p)
			}
			where[h] = p
		}
	}
	if ideal := tr.IdealHitRate(); ideal < 0.2 || ideal > 0.95 {
		t.Fatalf("ideal bound %.3f: the generator should have partial reuse", ideal)
	}
}

func TestAppendPromptTokens_DeterministicPerBlock(t *testing.T) {
	r1 := &Request{InputLength: 1100, HashIDs: []uint64{7, 8, 9}}
	r2 := &Request{InputLength: 600, HashIDs: []uint64{7, 10}}
	a, b := AppendPromptTokens(nil, r1), AppendPromptTokens(nil, r2)
	if len(a) != 1100 || len(b) != 600 {
		t.Fatalf("lengths %d, %d", len(a), len(b))
	}
	if !reflect.DeepEqual(a[:512], b[:512]) {
		t.Fatal("the same hash id gave different tokens")
	}
	if reflect.DeepEqual(a[512:600], b[512:600]) {
		t.Fatal("different hash ids gave the same tokens")
	}
	for _, x := range a {
		if x >= VocabSize {
			t.Fatalf("token %d outside the vocabulary", x)
		}
	}
}

// A coarse arrival resolution rounds every timestamp down to a multiple
// of it, keeping the order and everything else, so requests arrive in
// bursts of one instant.
func TestGenerate_ArrivalResolutionMakesBursts(t *testing.T) {
	fine := Generate(GeneratorConfig{Seed: 5, Requests: 300, RatePerSec: 6})
	coarse := Generate(GeneratorConfig{Seed: 5, Requests: 300, RatePerSec: 6, ArrivalResolutionMs: 1000})
	instants := map[int64]int{}
	for i, r := range coarse.Requests {
		f := fine.Requests[i]
		if r.Timestamp != f.Timestamp-f.Timestamp%1000 || r.InputLength != f.InputLength || len(r.HashIDs) != len(f.HashIDs) {
			t.Fatalf("request %d: %+v, want %+v at %d ms", i, r, f, f.Timestamp-f.Timestamp%1000)
		}
		if i > 0 && r.Timestamp < coarse.Requests[i-1].Timestamp {
			t.Fatalf("request %d at %d ms before its predecessor's %d", i, r.Timestamp, coarse.Requests[i-1].Timestamp)
		}
		instants[r.Timestamp]++
	}
	if len(instants) >= len(coarse.Requests)/2 {
		t.Fatalf("%d requests at %d instants: want bursts", len(coarse.Requests), len(instants))
	}
}

// Window takes the records bench --live replays: from --skip, at most
// --requests, timestamps from the first of them over --speedup (worked
// by hand: 3000 − 1000 = 2000 ms at 2× is 1000 ms; 1001 ms at 2× rounds
// to 501).
func TestWindow_SkipsCutsAndSpeedsUp(t *testing.T) {
	tr, err := ReadMooncake(strings.NewReader(`{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}
{"timestamp": 1000, "input_length": 10, "output_length": 1, "hash_ids": [2]}
{"timestamp": 2001, "input_length": 10, "output_length": 1, "hash_ids": [3]}
{"timestamp": 3000, "input_length": 10, "output_length": 1, "hash_ids": [4]}
`), "w")
	if err != nil {
		t.Fatal(err)
	}
	w, err := tr.Window(1, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	var got [][2]int64
	for _, r := range w.Requests {
		got = append(got, [2]int64{int64(r.HashIDs[0]), r.Timestamp})
	}
	if want := [][2]int64{{2, 0}, {3, 501}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("window (id, timestamp) %v, want %v", got, want)
	}
	if tr.Requests[1].Timestamp != 1000 {
		t.Fatalf("the trace itself changed: %+v", tr.Requests[1])
	}
	if all, _ := tr.Window(1, 0, 1); len(all.Requests) != 3 || all.Requests[2].Timestamp != 2000 {
		t.Fatalf("to the end at 1×: %+v", all.Requests)
	}
	for _, c := range []struct {
		skip    int
		speedup float64
		want    string
	}{{4, 1, "--skip 4: want 0 to 3 (the trace has 4 records)"}, {-1, 1, "--skip -1: want 0 to 3"}, {0, 0, "--speedup 0: want a number above 0"},
		{0, math.NaN(), "--speedup NaN"}, {0, math.Inf(1), "--speedup +Inf"}} {
		if _, err := tr.Window(c.skip, 0, c.speedup); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Window(%d, 0, %v): err %v, want %q", c.skip, c.speedup, err, c.want)
		}
	}
}
