package observe

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/inference-cache/inference-cache/fingerprint"
)

// Config is the subscriber configuration file (contract §12.6 "Subscriber
// configuration"). Load it with LoadConfig or ParseConfig, which fill the
// defaults and validate it.
type Config struct {
	// Engines are the engines to subscribe to; replica_id is unique across
	// them. Reloading the file (SIGHUP) adds, removes and restarts engines
	// by comparing entries with the same replica_id.
	Engines []EngineConfig `yaml:"engines"`

	// ScrapeInterval is how often each engine's metrics_url is scraped for
	// replica stats. Default 10s; minimum 100ms. Optional (contract §12.6).
	ScrapeInterval Duration `yaml:"scrape_interval"`

	// ReplayTimeout bounds one replay exchange (dial, request, every reply
	// up to the end marker). Past it the replay counts as failed and the
	// replica is cleared. Default 5s.
	ReplayTimeout Duration `yaml:"replay_timeout"`

	// Listen mode (see listen.go): engines whose PUB socket connects to the
	// subscriber instead of binding.

	// Listen is the tcp://HOST:PORT the subscriber binds one SUB socket on
	// for engines that connect to it (llm-d's topology); "" = off. Engine
	// entries without an endpoint are served by it, each matched by its
	// topic or pod. Data-parallel rank r of such an engine connects to
	// PORT + r (vLLM offsets the port whether it binds or connects), so
	// PORT..PORT+N-1 are bound for the largest data_parallel_size N among
	// those entries. Engine entries with an endpoint are still dialled.
	Listen string `yaml:"listen"`

	// TopicPattern extracts the pod from a topic on the listen socket, for
	// engine entries matched by pod: an RE2 regular expression with a named
	// group "pod" (and optionally "model", only logged), matched against the
	// whole topic. Default DefaultTopicPattern, llm-d's kv@<pod>@<model>.
	// Only with listen.
	TopicPattern string `yaml:"topic_pattern"`

	// topicRE is TopicPattern compiled by Validate (nil without listen).
	topicRE *regexp.Regexp
}

// EngineConfig is one engine entry. Field names are the YAML keys of contract
// §12; data_parallel_size is an addition.
type EngineConfig struct {
	// Endpoint is the engine's ZMQ PUB socket, tcp://HOST:PORT, which the
	// subscriber dials. Required unless the top-level listen is set: an
	// entry without it is an engine that connects to the listen socket.
	Endpoint string `yaml:"endpoint"`
	// ReplayEndpoint is the engine's optional ROUTER replay socket,
	// tcp://HOST:PORT. Without it a sequence gap clears the replica.
	ReplayEndpoint string `yaml:"replay_endpoint"`
	// Topic is, for an engine with an endpoint, the ZMQ subscription
	// prefix ("" = every message). For an engine served by listen (no
	// endpoint) it is the exact topic the engine publishes on, e.g.
	// llm-d's "kv@vllm-0@Qwen/Qwen3-8B"; set it or Pod.
	Topic string `yaml:"topic"`
	// ReplicaID names the replica in the index (required, at most 200
	// bytes so the "-dp<r>" suffix still fits the server's 256-byte id
	// limit). Data-parallel rank r > 0 becomes ReplicaID + "-dp<r>".
	ReplicaID string `yaml:"replica_id"`
	// ModelID is the model partition key (required).
	ModelID string `yaml:"model_id"`
	// TenantID is the tenant partition key (may be empty).
	TenantID string `yaml:"tenant_id"`
	// HashScheme is the domain tag of the partition (required; normally
	// "vllm" or "sglang").
	HashScheme string `yaml:"hash_scheme"`
	// BlockSize is the engine's tokens per block (1..4096, default 16). It
	// must equal the engine's block size and the cluster policy's blockSize
	// for ModelID; events with another size are rejected with a loud
	// metric.
	BlockSize int `yaml:"block_size"`
	// MetricsURL is the engine's Prometheus endpoint (http or https),
	// optional; without it no replica stats are reported.
	MetricsURL string `yaml:"metrics_url"`
	// Media lists the storage media indexed (case-insensitive). Default
	// [GPU]. Events of other media are ignored and counted.
	Media []string `yaml:"media"`
	// DataParallelSize is the number of data-parallel ranks the engine
	// runs (default 1). Rank r publishes on Endpoint's port + r (and
	// replays on ReplayEndpoint's port + r), as vLLM does; one subscriber
	// stream is opened per rank.
	DataParallelSize int `yaml:"data_parallel_size"`

	// Pod matches, for an engine served by listen (no endpoint), every
	// topic whose "pod" group of topic_pattern equals it: with the default
	// pattern, "vllm-0" matches kv@vllm-0@<any model>. Set it or Topic.
	// Not allowed with an endpoint.
	Pod string `yaml:"pod"`

	// ---- engine paging (reblock.go) ----

	// PageSize is the engine's tokens per page, i.e. per block of its KV
	// events (0 = block_size). When smaller than BlockSize (SGLang's
	// default page is 1 token), BlockSize must be a multiple of it and the
	// subscriber concatenates pages along their chain into BlockSize-token
	// index blocks; removing any page removes the block holding it. Events
	// are then checked against PageSize instead of BlockSize.
	PageSize int `yaml:"page_size"`
}

