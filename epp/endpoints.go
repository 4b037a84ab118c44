package epp

import (
	"cmp"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"gopkg.in/yaml.v3"
)

// Endpoint is one model server the picker may send requests to
// (contract §14.3).
type Endpoint struct {
	// Address is "ip:port" as the data plane names the endpoint (the pod
	// IP and the InferencePool's target port): the value of
	// x-gateway-destination-endpoint and of the subset hint's entries.
	Address string `yaml:"address"`
	// ReplicaID is the engine's replica id in the prefix index: the
	// replica_id the subscriber reports for this engine's KV events. It
	// must match, or the engine's cached prefixes are never found.
	ReplicaID string `yaml:"replica_id"`
	// Model, when set, is the only model the endpoint serves; "" = any
	// model (an InferencePool's pods all serve the pool's models).
	Model string `yaml:"model"`
	// Adapters are the LoRA adapters the endpoint serves on Model (each a
	// model name of its own, as vLLM serves them; disagg.go).
	Adapters []string `yaml:"adapters"`
	// Role is the endpoint's part in disaggregated prefill/decode:
	// prefill, decode or both ("" = both; disagg.go).
	Role string `yaml:"role"`
}

// check validates one endpoint, naming the field.
func (e *Endpoint) check() error {
	host, port, err := net.SplitHostPort(e.Address)
	if err != nil || host == "" {
		return fmt.Errorf("address %q: want IP:PORT, e.g. 10.0.0.7:8000", e.Address)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("address %q: port must be 1 to 65535", e.Address)
	}
	if e.ReplicaID == "" {
		return fmt.Errorf("address %q: replica_id: required (the subscriber's replica id of this engine)", e.Address)
	}
	if strings.Contains(e.ReplicaID, ",") {
		return fmt.Errorf("replica_id %q: must not contain a comma", e.ReplicaID)
	}
	return e.checkServing()
}

// CheckEndpoints validates a list: each endpoint (address IP:PORT, a
// replica id), addresses and replica ids unique. The error names the
// entry (endpoints[i]) and the field.
func CheckEndpoints(eps []Endpoint) error {
	addrs, ids := map[string]int{}, map[string]int{}
	for i := range eps {
		if err := eps[i].check(); err != nil {
			return fmt.Errorf("endpoints[%d]: %w", i, err)
		}
		if j, ok := addrs[eps[i].Address]; ok {
			return fmt.Errorf("endpoints[%d]: address %q is also endpoints[%d]'s", i, eps[i].Address, j)
		}
		if j, ok := ids[eps[i].ReplicaID]; ok {
			return fmt.Errorf("endpoints[%d]: replica_id %q is also endpoints[%d]'s", i, eps[i].ReplicaID, j)
		}
		addrs[eps[i].Address], ids[eps[i].ReplicaID] = i, i
	}
	return nil
}

// ParseEndpointFlag reads one --endpoint ADDRESS=REPLICA_ID[,MODEL]
// value, e.g. "10.0.0.7:8000=vllm-0,qwen3".
func ParseEndpointFlag(s string) (Endpoint, error) {
	addr, rest, ok := strings.Cut(s, "=")
	if !ok {
		return Endpoint{}, fmt.Errorf("--endpoint %q: want ADDRESS=REPLICA_ID[,MODEL], e.g. 10.0.0.7:8000=vllm-0", s)
	}
	id, model, _ := strings.Cut(rest, ",")
	e := Endpoint{Address: strings.TrimSpace(addr), ReplicaID: strings.TrimSpace(id), Model: strings.TrimSpace(model)}
	if err := e.check(); err != nil {
		return Endpoint{}, fmt.Errorf("--endpoint %q: %w", s, err)
	}
	return e, nil
}

// endpointsFile is the YAML shape of LoadEndpoints.
type endpointsFile struct {
	Endpoints []Endpoint `yaml:"endpoints"`
}

// LoadEndpoints reads a YAML file of endpoints:
//
//	endpoints:
//	  - address: 10.0.0.7:8000   # ip:port as the gateway names it
//	    replica_id: vllm-0       # the subscriber's replica_id
//	    model: qwen3             # optional: "" = any model
//	    adapters: [sql-lora]     # optional: LoRA adapters served on model
//	    role: prefill            # optional: prefill, decode or both (default)
//
// Unknown fields are refused, naming them.
func LoadEndpoints(path string) ([]Endpoint, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	var ef endpointsFile
	if err := dec.Decode(&ef); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(ef.Endpoints) == 0 {
		return nil, fmt.Errorf("%s: no endpoints", path)
	}
	if err := CheckEndpoints(ef.Endpoints); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ef.Endpoints, nil
}

// endpointSet is one immutable version of the endpoints.
type endpointSet struct {
	list   []Endpoint // sorted by address
	byAddr map[string]*Endpoint
}

// Table holds the current endpoints of one pool: replaced whole by its
// source (a static list, an InferencePool informer), read lock-free by
// every request. The zero value is empty and not synced.
type Table struct {
	cur    atomic.Pointer[endpointSet]
	synced atomic.Bool
}

// Set replaces the endpoints and marks the table synced (the picker is
// ready). Endpoints are validated as CheckEndpoints does; on error the
// table is unchanged.
func (t *Table) Set(eps []Endpoint) error {
	if err := CheckEndpoints(eps); err != nil {
		return err
	}
	s := &endpointSet{list: slices.Clone(eps), byAddr: make(map[string]*Endpoint, len(eps))}
	slices.SortFunc(s.list, func(a, b Endpoint) int { return cmp.Compare(a.Address, b.Address) })
	for i := range s.list {
		s.byAddr[s.list[i].Address] = &s.list[i]
	}
	t.cur.Store(s)
	t.synced.Store(true)
	return nil
}

// Synced reports whether the endpoints were set at least once: the
// readiness of the picker.
func (t *Table) Synced() bool { return t.synced.Load() }

// List returns the endpoints, sorted by address (the caller must not
// modify them).
func (t *Table) List() []Endpoint {
	if s := t.cur.Load(); s != nil {
		return s.list
	}
	return nil
}

// Len is the number of endpoints.
func (t *Table) Len() int { return len(t.List()) }

// byAddress returns the endpoint at addr, or nil.
func (t *Table) byAddress(addr string) *Endpoint {
	if s := t.cur.Load(); s != nil {
		return s.byAddr[addr]
	}
	return nil
}

// DefaultReplicaLabel is the pod label whose value, when set, is the
// replica id of a pod's endpoint instead of the pod name (contract §14.3).
const DefaultReplicaLabel = "inference-cache.io/replica-id"
