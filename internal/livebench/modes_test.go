package livebench

import (
	"slices"
	"strings"
	"testing"

	"github.com/inference-cache/inference-cache/bench"
	"github.com/inference-cache/inference-cache/internal/localfleet"
)

// disagg mode: the first --live-prefill-engines engines are the proxy's
// prefill backends, the rest decode, every engine with NixlConnector's
// config; lora mode: every engine serves the adapters, and a
// conversation (its first block) always asks the same one.
func TestLiveModes_FleetAndModels(t *testing.T) {
	es := []localfleet.Engine{{ID: "e0", HTTP: "127.0.0.1:1"}, {ID: "e1", HTTP: "127.0.0.1:2"}, {ID: "e2", HTTP: "127.0.0.1:3"}}
	c := localfleet.Config{Engines: es}
	m := Modes{Mode: ModeDisagg, PrefillEngines: 1}
	if err := m.check(3); err != nil {
		t.Fatal(err)
	}
	m.apply(&c)
	args := strings.Join(c.ProxySpec("p", "picker").Args, " ")
	for _, want := range []string{"e0=http://127.0.0.1:1,prefill", "e1=http://127.0.0.1:2,decode", "e2=http://127.0.0.1:3,decode"} {
		if !strings.Contains(args, want) {
			t.Fatalf("proxy args %q lack %q", args, want)
		}
	}
	if !slices.Contains(c.EngineSpec(es[1]).Args, "--kv-transfer-config") {
		t.Fatalf("engine args %v lack the KV connector", c.EngineSpec(es[1]).Args)
	}
	if err := (&Modes{Mode: ModeDisagg, PrefillEngines: 3}).check(3); err == nil {
		t.Fatal("all engines prefill accepted")
	}

	l := Modes{Mode: ModeLoRA, Adapters: 4, MaxLoRAs: 2, LoRALoadTime: "50ms"}
	c = localfleet.Config{Engines: es}
	l.apply(&c)
	if a := strings.Join(c.EngineSpec(es[0]).Args, " "); !strings.Contains(a, "--lora-modules a3=/adapters/a3") || !strings.Contains(a, "--max-loras 2") {
		t.Fatalf("engine args %q", a)
	}
	f := l.modelFor()
	turn1, turn2, other := &bench.Request{HashIDs: []uint64{0, 6, 7}}, &bench.Request{HashIDs: []uint64{0, 6, 7, 8}}, &bench.Request{HashIDs: []uint64{0, 9}}
	if f(turn1) != "a2" || f(turn2) != "a2" || f(other) != "a1" || f(&bench.Request{HashIDs: []uint64{3}}) != "a3" {
		t.Fatalf("models %q %q %q, want a2 a2 a1", f(turn1), f(turn2), f(other))
	}
	if (&Modes{Mode: ModeAggregated}).modelFor() != nil {
		t.Fatal("aggregated mode sets a model per record")
	}
}
