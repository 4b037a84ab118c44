// Static checks of the deployment files: every Kubernetes manifest under
// kubernetes/ and the compose file under compose/ are parsed and held to the
// properties docs/operations.md promises (there is no cluster here to apply
// them to; the compose file is also run for real by compose/compose_test.go).
package deploy_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"gopkg.in/yaml.v3"
)

type obj = map[string]any

// --- generic access ----------------------------------------------------

// get walks a path of map keys and list indexes through decoded YAML.
func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(obj)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func str(v any, path ...any) string {
	s, _ := get(v, path...).(string)
	return s
}

func num(v any, path ...any) int {
	n, _ := get(v, path...).(int)
	return n
}

func list(v any, path ...any) []any {
	l, _ := get(v, path...).([]any)
	return l
}

func strs(v any, path ...any) []string {
	var out []string
	for _, x := range list(v, path...) {
		out = append(out, fmt.Sprint(x))
	}
	return out
}

// --- loading -------------------------------------------------------------

type manifests struct {
	byKind map[string][]obj
	files  []string
}

func (m manifests) one(t *testing.T, kind, name string) obj {
	t.Helper()
	for _, o := range m.byKind[kind] {
		if str(o, "metadata", "name") == name {
			return o
		}
	}
	t.Fatalf("no %s named %q among the manifests", kind, name)
	return nil
}

func loadManifests(t *testing.T) manifests {
	t.Helper()
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests under kubernetes/: %v", err)
	}
	m := manifests{byKind: map[string][]obj{}}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for i := 0; ; i++ {
			var o obj
			if err := dec.Decode(&o); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			if o == nil {
				continue
			}
			kind := str(o, "kind")
			if kind == "" || str(o, "apiVersion") == "" || (kind != "Kustomization" && str(o, "metadata", "name") == "") {
				t.Fatalf("%s document %d: apiVersion, kind and metadata.name are required: %v", f, i, o)
			}
			m.byKind[kind] = append(m.byKind[kind], o)
		}
		m.files = append(m.files, filepath.Base(f))
	}
	return m
}

// serverFlags are the flags `inference-cache server` accepts, read from its
// --help, so a renamed flag breaks this test instead of a deployment.
var serverFlags = sync.OnceValues(func() (map[string]bool, error) {
	out, err := exec.Command("go", "run", "../cmd/inference-cache", "server", "--help").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("inference-cache server --help: %v\n%s", err, out)
	}
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9-]+)`).FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	if !flags["node-id"] || !flags["bootstrap-expect"] {
		return nil, fmt.Errorf("could not read the flags from --help:\n%s", out)
	}
	return flags, nil
})

// checkFlag fails t when `inference-cache server` has no flag --flag.
// Reading the flags builds and links the whole binary (`go run`, most of
// this package's time), so -short leaves the flag names to the full tier.
func checkFlag(t *testing.T, where, flag string) {
	t.Helper()
	if testing.Short() {
		return
	}
	flags, err := serverFlags()
	if err != nil {
		t.Fatal(err)
	}
	if !flags[flag] {
		t.Errorf("%s: `inference-cache server` has no flag --%s", where, flag)
	}
}

// parseArgs turns ["server", "--a=b", "--c=d", "--c=e"] into {a: [b], c: [d, e]}.
func parseArgs(t *testing.T, args []string) map[string][]string {
	t.Helper()
	if len(args) == 0 || args[0] != "server" {
		t.Fatalf("container args must start with the server subcommand: %q", args)
	}
	out := map[string][]string{}
	for _, a := range args[1:] {
		k, v, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !ok {
			t.Fatalf("arg %q: want --flag=value", a)
		}
		checkFlag(t, "statefulset args", k)
		out[k] = append(out[k], v)
	}
	return out
}

func labelsMatch(selector, labels any) bool {
	sel, _ := selector.(obj)
	lab, _ := labels.(obj)
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if lab[k] != v {
			return false
		}
	}
	return true
}
