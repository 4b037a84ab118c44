package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Kind is the required `kind:` of a policy file.
const Kind = "CachePolicy"

// FileError is a policy file that cannot be used: it names the file, the
// line (0 when unknown), the field (a dotted path such as
// "spec.evictionPolicy") and the reason.
type FileError struct {
	File   string
	Line   int
	Field  string
	Reason string
	// Err is the underlying error when reading the file failed (nil for
	// a content error); errors.Is sees it (e.g. fs.ErrNotExist).
	Err error
}

// Unwrap returns Err.
func (e *FileError) Unwrap() error { return e.Err }

func (e *FileError) Error() string {
	loc := e.File
	if e.Line > 0 {
		loc += ":" + strconv.Itoa(e.Line)
	}
	if e.Field == "" {
		return "policy file " + loc + ": " + e.Reason
	}
	return "policy file " + loc + ": field " + e.Field + ": " + e.Reason
}

// LoadFile reads and parses a policy file (see Parse).
func LoadFile(path string) (Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		reason := err.Error()
		var pe *fs.PathError
		if errors.As(err, &pe) {
			reason = pe.Op + ": " + pe.Err.Error() // the path is already File
		}
		return Policy{}, &FileError{File: path, Reason: reason, Err: err}
	}
	return Parse(path, data)
}

// Parse reads a Kubernetes-style policy document (contract §7.3):
//
//	apiVersion: inferencecache.io/v1   # optional
//	kind: CachePolicy
//	metadata: {name: default}          # optional, ignored
//	spec:
//	  chainMatching: true
//	  minimumMatchedTokens: 64
//	  routingFloorScore: "0.1"
//	  lookupTimeoutMs: 10
//	  evictionTTL: 600s                # Go duration, or an integer of seconds
//	  evictionPolicy: LRU              # LRU | LFU
//	  maxResidencies: 20000000
//	  pressureWeight: 0.5
//	  sloTightThresholdMs: 200
//	  sloTightBias: 0.25
//	  strategy: {enableTenantHot: true}
//	  tenantHotMinHitRate: 0.2
//	  statsFreshness: 30s              # Go duration, or an integer of seconds
//	  affinityRouting: Enabled         # Enabled | Disabled
//	  maxReplicas: 4
//	  rankingVersion: v2               # v1 | v2
//	  blockSize: {qwen3-8b: 16}        # per model_id; others use 16
//	  maxStaleness: 5s                 # Go duration, or an integer of seconds
//	  evictionBatch: 16                # a full index evicts maxResidencies/16 per pass; 0 = 64
//
// Knobs absent from spec keep their Default value. Unknown fields, values of
// the wrong type and values Validate refuses are errors; every error is a
// *FileError naming name (the file), the line, the field and the reason.
// The returned policy has Version 0 (the server sets versions).
func Parse(name string, data []byte) (Policy, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return Policy{}, &FileError{File: name, Line: yamlErrLine(err), Reason: "not valid YAML: " + yamlErrMsg(err)}
	}
	// A second document would be dropped without a word: the policy
	// would not be what the file shows.
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		line := more.Line
		if err != nil {
			line = yamlErrLine(err)
		}
		return Policy{}, &FileError{File: name, Line: line, Reason: "holds more than one YAML document (---); a policy file is one"}
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return Policy{}, &FileError{File: name, Reason: "empty document: expected kind: CachePolicy and spec:"}
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return Policy{}, &FileError{File: name, Line: root.Line, Reason: "top level must be a mapping with kind: and spec:"}
	}
	p := Default()
	var kind, spec *yaml.Node
	lines := map[string]int{}
	written := map[string]string{} // each scalar knob's value as the file has it
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		switch k.Value {
		case "kind":
			kind = v
		case "spec":
			spec = v
		case "apiVersion", "metadata":
		default:
			return Policy{}, &FileError{File: name, Line: k.Line, Field: k.Value, Reason: "unknown top-level field (expected apiVersion, kind, metadata, spec)"}
		}
	}
	if kind == nil {
		return Policy{}, &FileError{File: name, Line: root.Line, Field: "kind", Reason: "missing: must be CachePolicy"}
	}
	if kind.Value != Kind {
		return Policy{}, &FileError{File: name, Line: kind.Line, Field: "kind", Reason: fmt.Sprintf("is %q, must be CachePolicy", kind.Value)}
	}
	if spec == nil {
		return Policy{}, &FileError{File: name, Line: root.Line, Field: "spec", Reason: "missing"}
	}
	if spec.Kind != yaml.MappingNode {
		if spec.Tag == "!!null" {
			return p, nil
		}
		return Policy{}, &FileError{File: name, Line: spec.Line, Field: "spec", Reason: "must be a mapping of knobs"}
	}
	if err := parseSpec(name, spec, &p, lines, written); err != nil {
		return Policy{}, err
	}
	if err := p.CheckInput(); err != nil {
		var fe *FieldError
		if errors.As(err, &fe) {
			field, key := fe.Field, fe.Field
			if strings.HasPrefix(key, "blockSize.") {
				key = "blockSize"
			}
			if field == "maxStalenessMs" { // Validate's name for the maxStaleness knob
				field, key = "maxStaleness", "maxStaleness"
			}
			value := fe.Value
			if w, ok := written[field]; ok {
				value = w // lookupTimeoutMs: 0, not Validate's "0s"
			}
			return Policy{}, &FileError{File: name, Line: lines[key], Field: "spec." + field, Reason: fmt.Sprintf("%q %s", value, fe.Reason)}
		}
		return Policy{}, &FileError{File: name, Reason: err.Error()}
	}
	return p, nil
}

