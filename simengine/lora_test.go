package simengine

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/observe"
	"github.com/inference-cache/inference-cache/openai"
)

var twoAdapters = LoRAConfig{Adapters: []Adapter{{Name: "sql", Path: "/adapters/sql"}, {Name: "chat", Path: "/adapters/chat"}}, MaxLoRAs: 2}

// The same prompt on the base model and on each adapter never finds
// another's blocks: each is cold the first time and warm (3 of its 4
// blocks, vLLM recomputing the last) the second; the adapter's
// BlockStored carries lora_id, lora_name and the name as every block's
// first extra key, as vLLM's does.
func TestLoRA_AdapterBlocksApartFromTheBase(t *testing.T) {
	te := newTestEngine(t, Config{KVBlocks: 100, PrefillTPS: 1e6, DecodeTPS: 1e5, LoRA: twoAdapters})
	prompt := seq(1, 64)
	for i, c := range []struct {
		model  string
		cached int
	}{{"sim-model", 0}, {"sql", 0}, {"chat", 0}, {"sql", 48}, {"sim-model", 48}, {"chat", 48}} {
		code, body := te.postDriven(t, "/v1/completions", map[string]any{"model": c.model, "prompt": prompt, "max_tokens": 1})
		var r openai.CompletionResponse
		if code != 200 || json.Unmarshal(body, &r) != nil {
			t.Fatalf("request %d (%s): %d %s", i, c.model, code, body)
		}
		if r.Usage.CachedTokens() != c.cached || r.Model != c.model {
			t.Fatalf("request %d (%s): %d cached tokens, model %q; want %d and the adapter's name", i, c.model, r.Usage.CachedTokens(), r.Model, c.cached)
		}
	}
	// The engine publishes on a goroutine of its own: wait for the two
	// adapters' events, then check that no third came with them.
	var loras []observe.Event
	poll.Eventually(t, 10*time.Second, time.Millisecond, func() (bool, string) {
		loras = loras[:0]
		for _, p := range te.pub.all() {
			for _, ev := range batch(t, p).Events {
				if ev.Kind == observe.EventBlockStored && ev.LoraName != "" {
					loras = append(loras, ev)
				}
			}
		}
		return len(loras) >= 2, fmt.Sprintf("%d adapter BlockStored events, want 2 (sql, chat)", len(loras))
	})
	if len(loras) != 2 {
		t.Fatalf("%d adapter BlockStored events, want 2 (sql, chat)", len(loras))
	}
	for i, want := range []struct {
		id   int64
		name string
	}{{1, "sql"}, {2, "chat"}} {
		ev := loras[i]
		if !ev.HasLoraID || ev.LoraID != want.id || ev.LoraName != want.name || !slices.Equal(ev.Extra.Strings0, []string{want.name}) || ev.Extra.StringLater != want.name {
			t.Fatalf("event %d: lora_id %v %d, lora_name %q, extra keys %v / %q; want %d, %q on every block", i, ev.HasLoraID, ev.LoraID, ev.LoraName, ev.Extra.Strings0, ev.Extra.StringLater, want.id, want.name)
		}
	}
}

// With --max-loras 1 and a load time of 100 ms: sql-1 loads sql and
// prefills (16 tokens at 1000/s: 116 ms); chat-1 would be a second
// adapter in the batch, so it waits while sql-2, the same adapter, is
// taken past it (16 ms, no load); chat-1 then loads chat once both sql
// requests ended (116 ms). Two loads in all; the info gauge's newest
// series names what ran and waited.
func TestLoRA_MaxLoRAsAndLoadTime(t *testing.T) {
	cfg := LoRAConfig{Adapters: twoAdapters.Adapters, MaxLoRAs: 1, LoadTime: 100 * time.Millisecond}
	te := newTestEngine(t, Config{KVBlocks: 100, PrefillTPS: 1000, DecodeTPS: 100, LoRA: cfg})
	ctx := context.Background()
	submit := func(adapter string, from int) *Handle {
		h, err := te.SubmitJob(ctx, Job{Prompt: seq(from, 16), MaxTokens: 4, Adapter: adapter})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	sql1, chat1, sql2 := submit("sql", 1), submit("chat", 100), submit("sql", 200)
	// The manual clock stands still, so every series carries the same
	// time: look for the combination itself.
	if v := metric(te.scrape(t), LoRAMetric, "max_lora", "1", "running_lora_adapters", "sql", "waiting_lora_adapters", "chat,sql"); v <= 0 {
		t.Fatalf("no lora info series with sql running, chat and sql waiting, max 1 (%v)", v)
	}
	for !chat1.Progress().Done {
		if !te.clock.Step() {
			t.Fatal("chat-1 never ran")
		}
		if chat1.Progress().Tokens > 0 && (!sql1.Progress().Done || !sql2.Progress().Done) {
			t.Fatal("chat-1 ran beside a sql request with --max-loras 1")
		}
	}
	for _, c := range []struct {
		h    *Handle
		want time.Duration
	}{{sql1, 116 * time.Millisecond}, {sql2, 16 * time.Millisecond}, {chat1, 116 * time.Millisecond}} {
		if p := c.h.Progress(); p.Prefill != c.want {
			t.Errorf("prefill %v, want %v", p.Prefill, c.want)
		}
	}
	if n := metric(te.scrape(t), LoRALoadsMetric); n != 2 {
		t.Fatalf("%v adapter loads, want 2", n)
	}
	if _, err := te.SubmitJob(ctx, Job{Prompt: seq(1, 4), MaxTokens: 1, Adapter: "nope"}); err == nil {
		t.Fatal("an unknown adapter was accepted")
	}
}

// GET /v1/models lists each adapter with its path as root and the base
// model as parent, as vLLM does; an unknown adapter gets vLLM's 404.
func TestLoRA_ModelsListAdaptersWithParent(t *testing.T) {
	te := newTestEngine(t, Config{KVBlocks: 10, LoRA: twoAdapters})
	resp, err := http.Get(te.srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var l openai.ModelList
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		t.Fatal(err)
	}
	if len(l.Data) != 3 || l.Data[0].Parent != nil || l.Data[1].ID != "sql" || l.Data[1].Parent != "sim-model" || l.Data[1].Root != "/adapters/sql" || l.Data[2].ID != "chat" {
		t.Fatalf("models %+v", l.Data)
	}
	code, body := te.postDriven(t, "/v1/completions", map[string]any{"model": "nope", "prompt": "hi"})
	if code != 404 {
		t.Fatalf("unknown adapter: %d %s", code, body)
	}
}
