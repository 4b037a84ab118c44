package epp

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/inference-cache/inference-cache/gateway"
	"github.com/inference-cache/inference-cache/internal/extproctest"
	"github.com/inference-cache/inference-cache/internal/fixtures"
	"github.com/inference-cache/inference-cache/prompt"
)

// BenchmarkProcess is one FULL_DUPLEX_STREAMED exchange (request phase
// and a one-chunk response) over loopback gRPC with the Qwen3 template
// and tokenizer and a fake lookup: the picker's own CPU per request
// besides the cluster's round trip.
func BenchmarkProcess(b *testing.B) {
	reg := prompt.New(fixtures.ModelsDir(b, "qwen3"), prompt.Options{})
	gw, err := gateway.New(gateway.Config{Prompts: reg, Lookup: &fakeLookup{resp: prefixMatch("b", 64)}})
	if err != nil {
		b.Fatal(err)
	}
	r := newRigWith(b, gw)
	sys := strings.Repeat("You are the benchmark assistant of a fleet whose engines keep the attention keys and values of earlier prompts. ", 12) + strings.Repeat("Answer in detail. ", 20)
	body := []byte(fmt.Sprintf(`{"model": "qwen3", "max_tokens": 1, "messages": [{"role": "system", "content": %q}, {"role": "user", "content": "Question?"}]}`, sys))
	fd := fullDuplex
	if err := reg.Preload(context.Background(), "qwen3"); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		x, err := extproctest.Start(context.Background(), r.conn, extproctest.Request{Mode: fd, ResponseMode: fd, Path: "/v1/chat/completions", Body: body})
		if err != nil || x.Pick.Destination == "" {
			b.Fatal(err, x.Pick)
		}
		if _, err := x.Respond(extproctest.Response{ContentType: "application/json", Chunks: [][]byte{[]byte(`{}`)}}); err != nil {
			b.Fatal(err)
		}
	}
}
