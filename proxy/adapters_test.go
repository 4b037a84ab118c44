package proxy

import (
	"slices"
	"strings"
	"testing"
)

// The newest series of vllm:lora_requests_info (the largest value: vLLM
// sets the current label combination to the time on each step, older
// combinations keep their last time) gives the running and waiting
// adapters and max_lora. The page is vLLM's text format
// (vllm/v1/metrics/loggers.py at 005a810b).
func TestParseLoRAInfo_NewestSeries(t *testing.T) {
	page := `# HELP vllm:lora_requests_info Running stats on lora requests.
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="2",running_lora_adapters="sql",waiting_lora_adapters=""} 1.7649e+09
vllm:lora_requests_info{max_lora="2",running_lora_adapters="sql,chat",waiting_lora_adapters="poem"} 1.76490001e+09
vllm:lora_requests_info{max_lora="2",running_lora_adapters="",waiting_lora_adapters=""} 1.76489e+09
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="qwen3"} 3
`
	li, kv, err := parseEngineMetrics(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	if kv != -1 {
		t.Fatalf("kv usage %v without the metric, want -1", kv)
	}
	if li == nil || li.running != 2 || li.max != 2 || !slices.Equal(li.loaded, []string{"sql", "chat", "poem"}) {
		t.Fatalf("lora info %+v: want running sql,chat (2), waiting poem, max 2", li)
	}
	li, kv, err = parseEngineMetrics(strings.NewReader("# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{engine=\"0\"} 0.25\n"))
	if err != nil || li != nil || kv != 0.25 {
		t.Fatalf("a page without the metric: %+v %v, want nil", li, err)
	}
}
