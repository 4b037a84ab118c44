package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"

	"gopkg.in/yaml.v3"
)

// Limits of a backend list.
const (
	// MaxBackends bounds a backend list: a fleet routed by one proxy.
	MaxBackends = 1024
	// MaxReplicaIDBytes bounds a replica id (the subscriber's bound).
	MaxReplicaIDBytes = 200
	// maxBackendsFileBytes bounds the backends file.
	maxBackendsFileBytes = 4 << 20
)

// Backend is one engine the proxy forwards to.
type Backend struct {
	// ReplicaID is the engine's replica id in the index: the subscriber's
	// replica_id for its KV events (required, unique).
	ReplicaID string `yaml:"replica_id"`
	// URL is the engine's OpenAI server, http(s)://HOST:PORT with an
	// optional path prefix (required).
	URL string `yaml:"url"`
	// Model is the model the engine serves; "" = the models the engine
	// lists at /v1/models (read by the health checks).
	Model string `yaml:"model"`
	// Role is the engine's part in disaggregated prefill/decode
	// (disagg.go): RolePrefill, RoleDecode or RoleBoth ("" = both).
	Role string `yaml:"role"`
}

// backendsFile is the YAML of --backends.
type backendsFile struct {
	Backends []Backend `yaml:"backends"`
}

// ParseBackendFlag reads --backend REPLICA_ID=URL[,ROLE] (ROLE prefill,
// decode or both).
func ParseBackendFlag(s string) (Backend, error) {
	id, u, ok := strings.Cut(s, "=")
	if !ok {
		return Backend{}, fmt.Errorf("--backend %q: want REPLICA_ID=URL[,ROLE], e.g. sim-0=http://127.0.0.1:8001", s)
	}
	u, role, _ := strings.Cut(u, ",")
	b := Backend{ReplicaID: id, URL: u, Role: role}
	if err := b.check(); err != nil {
		return Backend{}, fmt.Errorf("--backend %q: %w", s, err)
	}
	return b, nil
}

// LoadBackends reads a backends file:
//
//	backends:
//	  - replica_id: sim-0
//	    url: http://127.0.0.1:8001
//	    model: qwen3
//	    role: prefill   # optional: prefill, decode or both (the default)
//
// Unknown fields, a missing or duplicate replica_id and a bad url are
// refused, naming the entry and the field.
func LoadBackends(path string) ([]Backend, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("backends file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxBackendsFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("backends file %s: %w", path, err)
	}
	if len(b) > maxBackendsFileBytes {
		return nil, fmt.Errorf("backends file %s: over the limit of %d bytes", path, maxBackendsFileBytes)
	}
	var bf backendsFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&bf); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("backends file %s: %w", path, err)
	}
	for i, be := range bf.Backends {
		if err := be.check(); err != nil {
			return nil, fmt.Errorf("backends file %s: backends[%d]: %w", path, i, err)
		}
	}
	if err := CheckBackends(bf.Backends); err != nil {
		return nil, fmt.Errorf("backends file %s: %w", path, err)
	}
	return bf.Backends, nil
}

// CheckBackends checks a whole list: at least one backend, at most
// MaxBackends, replica ids unique, every entry valid.
func CheckBackends(bs []Backend) error {
	if len(bs) == 0 {
		return errors.New("no backends: give at least one (REPLICA_ID=URL)")
	}
	if len(bs) > MaxBackends {
		return fmt.Errorf("%d backends, over the limit of %d", len(bs), MaxBackends)
	}
	seen := make(map[string]int, len(bs))
	for i, b := range bs {
		if err := b.check(); err != nil {
			return fmt.Errorf("backends[%d]: %w", i, err)
		}
		if j, dup := seen[b.ReplicaID]; dup {
			return fmt.Errorf("backends[%d]: replica_id %q is also backends[%d]'s", i, b.ReplicaID, j)
		}
		seen[b.ReplicaID] = i
	}
	return nil
}

// check validates one backend.
func (b Backend) check() error {
	switch {
	case b.ReplicaID == "":
		return errors.New("replica_id: required (the engine's replica id in the index)")
	case len(b.ReplicaID) > MaxReplicaIDBytes:
		return fmt.Errorf("replica_id: %d bytes, over the limit of %d", len(b.ReplicaID), MaxReplicaIDBytes)
	case strings.ContainsAny(b.ReplicaID, ",\r\n"):
		return fmt.Errorf("replica_id %q: must not contain a comma or a line break", b.ReplicaID)
	}
	if err := checkRole(b.Role); err != nil {
		return err
	}
	_, err := parseBackendURL(b.URL)
	return err
}

// parseBackendURL reads an engine URL: http or https, a host and a port
// (or the scheme's), no query.
func parseBackendURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("url %q: want http://HOST:PORT (or https://), e.g. http://127.0.0.1:8001", s)
	}
	if _, _, err := net.SplitHostPort(u.Host); err != nil && !strings.Contains(err.Error(), "missing port") {
		return nil, fmt.Errorf("url %q: bad host:port: %v", s, err)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	return u, nil
}
