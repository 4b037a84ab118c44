package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// copyPicker copies deploy/kubernetes/picker to a temporary directory,
// with edit applied to file name.
func copyPicker(t *testing.T, name, from, to string) string {
	t.Helper()
	src := filepath.Join("..", "kubernetes", "picker")
	dst := t.TempDir()
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	if name != "" {
		p := filepath.Join(dst, name)
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), from) {
			t.Fatalf("%s has no %q (%v)", name, from, err)
		}
		if err := os.WriteFile(p, []byte(strings.Replace(string(b), from, to, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// The committed manifests pass; a wrong field of each kind of check
// fails, naming the file and what is wrong.
func TestCheck_PickerManifests(t *testing.T) {
	if n, err := check(copyPicker(t, "", "", "")); err != nil || n != 7 {
		t.Fatalf("%d resources, %v; want 7 valid", n, err)
	}
	for _, c := range []struct{ file, from, to, want string }{
		{"deployment.yaml", "  replicas: 3", "  replica: 3", `unknown field "replica"`},
		{"rbac.yaml", `verbs: ["get", "list", "watch"]`, `verbs: "get"`, "cannot unmarshal string"},
		{"inferencepool.yaml", "failureMode: FailOpen", "failureMode: Sometimes", "value must be one of 'FailOpen', 'FailClose'"},
		{"inferencepool.yaml", "targetPorts:", "targetPort:", "targetPort"},
		{"httproute.yaml", "kind: InferencePool", "kindd: InferencePool", "kindd"},
	} {
		_, err := check(copyPicker(t, c.file, c.from, c.to))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.file) {
			t.Errorf("%s %q→%q: %v, want an error naming the file and %q", c.file, c.from, c.to, err, c.want)
		}
	}
}
