package simengine

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inference-cache/inference-cache/openai"
)

// LoRA adapters, as vLLM serves them with --enable-lora, --lora-modules
// NAME=PATH and --max-loras:
//
//   - each adapter is a model name of its own (GET /v1/models lists it
//     with parent = the base model and root = its path, as vLLM's
//     OpenAIServingModels.show_available_models does,
//     vllm/entrypoints/openai/serving_models.py at 075e9ba8); its integer
//     id (lora_id) is its position in the list from 1, as vLLM counts
//     them;
//   - a batch holds at most MaxLoRAs distinct adapters: a waiting request
//     whose adapter would be one too many is passed over for the next
//     one that fits (vLLM's scheduler skips it), and the GPU holds
//     MaxLoRAs adapter slots, least recently used out; a prefill whose
//     adapter is not in a slot first spends LoadTime loading it;
//   - an adapter's blocks hash apart from the base model's and from
//     every other adapter's (vLLM mixes the LoRA name into every block's
//     hash as its first extra key), so the same prompt never hits another
//     adapter's cache; its KV events carry lora_id and lora_name, and the
//     name as the first extra key of every block;
//   - vllm:lora_requests_info{max_lora, running_lora_adapters,
//     waiting_lora_adapters} is set to the current time on every change
//     (vllm/v1/metrics/loggers.py at 005a810b: one series per label
//     combination, the newest carrying the largest value; the adapter
//     lists are comma-joined names);
//   - simengine_lora_loads_total counts the adapter loads (not a vLLM
//     metric).

// DefaultMaxLoRAs is vLLM's --max-loras default.
const DefaultMaxLoRAs = 1

// LoRAMetric and LoRALoadsMetric are the adapter metrics' names.
const (
	LoRAMetric      = "vllm:lora_requests_info"
	LoRALoadsMetric = "simengine_lora_loads_total"
)

// Adapter is one LoRA adapter the engine serves (--lora-modules
// NAME=PATH).
type Adapter struct {
	// Name is the adapter's model name (required, unique, not the base
	// model's).
	Name string
	// Path is its path as given (listed as root; never read).
	Path string
}

// LoRAConfig configures the engine's adapters; the zero value serves
// none.
type LoRAConfig struct {
	// Adapters are the adapters served; their ids are 1, 2, … in order.
	Adapters []Adapter
	// MaxLoRAs is the most distinct adapters in a batch and the GPU's
	// adapter slots (1..len(Adapters) is sensible; 0 = DefaultMaxLoRAs).
	MaxLoRAs int
	// LoadTime is the time to load an adapter into a free slot, spent
	// before the prefill of a request whose adapter is not loaded.
	LoadTime time.Duration
}

// ParseLoRAModule reads --lora-modules NAME=PATH.
func ParseLoRAModule(s string) (Adapter, error) {
	name, path, ok := strings.Cut(s, "=")
	if !ok || name == "" || path == "" {
		return Adapter{}, fmt.Errorf("--lora-modules %q: want NAME=PATH, e.g. sql-lora=/adapters/sql", s)
	}
	return Adapter{Name: name, Path: path}, nil
}

func (c *LoRAConfig) fill(model string) error {
	if c.MaxLoRAs == 0 {
		c.MaxLoRAs = DefaultMaxLoRAs
	}
	if c.MaxLoRAs < 1 {
		return fmt.Errorf("simengine: max LoRAs %d: want at least 1", c.MaxLoRAs)
	}
	if c.LoadTime < 0 {
		return fmt.Errorf("simengine: LoRA load time %v: must not be negative", c.LoadTime)
	}
	seen := map[string]bool{model: true}
	for i, a := range c.Adapters {
		if a.Name == "" || seen[a.Name] {
			return fmt.Errorf("simengine: adapter %d name %q: must be non-empty and differ from the model's and the other adapters'", i+1, a.Name)
		}
		seen[a.Name] = true
	}
	return nil
}

// loraState is the engine's adapters at run time (guarded by Engine.mu).
type loraState struct {
	cfg     LoRAConfig
	ids     map[string]int // name → lora_id (from 1)
	slots   []string       // loaded adapters, most recently used first
	running map[string]int // running requests per adapter
	info    *prometheus.GaugeVec
	loads   prometheus.Counter
}

