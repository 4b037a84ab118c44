// Command check validates Kubernetes manifests offline (make deploy-check,
// make helm-check): the built-in kinds by strict decoding into their
// k8s.io/api types (an unknown field or a wrong type fails), the custom
// resources (InferencePool, HTTPRoute) with kubeconform against the CRD
// schemas committed under deploy/kubernetes/picker/testdata (see its
// PROVENANCE.md). It reads a kustomize directory's resources, or with "-"
// a stream of YAML documents on stdin (helm template's output).
//
//	go run ./deploy/check deploy/kubernetes/picker
//	helm template ic deploy/helm/inference-cache | go run ./deploy/check -
package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/yannh/kubeconform/pkg/validator"
	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	sigsyaml "sigs.k8s.io/yaml"
)

// typed are the built-in kinds, by apiVersion/kind.
var typed = map[string]func() any{
	"v1/Service":                                      func() any { return &corev1.Service{} },
	"v1/ServiceAccount":                               func() any { return &corev1.ServiceAccount{} },
	"v1/ConfigMap":                                    func() any { return &corev1.ConfigMap{} },
	"apps/v1/Deployment":                              func() any { return &appsv1.Deployment{} },
	"apps/v1/StatefulSet":                             func() any { return &appsv1.StatefulSet{} },
	"policy/v1/PodDisruptionBudget":                   func() any { return &policyv1.PodDisruptionBudget{} },
	"rbac.authorization.k8s.io/v1/Role":               func() any { return &rbacv1.Role{} },
	"rbac.authorization.k8s.io/v1/RoleBinding":        func() any { return &rbacv1.RoleBinding{} },
	"rbac.authorization.k8s.io/v1/ClusterRole":        func() any { return &rbacv1.ClusterRole{} },
	"rbac.authorization.k8s.io/v1/ClusterRoleBinding": func() any { return &rbacv1.ClusterRoleBinding{} },
}

// crdDir holds the CRD schemas of the custom resources (stdin mode; a
// directory's own testdata/ otherwise).
const crdDir = "deploy/kubernetes/picker/testdata"

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: check DIR | check - (YAML documents on stdin)")
		os.Exit(2)
	}
	var n int
	var err error
	if os.Args[1] == "-" {
		n, err = checkStream(os.Stdin, "stdin", crdDir)
	} else {
		n, err = check(os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("deploy-check: %d resources valid in %s\n", n, os.Args[1])
}

// newValidator is kubeconform over the CRDs of crds, strict; done removes
// its schema files.
func newValidator(crds string) (v validator.Validator, done func(), err error) {
	schemas, err := os.MkdirTemp("", "deploy-check-")
	if err != nil {
		return nil, nil, err
	}
	done = func() { os.RemoveAll(schemas) }
	if err := writeSchemas(crds, schemas); err != nil {
		done()
		return nil, nil, err
	}
	v, err = validator.New([]string{filepath.Join(schemas, "{{ .ResourceKind }}-{{ .Group }}-{{ .ResourceAPIVersion }}.json")},
		validator.Opts{Strict: true})
	if err != nil {
		done()
		return nil, nil, err
	}
	return v, done, nil
}

// checkStream validates every document of r (named where in errors)
// against the CRDs of crds; it returns how many resources it held.
func checkStream(r io.Reader, where, crds string) (int, error) {
	v, done, err := newValidator(crds)
	if err != nil {
		return 0, err
	}
	defer done()
	b, err := io.ReadAll(r)
	if err != nil {
		return 0, err
	}
	var errs []error
	n := checkDocs(v, where, b, &errs)
	if n == 0 && len(errs) == 0 {
		return 0, fmt.Errorf("%s: no resources", where)
	}
	return n, errors.Join(errs...)
}

// check validates every resource of dir's kustomization.yaml; it
// returns how many.
func check(dir string) (int, error) {
	v, done, err := newValidator(filepath.Join(dir, "testdata"))
	if err != nil {
		return 0, err
	}
	defer done()
	var kust struct {
		Resources []string `yaml:"resources"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return 0, err
	}
	if err := yaml.Unmarshal(b, &kust); err != nil || len(kust.Resources) == 0 {
		return 0, fmt.Errorf("%s/kustomization.yaml: no resources (%v)", dir, err)
	}
	n := 0
	var errs []error
	for _, f := range kust.Resources {
		path := filepath.Join(dir, f)
		b, err := os.ReadFile(path)
		if err != nil {
			return 0, err
		}
		n += checkDocs(v, path, b, &errs)
	}
	return n, errors.Join(errs...)
}

// checkDocs validates each YAML document of b (from path), appending
// what is wrong to errs; it returns how many resources b held.
func checkDocs(v validator.Validator, path string, b []byte, errs *[]error) int {
	n := 0
	for i, doc := range bytes.Split(b, []byte("\n---")) {
		var head struct {
			APIVersion string `yaml:"apiVersion"`
			Kind       string `yaml:"kind"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			*errs = append(*errs, fmt.Errorf("%s document %d: %w", path, i, err))
			continue
		}
		if head.Kind == "" {
			continue // comments only
		}
		n++
		where := fmt.Sprintf("%s document %d (%s %s)", path, i, head.APIVersion, head.Kind)
		if mk, ok := typed[head.APIVersion+"/"+head.Kind]; ok {
			if err := sigsyaml.UnmarshalStrict(doc, mk()); err != nil {
				*errs = append(*errs, fmt.Errorf("%s: %w", where, err))
			}
			continue
		}
		for _, r := range v.Validate(path, io.NopCloser(bytes.NewReader(doc))) {
			switch r.Status {
			case validator.Valid, validator.Empty:
			default:
				*errs = append(*errs, fmt.Errorf("%s: %v %v", where, r.Err, r.ValidationErrors))
			}
		}
	}
	return n
}

