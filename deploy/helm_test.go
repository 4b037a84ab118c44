package deploy_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

// chartDir is the Helm chart, relative to this package.
const chartDir = "helm/inference-cache"

// kustomizeDirs are the kustomize directories the chart's defaults must
// equal, together.
var kustomizeDirs = []string{"kubernetes", "kubernetes/picker", "kubernetes/subscriber"}

// helmTemplate renders the chart with helm (helm.sh/helm/v4, pinned in
// tools/go.mod) and the extra arguments; it returns the output or the
// error with helm's message.
func helmTemplate(t *testing.T, args ...string) (string, error) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs helm through go tool (built on first use)")
	}
	abs, err := filepath.Abs(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", append([]string{"-C", "../tools", "tool", "helm", "template", "ic", abs}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%v: %s", err, stderr.String())
	}
	return string(out), nil
}

// objects parses a stream of YAML documents into objects by
// "kind/name"; a name used twice for one kind fails the test.
func objects(t *testing.T, where, stream string) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, doc := range strings.Split(stream, "\n---") {
		var o map[string]any
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		if o == nil {
			continue
		}
		md, _ := o["metadata"].(map[string]any)
		key := fmt.Sprintf("%v/%v", o["kind"], md["name"])
		if _, dup := out[key]; dup {
			t.Fatalf("%s: %s twice", where, key)
		}
		out[key] = o
	}
	return out
}

// kustomizeObjects reads every resource of the kustomize directories.
func kustomizeObjects(t *testing.T) map[string]map[string]any {
	t.Helper()
	var all []string
	for _, d := range kustomizeDirs {
		var k struct {
			Resources []string `json:"resources"`
		}
		b, err := os.ReadFile(filepath.Join(d, "kustomization.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, &k); err != nil {
			t.Fatal(err)
		}
		for _, r := range k.Resources {
			b, err := os.ReadFile(filepath.Join(d, r))
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, string(b))
		}
	}
	return objects(t, "kustomize manifests", strings.Join(all, "\n---\n"))
}

// The chart with its default values renders exactly the objects of the
// kustomize manifests (deploy/kubernetes, its picker and subscriber), and
// the picker's InferencePool fails open.
func TestHelm_DefaultsRenderTheKustomizeObjects(t *testing.T) {
	out, err := helmTemplate(t)
	if err != nil {
		t.Fatal(err)
	}
	chart, kust := objects(t, "helm template", out), kustomizeObjects(t)
	if d := cmp.Diff(kust, chart); d != "" {
		t.Fatalf("helm template differs from the kustomize manifests (-kustomize +helm):\n%s", d)
	}
	if fm := get(chart["InferencePool/vllm-qwen3"], "spec", "endpointPickerRef", "failureMode"); fm != "FailOpen" {
		t.Errorf("InferencePool failureMode %v, want FailOpen", fm)
	}
}

// Five voters: five --join peers, --bootstrap-expect=5 and a budget that
// keeps three; TLS, gossip key and tokens reach the servers' and the
// clients' flags; the proxy renders when enabled; values no cluster runs
// with are refused, naming the value.
func TestHelm_ValuesShapeTheCluster(t *testing.T) {
	out, err := helmTemplate(t, "--set", "server.replicas=5", "--set", "tls.enabled=true", "--set", "tls.clientAuth=require-and-verify",
		"--set", "tokens.secretName=ic-tokens", "--set", "gossipKey.secretName=ic-gossip", "--set", "server.antiAffinity=preferred",
		"--set", "proxy.enabled=true", "--set", "proxy.backends[0].replica_id=vllm-0", "--set", "proxy.backends[0].url=http://vllm-0:8000")
	if err != nil {
		t.Fatal(err)
	}
	objs := objects(t, "helm template", out)
	sts := objs["StatefulSet/inference-cache"]
	args := flagsOf(strs(get(sts, "spec", "template", "spec", "containers", 0), "args"))
	if got := args["--join"]; len(got) != 5 || got[4] != "inference-cache-4.inference-cache-peers:7403" {
		t.Errorf("--join %v, want the five peers", got)
	}
	for flag, want := range map[string]string{"--bootstrap-expect": "5", "--tls-client-auth": "require-and-verify", "--raft-tls": "",
		"--tls-cert": "/etc/inference-cache-tls/tls.crt", "--gossip-key-file": "/etc/inference-cache-gossip/gossip.key",
		"--write-token-file": "/etc/inference-cache-tokens/write.token", "--admin-token-file": "/etc/inference-cache-tokens/admin.token"} {
		if got := args[flag]; len(got) != 1 || got[0] != want {
			t.Errorf("server %s = %v, want [%s]", flag, got, want)
		}
	}
	if got := get(objs["PodDisruptionBudget/inference-cache"], "spec", "minAvailable"); got != float64(3) {
		t.Errorf("PDB minAvailable %v, want 3 of 5", got)
	}
	if get(sts, "spec", "template", "spec", "affinity", "podAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution") != nil {
		t.Error("antiAffinity preferred still requires one server per node")
	}
	for _, d := range []string{"Deployment/inference-cache-picker", "Deployment/inference-cache-subscriber", "Deployment/inference-cache-proxy"} {
		c := get(objs[d], "spec", "template", "spec", "containers", 0)
		a := flagsOf(strs(c, "args"))
		if a["--tls-ca"] == nil || a["--tls-cert"] == nil || a["--token-file"] == nil {
			t.Errorf("%s: client flags %v lack --tls-ca, --tls-cert or --token-file", d, a)
		}
	}

	for _, c := range []struct{ set, want string }{
		{"server.replicas=4", "server.replicas 4: want 3 or 5"},
		{"picker.failureMode=Sometimes", `picker.failureMode "Sometimes": want FailOpen or FailClose`},
		{"proxy.enabled=true", "proxy.backends: give at least one backend"},
	} {
		if _, err := helmTemplate(t, "--set", c.set); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--set %s: %v, want an error with %q", c.set, err, c.want)
		}
	}
}

// flagsOf is a container's args (after the subcommand) by flag, "--x=v"
// and a bare "--x" (value "").
func flagsOf(args []string) map[string][]string {
	out := map[string][]string{}
	for _, a := range args[1:] {
		k, v, _ := strings.Cut(a, "=")
		out[k] = append(out[k], v)
	}
	return out
}