// specFields lists the knobs of spec in contract §7.1 order (for messages).
var specFields = []string{"chainMatching", "minimumMatchedTokens", "routingFloorScore", "lookupTimeoutMs",
	"evictionTTL", "evictionPolicy", "maxResidencies", "pressureWeight", "sloTightThresholdMs", "sloTightBias",
	"strategy", "tenantHotMinHitRate", "statsFreshness", "affinityRouting", "maxReplicas", "rankingVersion",
	"blockSize", "maxStaleness", "evictionBatch"}

// parseSpec sets p from the spec mapping, recording each knob's line in
// lines and each scalar knob's value as written in written.
func parseSpec(file string, spec *yaml.Node, p *Policy, lines map[string]int, written map[string]string) error {
	seen := map[string]bool{}
	for i := 0; i+1 < len(spec.Content); i += 2 {
		k, v := spec.Content[i], spec.Content[i+1]
		field := k.Value
		lines[field] = k.Line
		if v.Kind == yaml.ScalarNode {
			written[field] = v.Value
		}
		if seen[field] {
			return &FileError{File: file, Line: k.Line, Field: "spec." + field, Reason: "given twice"}
		}
		seen[field] = true
		set, ok := specSetters[field]
		if !ok {
			return &FileError{File: file, Line: k.Line, Field: "spec." + field, Reason: "unknown field (known: " + strings.Join(specFields, ", ") + ")"}
		}
		err := set(file, v, p)
		if fe, ok := err.(*FileError); ok {
			return fe
		}
		if err != nil {
			return &FileError{File: file, Line: v.Line, Field: "spec." + field, Reason: err.Error()}
		}
	}
	return nil
}

// specSetters sets each knob of spec from its YAML value in file. An error
// is either a *FileError (about a node inside the value) or the reason the
// value itself is refused.
var specSetters = map[string]func(file string, v *yaml.Node, p *Policy) error{
	"chainMatching": func(_ string, v *yaml.Node, p *Policy) (err error) {
		p.ChainMatching, err = boolVal(v)
		return err
	},
	"minimumMatchedTokens": func(_ string, v *yaml.Node, p *Policy) (err error) {
		p.MinimumMatchedTokens, err = u32Val(v)
		return err
	},
	"routingFloorScore": func(_ string, v *yaml.Node, p *Policy) error {
		if v.Kind != yaml.ScalarNode {
			return errors.New("must be a decimal string such as \"0.1\"")
		}
		p.RoutingFloorScore = v.Value
		return nil
	},
	"lookupTimeoutMs": func(_ string, v *yaml.Node, p *Policy) error {
		ms, err := u32Val(v)
		p.LookupTimeout = time.Duration(ms) * time.Millisecond
		return err
	},
	"evictionTTL": func(_ string, v *yaml.Node, p *Policy) (err error) {
		p.EvictionTTL, err = durVal(v)
		return err
	},
	"evictionPolicy": func(_ string, v *yaml.Node, p *Policy) error {
		s, err := strVal(v)
		p.EvictionPolicy = EvictionPolicy(s)
		return err
	},
	"maxResidencies": func(_ string, v *yaml.Node, p *Policy) (err error) {
		p.MaxResidencies, err = u64Val(v)
		return err
	},
	"evictionBatch": func(_ string, v *yaml.Node, p *Policy) (err error) {
		p.EvictionBatch, err = u32Val(v)
		return err
	},
	"pressureWeight": func(_ string, v *yaml.Node, p *Policy) (err error) {
		p.PressureWeight, err = floatVal(v)
		return err
	},
	"sloTightThresholdMs": func(_ string, v *yaml.Node, p *Policy) error {
		ms, err := u32Val(v)
		p.SLOTightThreshold = time.Duration(ms) * time.Millisecond
		return err
	},
	"sloTightBias": func(_ string, v *yaml.Node, p *Policy) (err error) {
		p.SLOTightBias, err = floatVal(v)
		return err
	},
	"strategy": parseStrategy,
	"tenantHotMinHitRate": func(_ string, v *yaml.Node, p *Policy) (err error) {
		p.TenantHotMinHitRate, err = floatVal(v)
		return err
	},
	"statsFreshness": func(_ string, v *yaml.Node, p *Policy) (err error) {
		p.StatsFreshness, err = durVal(v)
		return err
	},
	"affinityRouting": parseAffinityRouting,
	"maxReplicas": func(_ string, v *yaml.Node, p *Policy) (err error) {
		p.MaxReplicas, err = u32Val(v)
		return err
	},
	"rankingVersion": func(_ string, v *yaml.Node, p *Policy) error {
		s, err := strVal(v)
		p.RankingVersion = RankingVersion(s)
		return err
	},
	"blockSize": parseBlockSize,
	"maxStaleness": func(_ string, v *yaml.Node, p *Policy) (err error) {
		p.MaxStaleness, err = durVal(v)
		return err
	},
}