// writeSchemas turns every CRD under dir into one strict JSON schema per
// version, named as the validator's template asks.
func writeSchemas(dir, out string) error {
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if len(files) == 0 {
		return fmt.Errorf("%s: no CRD schemas", dir)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var crd struct {
			Spec struct {
				Group string `yaml:"group"`
				Names struct {
					Kind string `yaml:"kind"`
				} `yaml:"names"`
				Versions []struct {
					Name   string `yaml:"name"`
					Schema struct {
						OpenAPIV3Schema map[string]any `yaml:"openAPIV3Schema"`
					} `yaml:"schema"`
				} `yaml:"versions"`
			} `yaml:"spec"`
		}
		if err := yaml.Unmarshal(b, &crd); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		group := crd.Spec.Group
		for _, ver := range crd.Spec.Versions {
			s := ver.Schema.OpenAPIV3Schema
			strict(s)
			j, err := sigsyaml.Marshal(s)
			if err != nil {
				return err
			}
			if j, err = sigsyaml.YAMLToJSON(j); err != nil {
				return err
			}
			name := fmt.Sprintf("%s-%s-%s.json", strings.ToLower(crd.Spec.Names.Kind), group, ver.Name)
			if err := os.WriteFile(filepath.Join(out, name), j, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// strict forbids properties not listed, in every object schema that
// lists them (and does not say otherwise), as openapi2jsonschema --strict.
func strict(s map[string]any) {
	if props, ok := s["properties"].(map[string]any); ok {
		if _, set := s["additionalProperties"]; !set {
			s["additionalProperties"] = false
		}
		for _, p := range props {
			if m, ok := p.(map[string]any); ok {
				strict(m)
			}
		}
	}
	for _, k := range []string{"items", "additionalProperties"} {
		if m, ok := s[k].(map[string]any); ok {
			strict(m)
		}
	}
	for _, k := range []string{"allOf", "anyOf", "oneOf"} {
		if l, ok := s[k].([]any); ok {
			for _, e := range l {
				if m, ok := e.(map[string]any); ok {
					strict(m)
				}
			}
		}
	}
}
