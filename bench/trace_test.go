package bench

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
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

// The shared Mooncake traces (read in place, never copied): record counts,
// distinct blocks and the ideal bounds PROVENANCE.md states.
func TestLoadMooncake_SharedTraces(t *testing.T) {
	for _, c := range []struct {
		file     string
		requests int
		ideal    float64 // PROVENANCE.md, one decimal of a percent
	}{
		{"conversation_trace.jsonl", 12031, 0.374},
		{"synthetic_trace.jsonl", 3993, 0.651},
	} {
		path := filepath.Join("..", "..", "shared", "data", "mooncake", c.file)
		if _, err := os.Stat(path); err != nil {
			t.Skipf("%s not available: %v", path, err)
		}
		tr, err := LoadMooncake(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(tr.Requests) != c.requests {
			t.Errorf("%s: %d requests, want %d", c.file, len(tr.Requests), c.requests)
		}
		if got := math.Round(tr.IdealHitRate()*1000) / 1000; got != c.ideal {
			t.Errorf("%s: ideal %.4f, want %.3f", c.file, tr.IdealHitRate(), c.ideal)
		}
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