func newLoRAState(cfg LoRAConfig, reg prometheus.Registerer, model string) *loraState {
	if len(cfg.Adapters) == 0 {
		return nil
	}
	s := &loraState{cfg: cfg, ids: map[string]int{}, running: map[string]int{}}
	for i, a := range cfg.Adapters {
		s.ids[a.Name] = i + 1
	}
	s.info = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: LoRAMetric, Help: "Running stats on lora requests."},
		[]string{"max_lora", "waiting_lora_adapters", "running_lora_adapters"})
	s.loads = prometheus.NewCounter(prometheus.CounterOpts{Name: LoRALoadsMetric, Help: "LoRA adapters loaded into a GPU slot.",
		ConstLabels: prometheus.Labels{"model_name": model, "engine": "0"}})
	reg.MustRegister(s.info, s.loads)
	return s
}

// Adapters are the adapters the engine serves (none without LoRA).
func (e *Engine) Adapters() []Adapter {
	if e.lora == nil {
		return nil
	}
	return e.lora.cfg.Adapters
}

// adapterCards are the adapters' /v1/models cards: id the adapter's
// name, root its path, parent the base model, as vLLM lists them.
func (s *Server) adapterCards() []openai.ModelCard {
	var out []openai.ModelCard
	for _, a := range s.e.Adapters() {
		out = append(out, openai.ModelCard{ID: a.Name, Object: openai.ObjectModel, Created: s.created, OwnedBy: "vllm", Root: a.Path,
			Parent: s.e.Model(), Permission: []openai.ModelPermission{openai.NewModelPermission("modelperm-"+randomID(), s.created)}})
	}
	return out
}

// adapterID is name's lora_id; ok is false for a name the engine does
// not serve. "" is the base model (id 0).
func (e *Engine) adapterID(name string) (int, bool) {
	if name == "" {
		return 0, true
	}
	if e.lora == nil {
		return 0, false
	}
	id, ok := e.lora.ids[name]
	return id, ok
}

// admissible reports whether r may join the batch: the base model always;
// an adapter already running, or while fewer than MaxLoRAs run.
func (s *loraState) admissible(r *request) bool {
	if s == nil || r.adapter == "" || s.running[r.adapter] > 0 {
		return true
	}
	n := 0
	for _, c := range s.running {
		if c > 0 {
			n++
		}
	}
	return n < s.cfg.MaxLoRAs
}

// start records r running and returns the time to load its adapter (0
// when loaded, or for the base model).
func (s *loraState) start(r *request) time.Duration {
	if s == nil || r.adapter == "" {
		return 0
	}
	s.running[r.adapter]++
	if i := slices.Index(s.slots, r.adapter); i >= 0 {
		copy(s.slots[1:i+1], s.slots[:i])
		s.slots[0] = r.adapter
		return 0
	}
	if len(s.slots) >= s.cfg.MaxLoRAs {
		// Out goes the least recently used adapter nobody runs; the
		// admission rule leaves one.
		for i := len(s.slots) - 1; i >= 0; i-- {
			if s.running[s.slots[i]] == 0 {
				s.slots = slices.Delete(s.slots, i, i+1)
				break
			}
		}
	}
	s.slots = slices.Insert(s.slots, 0, r.adapter)
	s.loads.Inc()
	return s.cfg.LoadTime
}

// stop records that r no longer runs.
func (s *loraState) stop(r *request) {
	if s == nil || r.adapter == "" {
		return
	}
	if s.running[r.adapter]--; s.running[r.adapter] <= 0 {
		delete(s.running, r.adapter)
	}
}

// gauge sets the current label combination of vllm:lora_requests_info to
// now, as vLLM does on each step.
func (s *loraState) gauge(queue []*request, now time.Time) {
	if s == nil {
		return
	}
	var waiting []string
	for _, r := range queue {
		if r.adapter != "" && !slices.Contains(waiting, r.adapter) {
			waiting = append(waiting, r.adapter)
		}
	}
	running := make([]string, 0, len(s.running))
	for a := range s.running {
		running = append(running, a)
	}
	slices.Sort(running)
	s.info.WithLabelValues(strconv.Itoa(s.cfg.MaxLoRAs), strings.Join(waiting, ","), strings.Join(running, ",")).
		Set(float64(now.UnixNano()) / 1e9)
}
