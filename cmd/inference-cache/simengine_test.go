package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/inference-cache/inference-cache/internal/freeport"
	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/internal/syncbuf"
	"github.com/inference-cache/inference-cache/openai"
	"github.com/inference-cache/inference-cache/tokenizer"
)

// Every bad flag is refused before anything starts, with an error naming
// the flag and what it must be.
func TestSimEngineCmd_BadFlagsNameTheFlag(t *testing.T) {
	base := []string{"sim-engine", "--replica-id", "sim-0", "--model", "tiny-sp", "--listen", "127.0.0.1:0"}
	ok := func(extra ...string) []string {
		return append(append(slices.Clone(base), "--models-dir", "../../tokenizer/testdata"), extra...)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"sim-engine", "--model", "m", "--models-dir", "d"}, "--replica-id: required"},
		{[]string{"sim-engine", "--replica-id", strings.Repeat("r", 201), "--model", "m", "--models-dir", "d"}, "--replica-id: 201 bytes, over the limit of 200"},
		{[]string{"sim-engine", "--replica-id", "r", "--models-dir", "d"}, "--model: required"},
		{[]string{"sim-engine", "--replica-id", "r", "--model", "m"}, "--models-dir: required"},
		{ok("--prefill-tps", "0"), "--prefill-tps 0: must be a positive"},
		{ok("--decode-tps", "-3"), "--decode-tps -3: must be a positive"},
		{ok("--block-size", "0"), "--block-size 0: want 1 to 4096"},
		{ok("--block-size", "5000"), "--block-size 5000: want 1 to 4096"},
		{ok("--kv-blocks", "0"), "--kv-blocks 0: need at least 1"},
		{ok("--kv-events-bind", "tcp://127.0.0.1:1", "--kv-events-connect", "tcp://127.0.0.1:2"), "set one, not both"},
		{ok("--kv-events-bind", "127.0.0.1:5557"), `--kv-events-bind "127.0.0.1:5557": want tcp://HOST:PORT`},
		{ok("--kv-events-connect", "tcp://nohost"), `--kv-events-connect "tcp://nohost": want tcp://HOST:PORT`},
		{ok("--kv-events-replay-bind", "tcp://127.0.0.1:1"), "--kv-events-replay-bind: needs --kv-events-bind"},
		{ok("--kv-events-bind", "tcp://127.0.0.1:1", "--kv-events-encoding", "json"), `--kv-events-encoding "json": want positional or map`},
		{ok("--listen", "8000"), `--listen "8000": want HOST:PORT`},
		{append(slices.Clone(base), "--models-dir", t.TempDir()), `--model "tiny-sp" with --models-dir`},
		{ok("--log-level", "loud"), "--log-level"},
	}
	for _, tc := range cases {
		_, err := runCLI(t, "", tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v:\n got  %v\n want an error containing %q", tc.args[1:], err, tc.want)
		}
	}
}

// The command serves the API with the model's tokenizer and publishes KV
// events on the socket it was given; a signal (context end) stops it.
func TestSimEngineCmd_ServesAndStops(t *testing.T) {
	events := "tcp://" + freeport.MustAddr(t)
	cmd := newRootCmd()
	var logs syncbuf.Buffer
	cmd.SetOut(&logs)
	cmd.SetErr(&logs)
	cmd.SetArgs([]string{"sim-engine", "--replica-id", "sim-0", "--model", "tiny-sp", "--models-dir", "../../tokenizer/testdata",
		"--listen", "127.0.0.1:0", "--kv-events-bind", events, "--prefill-tps", "1000000", "--decode-tps", "100000"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sim-engine returned %v after its context ended", err)
		}
	}()
	addr := regexp.MustCompile(`http=(http://127\.0\.0\.1:\d+)`)
	var base string
	poll.Eventually(t, 10*time.Second, 5*time.Millisecond, func() (bool, string) {
		out := logs.String()
		if m := addr.FindStringSubmatch(out); m != nil {
			base = m[1]
		}
		return base != "", "no serving line logged: " + out
	})
	if !strings.Contains(logs.String(), "kv_events="+events) {
		t.Fatalf("start line does not name the events socket %s: %s", events, logs.String())
	}
	tok, err := tokenizer.LoadDir("../../tokenizer/testdata/tiny-sp", tokenizer.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	text := "hello world, hello sim"
	want, err := tok.Encode(text, true)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(`{"model": "tiny-sp", "prompt": "`+text+`", "max_tokens": 2}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r openai.CompletionResponse
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %v", resp.StatusCode, err)
	}
	if r.Usage.PromptTokens != len(want) || r.Usage.CompletionTokens != 2 {
		t.Fatalf("usage %+v, want %d prompt tokens (the tokenizer's count) and 2 completion", r.Usage, len(want))
	}

	// A subscriber of --kv-events-bind receives a batch once a prompt with
	// a full block is prefilled (retried with new prompts: a PUB socket
	// drops what it sends before the subscription reaches it).
	sub := zmq4.NewSub(ctx)
	defer sub.Close()
	if err := sub.Dial(events); err != nil {
		t.Fatal(err)
	}
	if err := sub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		t.Fatal(err)
	}
	got := make(chan zmq4.Msg, 1)
	go func() {
		if m, err := sub.Recv(); err == nil {
			got <- m
		}
	}()
	var m zmq4.Msg
	sent := 0
	poll.Eventually(t, 10*time.Second, 50*time.Millisecond, func() (bool, string) {
		select {
		case m = <-got:
			return true, ""
		default:
		}
		sent++
		ids := make([]string, 32)
		for j := range ids {
			ids[j] = strconv.Itoa(sent*100 + j)
		}
		resp, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(`{"model": "tiny-sp", "max_tokens": 1, "prompt": [`+strings.Join(ids, ",")+`]}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return false, fmt.Sprintf("no KV-event batch on --kv-events-bind after %d prompts", sent)
	})
	if len(m.Frames) != 3 || len(m.Frames[1]) != 8 {
		t.Fatalf("event message %q, want [topic, seq, batch]", m.Frames)
	}
}