// parseStrategy sets spec.strategy: a mapping whose only field is
// enableTenantHot.
func parseStrategy(file string, v *yaml.Node, p *Policy) error {
	if v.Kind != yaml.MappingNode {
		return errors.New("must be a mapping such as {enableTenantHot: true}")
	}
	for j := 0; j+1 < len(v.Content); j += 2 {
		sk, sv := v.Content[j], v.Content[j+1]
		if sk.Value != "enableTenantHot" {
			return &FileError{File: file, Line: sk.Line, Field: "spec.strategy." + sk.Value, Reason: "unknown field (expected enableTenantHot)"}
		}
		b, err := boolVal(sv)
		if err != nil {
			return &FileError{File: file, Line: sv.Line, Field: "spec.strategy.enableTenantHot", Reason: err.Error()}
		}
		p.EnableTenantHot = b
	}
	return nil
}

// parseAffinityRouting sets spec.affinityRouting: Enabled or Disabled.
func parseAffinityRouting(_ string, v *yaml.Node, p *Policy) error {
	s, err := strVal(v)
	switch {
	case err != nil:
		return err
	case s == "Enabled":
		p.AffinityRouting = true
	case s == "Disabled":
		p.AffinityRouting = false
	default:
		return fmt.Errorf("%q must be Enabled or Disabled", s)
	}
	return nil
}

// parseBlockSize sets spec.blockSize: a mapping of model id to tokens per
// block.
func parseBlockSize(file string, v *yaml.Node, p *Policy) error {
	if v.Kind != yaml.MappingNode {
		return errors.New("must be a mapping of model_id to tokens per block, such as {qwen3-8b: 16}")
	}
	p.BlockSize = make(map[string]uint32, len(v.Content)/2)
	for j := 0; j+1 < len(v.Content); j += 2 {
		mk, mv := v.Content[j], v.Content[j+1]
		n, err := u32Val(mv)
		if err != nil {
			return &FileError{File: file, Line: mv.Line, Field: "spec.blockSize." + mk.Value, Reason: err.Error()}
		}
		p.BlockSize[mk.Value] = n
	}
	return nil
}

func scalar(v *yaml.Node) (string, error) {
	if v.Kind != yaml.ScalarNode {
		return "", errors.New("must be a single value, not a list or mapping")
	}
	return v.Value, nil
}

