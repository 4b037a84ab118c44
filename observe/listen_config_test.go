package observe

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// listenEngineYAML is an engine entry served by listen: no endpoint.
const listenEngineYAML = `
  - pod: pod-a
    replica_id: vllm-a
    model_id: m
    hash_scheme: vllm
`

// Each invalid listen-mode configuration is refused with ErrConfig and an
// error naming the field and the rule or limit.
func TestConfig_ListenValidationNamesTheField(t *testing.T) {
	listen := "listen: tcp://0.0.0.0:5557\n"
	topicEngine := func(id, topic string) string {
		return "\n  - topic: \"" + topic + "\"\n    replica_id: " + id + "\n    model_id: m\n    hash_scheme: vllm\n"
	}
	cases := []struct {
		name, yaml string
		want       []string
	}{
		{"listen not tcp", "listen: udp://0.0.0.0:5557\nengines:" + listenEngineYAML,
			[]string{"listen:", "only tcp://HOST:PORT"}},
		{"listen without port", "listen: tcp://0.0.0.0\nengines:" + listenEngineYAML,
			[]string{"listen:", "no host:port"}},
		{"listen port out of range", "listen: tcp://0.0.0.0:70000\nengines:" + listenEngineYAML,
			[]string{"listen:", "1..65535"}},
		{"no endpoint without listen", "engines:" + listenEngineYAML,
			[]string{"engines[0].endpoint: required", "only an engine served by listen"}},
		{"pod without listen", "engines:" + goodEngine + "    pod: pod-a\n",
			[]string{"engines[0].pod:", "set listen"}},
		{"topic_pattern without listen", "topic_pattern: 'kv@(?P<pod>.+)'\nengines:" + goodEngine,
			[]string{"topic_pattern:", "only used with listen"}},
		{"pod with an endpoint", listen + "engines:" + goodEngine + "    pod: pod-a\n",
			[]string{"engines[0].pod:", "only for an engine served by listen"}},
		{"neither topic nor pod", listen + "engines:\n  - replica_id: x\n    model_id: m\n    hash_scheme: vllm\n",
			[]string{"engines[0].topic: required for an engine served by listen", "pod"}},
		{"both topic and pod", listen + "engines:" + listenEngineYAML + "    topic: kv@pod-a@m\n",
			[]string{"engines[0].pod: set topic or pod, not both"}},
		{"duplicate topic", listen + "engines:" + topicEngine("x", "kv@p@m") + topicEngine("y", "kv@p@m"),
			[]string{"engines[1].topic:", `"kv@p@m" is also engines[0]`}},
		{"duplicate pod", listen + "engines:" + listenEngineYAML + strings.Replace(listenEngineYAML, "vllm-a", "vllm-b", 1),
			[]string{"engines[1].pod:", `"pod-a" is also engines[0]`}},
		{"topic whose pod is another entry's pod", listen + "engines:" + listenEngineYAML + topicEngine("y", "kv@pod-a@m"),
			[]string{"engines[1].topic:", `has pod "pod-a", which is engines[0].pod`}},
		{"topic too long", listen + "engines:" + topicEngine("x", strings.Repeat("t", 1025)),
			[]string{"engines[0].topic:", "1025 bytes, over the limit of 1024"}},
		{"topic_pattern not a regexp", listen + "topic_pattern: 'kv@(?P<pod>'\nengines:" + listenEngineYAML,
			[]string{"topic_pattern:", "not an RE2 regular expression"}},
		{"topic_pattern without a pod group", listen + "topic_pattern: 'kv@(.+)@(.+)'\nengines:" + listenEngineYAML,
			[]string{"topic_pattern:", "no named group (?P<pod>"}},
		{"ranks past the last port", "listen: tcp://0.0.0.0:65535\nengines:" + listenEngineYAML + "    data_parallel_size: 2\n",
			[]string{"engines[0].data_parallel_size:", "listen's port + r", "exceeds 65535"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(c.yaml))
			if err == nil {
				t.Fatalf("accepted:\n%s", c.yaml)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("err = %v, want one containing %q", err, w)
				}
			}
			if !errors.Is(err, ErrConfig) {
				t.Errorf("err %v does not wrap ErrConfig", err)
			}
		})
	}
}

// A listen-mode configuration may mix dialled engines (with endpoint) and
// connecting ones (without); topic_pattern defaults to llm-d's form.
func TestConfig_ListenMixedTopologiesAndDefaultPattern(t *testing.T) {
	cfg, err := ParseConfig([]byte("listen: tcp://0.0.0.0:5557\nengines:" + goodEngine + listenEngineYAML +
		"  - topic: \"kv@10.0.0.7:8000@Qwen/Qwen3-8B\"\n    replica_id: vllm-c\n    model_id: m\n    hash_scheme: vllm\n    data_parallel_size: 4\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TopicPattern != DefaultTopicPattern {
		t.Errorf("topic_pattern %q, want the default %q", cfg.TopicPattern, DefaultTopicPattern)
	}
	if cfg.Engines[0].servedByListen() || !cfg.Engines[1].servedByListen() || !cfg.Engines[2].servedByListen() {
		t.Errorf("served by listen: %v %v %v, want false true true", cfg.Engines[0].servedByListen(), cfg.Engines[1].servedByListen(), cfg.Engines[2].servedByListen())
	}
	if n := listenRanks(cfg); n != 4 {
		t.Errorf("listen ranks %d, want 4 (the largest data_parallel_size served by listen)", n)
	}
	for _, c := range []struct {
		topic, pod string
		ok         bool
	}{
		{"kv@vllm-0@qwen3-8b", "vllm-0", true},
		{"kv@10.0.0.7:8000@Qwen/Qwen3-8B", "10.0.0.7:8000", true}, // llm-d's POD_IP:port form
		{"kv@a@b@c", "", false},                                   // llm-d takes exactly three "@" parts
		{"kv@pod", "", false},
		{"xkv@a@b", "", false}, // matched against the whole topic
		{"", "", false},
	} {
		if pod, ok := podOf(cfg.topicRE, c.topic); pod != c.pod || ok != c.ok {
			t.Errorf("default pattern on %q: pod %q %v, want %q %v", c.topic, pod, ok, c.pod, c.ok)
		}
	}
	// llm-d's own indexer binds tcp://*:5557; zmq4 reads "*" as every
	// interface.
	if _, err := ParseConfig([]byte("listen: tcp://*:5557\nengines:" + listenEngineYAML)); err != nil {
		t.Errorf("listen tcp://*:5557: %v", err)
	}
	custom, err := ParseConfig([]byte("listen: tcp://0.0.0.0:5557\ntopic_pattern: 'engines/(?P<pod>[^/]+)/events'\nengines:" + listenEngineYAML))
	if err != nil {
		t.Fatal(err)
	}
	if pod, ok := podOf(custom.topicRE, "engines/pod-a/events"); !ok || pod != "pod-a" {
		t.Errorf("custom pattern: pod %q %v, want pod-a", pod, ok)
	}
}

// The example configurations shipped in docs/examples parse and validate,
// so the documentation cannot drift from the format.
func TestConfig_DocExamplesAreValid(t *testing.T) {
	files, err := filepath.Glob("../docs/examples/subscriber-*.yaml")
	if err != nil || len(files) < 2 {
		t.Fatalf("examples %v (%v): want the dial and listen examples", files, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseConfig(b); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}