// Duration is a time.Duration read from YAML as a Go duration string
// ("10s", "500ms").
type Duration time.Duration

// UnmarshalYAML implements yaml.Unmarshaler.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// Defaults of the optional settings.
const (
	DefaultScrapeInterval = 10 * time.Second
	DefaultReplayTimeout  = 5 * time.Second
	// maxReplicaIDBytes leaves room for "-dp<r>" within the server's
	// 256-byte id limit (api.MaxIDBytes).
	maxReplicaIDBytes = 200
	// maxDataParallelSize bounds data_parallel_size (ports port..port+N-1).
	maxDataParallelSize = 1024
)

// ErrConfig wraps every validation error of a configuration; the message
// names the offending field, e.g. "engines[1].replica_id: required".
var ErrConfig = errors.New("observe: invalid subscriber config")

// LoadConfig reads and validates the YAML file at path.
func LoadConfig(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("observe: read subscriber config: %w", err)
	}
	c, err := ParseConfig(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParseConfig decodes YAML, rejects unknown keys (a misspelt key would
// otherwise silently take its default), fills defaults and validates.
func ParseConfig(b []byte) (*Config, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var c Config
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Validate fills defaults and checks every field; the error wraps ErrConfig
// and names the field.
func (c *Config) Validate() error {
	if c.ScrapeInterval == 0 {
		c.ScrapeInterval = Duration(DefaultScrapeInterval)
	}
	if time.Duration(c.ScrapeInterval) < 100*time.Millisecond {
		return badConfig("scrape_interval", "%v is below the minimum of 100ms", time.Duration(c.ScrapeInterval))
	}
	if c.ReplayTimeout == 0 {
		c.ReplayTimeout = Duration(DefaultReplayTimeout)
	}
	if c.ReplayTimeout < 0 {
		return badConfig("replay_timeout", "negative")
	}
	ids := map[string]int{}
	eps := map[string]int{}
	for i := range c.Engines {
		e := &c.Engines[i]
		f := func(name string) string { return "engines[" + strconv.Itoa(i) + "]." + name }
		if err := c.validateEngineAddr(e, i, f, ids, eps); err != nil {
			return err
		}
		if err := e.validate(f); err != nil {
			return err
		}
	}
	return c.validateListen(badConfig)
}

// badConfig is the error for field of the configuration, wrapping
// ErrConfig.
func badConfig(field, format string, a ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrConfig, field, fmt.Sprintf(format, a...))
}

// validateEngineAddr checks engine i's replica id and endpoints: the id
// required and unique (ids maps each id to its engine), the endpoint
// required unless listen serves the engine, and unique (eps), the replay
// endpoint well-formed. f names a field of the engine.
func (c *Config) validateEngineAddr(e *EngineConfig, i int, f func(string) string, ids, eps map[string]int) error {
	if e.ReplicaID == "" {
		return badConfig(f("replica_id"), "required")
	}
	if len(e.ReplicaID) > maxReplicaIDBytes {
		return badConfig(f("replica_id"), "%d bytes, over the limit of %d", len(e.ReplicaID), maxReplicaIDBytes)
	}
	if j, dup := ids[e.ReplicaID]; dup {
		return badConfig(f("replica_id"), "%q is also engines[%d]", e.ReplicaID, j)
	}
	ids[e.ReplicaID] = i
	switch {
	case e.Endpoint == "" && c.Listen != "":
		// Served by the listen socket: validateListen checks it.
	case e.Endpoint == "":
		return badConfig(f("endpoint"), "required (tcp://HOST:PORT); only an engine served by listen (top-level listen: tcp://HOST:PORT) may omit it")
	default:
		if err := checkTCPEndpoint(e.Endpoint); err != nil {
			return badConfig(f("endpoint"), "%v", err)
		}
		if j, dup := eps[e.Endpoint]; dup {
			return badConfig(f("endpoint"), "%q is also engines[%d]", e.Endpoint, j)
		}
		eps[e.Endpoint] = i
	}
	if e.ReplayEndpoint != "" {
		if err := checkTCPEndpoint(e.ReplayEndpoint); err != nil {
			return badConfig(f("replay_endpoint"), "%v", err)
		}
	}
	return nil
}

// validate checks the engine's partition ids, block size, metrics URL,
// media, paging and data-parallel size, filling in their defaults. f
// names a field of the engine.
func (e *EngineConfig) validate(f func(string) string) error {
	if e.ModelID == "" {
		return badConfig(f("model_id"), "required")
	}
	if e.HashScheme == "" {
		return badConfig(f("hash_scheme"), "required (vllm or sglang)")
	}
	for name, v := range map[string]string{"model_id": e.ModelID, "tenant_id": e.TenantID, "hash_scheme": e.HashScheme} {
		if len(v) > 256 {
			return badConfig(f(name), "%d bytes, over the limit of 256", len(v))
		}
	}
	if e.BlockSize == 0 {
		e.BlockSize = fingerprint.DefaultBlockSize
	}
	if e.BlockSize < 1 || e.BlockSize > fingerprint.MaxBlockSize {
		return badConfig(f("block_size"), "%d is not between 1 and %d", e.BlockSize, fingerprint.MaxBlockSize)
	}
	if e.MetricsURL != "" {
		u, err := url.Parse(e.MetricsURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return badConfig(f("metrics_url"), "%q is not an http(s) URL", e.MetricsURL)
		}
	}
	if len(e.Media) == 0 {
		e.Media = []string{"GPU"}
	}
	for k, m := range e.Media {
		if strings.TrimSpace(m) == "" {
			return badConfig(f("media["+strconv.Itoa(k)+"]"), "empty")
		}
		e.Media[k] = strings.ToUpper(strings.TrimSpace(m))
	}
	if err := e.validatePaging(); err != nil {
		return badConfig(f("page_size"), "%v", err)
	}
	if e.DataParallelSize == 0 {
		e.DataParallelSize = 1
	}
	if e.DataParallelSize < 1 || e.DataParallelSize > maxDataParallelSize {
		return badConfig(f("data_parallel_size"), "%d is not between 1 and %d", e.DataParallelSize, maxDataParallelSize)
	}
	if e.DataParallelSize > 1 && e.Endpoint != "" {
		if _, err := offsetEndpoint(e.Endpoint, e.DataParallelSize-1); err != nil {
			return badConfig(f("endpoint"), "%v", err)
		}
	}
	return nil
}

// checkTCPEndpoint accepts tcp://HOST:PORT with a numeric port.
func checkTCPEndpoint(ep string) error {
	if ep == "" {
		return errors.New("required (tcp://HOST:PORT)")
	}
	rest, ok := strings.CutPrefix(ep, "tcp://")
	if !ok {
		return fmt.Errorf("%q: only tcp://HOST:PORT is supported", ep)
	}
	i := strings.LastIndexByte(rest, ':')
	if i <= 0 {
		return fmt.Errorf("%q has no host:port", ep)
	}
	if p, err := strconv.Atoi(rest[i+1:]); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%q: port %q is not 1..65535", ep, rest[i+1:])
	}
	return nil
}

// offsetEndpoint returns ep with its port increased by r (vLLM's
// data-parallel rank convention).
func offsetEndpoint(ep string, r int) (string, error) {
	if r == 0 || ep == "" {
		return ep, nil
	}
	i := strings.LastIndexByte(ep, ':')
	p, err := strconv.Atoi(ep[i+1:])
	if err != nil {
		return "", fmt.Errorf("%q: bad port", ep)
	}
	if p+r > 65535 {
		return "", fmt.Errorf("%q: port %d + rank %d exceeds 65535", ep, p, r)
	}
	return ep[:i+1] + strconv.Itoa(p+r), nil
}

// ReplicaForRank returns the replica id of data-parallel rank r of the
// engine: ReplicaID for r = 0, ReplicaID + "-dp<r>" otherwise (contract §12.6).
func (e *EngineConfig) ReplicaForRank(r int64) string {
	if r <= 0 {
		return e.ReplicaID
	}
	return e.ReplicaID + "-dp" + strconv.FormatInt(r, 10)
}

// equal reports whether two engine entries are identical (after defaults).
func (e *EngineConfig) equal(o *EngineConfig) bool {
	if e.Endpoint != o.Endpoint || e.ReplayEndpoint != o.ReplayEndpoint || e.Topic != o.Topic ||
		e.ReplicaID != o.ReplicaID || e.ModelID != o.ModelID || e.TenantID != o.TenantID ||
		e.HashScheme != o.HashScheme || e.BlockSize != o.BlockSize || e.MetricsURL != o.MetricsURL ||
		e.DataParallelSize != o.DataParallelSize || e.Pod != o.Pod || len(e.Media) != len(o.Media) ||
		e.PageSize != o.PageSize {
		return false
	}
	for i := range e.Media {
		if e.Media[i] != o.Media[i] {
			return false
		}
	}
	return true
}

// ---- engine paging (reblock.go) ----

// validatePaging checks page_size against the (defaulted) block_size: 0 or
// a divisor of block_size.
func (e *EngineConfig) validatePaging() error {
	switch {
	case e.PageSize == 0:
		return nil
	case e.PageSize < 0 || e.PageSize > e.BlockSize:
		return fmt.Errorf("%d is not between 1 and block_size (%d)", e.PageSize, e.BlockSize)
	case e.BlockSize%e.PageSize != 0:
		return fmt.Errorf("block_size %d is not a multiple of page_size %d", e.BlockSize, e.PageSize)
	}
	return nil
}