func boolVal(v *yaml.Node) (bool, error) {
	s, err := scalar(v)
	if err != nil {
		return false, err
	}
	switch s {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, fmt.Errorf("%q must be true or false", s)
}

func strVal(v *yaml.Node) (string, error) { return scalar(v) }

func u64Val(v *yaml.Node) (uint64, error) {
	s, err := scalar(v)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(strings.ReplaceAll(s, "_", ""), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q must be a non-negative integer", s)
	}
	return n, nil
}

func u32Val(v *yaml.Node) (uint32, error) {
	n, err := u64Val(v)
	if err != nil {
		return 0, err
	}
	if n > math.MaxUint32 {
		return 0, fmt.Errorf("%d is over the maximum %d", n, uint32(math.MaxUint32))
	}
	return uint32(n), nil
}

func floatVal(v *yaml.Node) (float64, error) {
	s, err := scalar(v)
	if err != nil {
		return 0, err
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%q must be a number", s)
	}
	return f, nil
}

// durVal accepts a Go duration ("600s", "10m") or an integer of seconds.
func durVal(v *yaml.Node) (time.Duration, error) {
	s, err := scalar(v)
	if err != nil {
		return 0, err
	}
	if n, err := strconv.ParseUint(s, 10, 32); err == nil {
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q must be a duration such as 600s or 10m, or an integer of seconds", s)
	}
	return d, nil
}

func yamlErrLine(err error) int {
	// yaml.v3 messages look like "yaml: line 3: mapping values are not allowed".
	msg := err.Error()
	if i := strings.Index(msg, "line "); i >= 0 {
		rest := msg[i+5:]
		if j := strings.IndexByte(rest, ':'); j > 0 {
			if n, err := strconv.Atoi(rest[:j]); err == nil {
				return n
			}
		}
	}
	return 0
}

func yamlErrMsg(err error) string {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if i := strings.Index(msg, ": "); i >= 0 && strings.HasPrefix(msg, "line ") {
		return msg[i+2:]
	}
	return msg
}

// BaseVersion returns the policy version a file was written from: the
// "# version N" comment MarshalYAML puts on its first line (what `policy
// get` prints). ok is false when the file has no such first line (written
// by hand). Parse ignores the comment: the server sets versions.
func BaseVersion(data []byte) (v uint64, ok bool) {
	line, _, _ := strings.Cut(string(data), "\n")
	rest, found := strings.CutPrefix(strings.TrimSpace(line), "# version ")
	if !found {
		return 0, false
	}
	v, err := strconv.ParseUint(strings.TrimSpace(rest), 10, 64)
	return v, err == nil
}

// MarshalYAML renders p as a policy file that Parse reads back to the same
// knobs (Version is written as a comment, read back by BaseVersion).
func MarshalYAML(p Policy) []byte {
	var b strings.Builder
	aff := "Disabled"
	if p.AffinityRouting {
		aff = "Enabled"
	}
	fmt.Fprintf(&b, "# version %d\nkind: CachePolicy\nspec:\n", p.Version)
	fmt.Fprintf(&b, "  chainMatching: %t\n", p.ChainMatching)
	fmt.Fprintf(&b, "  minimumMatchedTokens: %d\n", p.MinimumMatchedTokens)
	fmt.Fprintf(&b, "  routingFloorScore: %q\n", p.RoutingFloorScore)
	fmt.Fprintf(&b, "  lookupTimeoutMs: %d\n", p.LookupTimeout.Milliseconds())
	fmt.Fprintf(&b, "  evictionTTL: %s\n", p.EvictionTTL)
	fmt.Fprintf(&b, "  evictionPolicy: %s\n", p.EvictionPolicy)
	fmt.Fprintf(&b, "  maxResidencies: %d\n", p.MaxResidencies)
	fmt.Fprintf(&b, "  pressureWeight: %s\n", strconv.FormatFloat(p.PressureWeight, 'g', -1, 64))
	fmt.Fprintf(&b, "  sloTightThresholdMs: %d\n", p.SLOTightThreshold.Milliseconds())
	fmt.Fprintf(&b, "  sloTightBias: %s\n", strconv.FormatFloat(p.SLOTightBias, 'g', -1, 64))
	fmt.Fprintf(&b, "  strategy:\n    enableTenantHot: %t\n", p.EnableTenantHot)
	fmt.Fprintf(&b, "  tenantHotMinHitRate: %s\n", strconv.FormatFloat(p.TenantHotMinHitRate, 'g', -1, 64))
	fmt.Fprintf(&b, "  statsFreshness: %s\n", p.StatsFreshness)
	fmt.Fprintf(&b, "  affinityRouting: %s\n", aff)
	fmt.Fprintf(&b, "  maxReplicas: %d\n", p.MaxReplicas)
	fmt.Fprintf(&b, "  rankingVersion: %s\n", p.RankingVersion)
	if len(p.BlockSize) == 0 {
		b.WriteString("  blockSize: {}\n")
	} else {
		b.WriteString("  blockSize:\n")
		models := make([]string, 0, len(p.BlockSize))
		for m := range p.BlockSize {
			models = append(models, m)
		}
		sort.Strings(models)
		for _, m := range models {
			fmt.Fprintf(&b, "    %q: %d\n", m, p.BlockSize[m])
		}
	}
	fmt.Fprintf(&b, "  maxStaleness: %s\n", p.MaxStaleness)
	if p.EvictionBatch != 0 {
		fmt.Fprintf(&b, "  evictionBatch: %d\n", p.EvictionBatch)
	}
	return []byte(b.String())
}
