// Command check validates Kubernetes manifests offline (make deploy-check):
// the built-in kinds by strict decoding into their k8s.io/api types (an
// unknown field or a wrong type fails), the custom resources (InferencePool,
// HTTPRoute) with kubeconform against the CRD schemas committed under the
// directory's testdata/ (see its PROVENANCE.md).
//
//	go run ./deploy/check deploy/kubernetes/picker
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
	rbacv1 "k8s.io/api/rbac/v1"
	sigsyaml "sigs.k8s.io/yaml"
)

// typed are the built-in kinds, by apiVersion/kind.
var typed = map[string]func() any{
	"v1/Service":                                      func() any { return &corev1.Service{} },
	"v1/ServiceAccount":                               func() any { return &corev1.ServiceAccount{} },
	"v1/ConfigMap":                                    func() any { return &corev1.ConfigMap{} },
	"apps/v1/Deployment":                              func() any { return &appsv1.Deployment{} },
	"rbac.authorization.k8s.io/v1/Role":               func() any { return &rbacv1.Role{} },
	"rbac.authorization.k8s.io/v1/RoleBinding":        func() any { return &rbacv1.RoleBinding{} },
	"rbac.authorization.k8s.io/v1/ClusterRole":        func() any { return &rbacv1.ClusterRole{} },
	"rbac.authorization.k8s.io/v1/ClusterRoleBinding": func() any { return &rbacv1.ClusterRoleBinding{} },
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: check DIR")
		os.Exit(2)
	}
	n, err := check(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("deploy-check: %d resources valid in %s\n", n, os.Args[1])
}

// check validates every resource of dir's kustomization.yaml; it
// returns how many.
func check(dir string) (int, error) {
	schemas, err := os.MkdirTemp("", "deploy-check-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(schemas)
	if err := writeSchemas(filepath.Join(dir, "testdata"), schemas); err != nil {
		return 0, err
	}
	v, err := validator.New([]string{filepath.Join(schemas, "{{ .ResourceKind }}-{{ .Group }}-{{ .ResourceAPIVersion }}.json")},
		validator.Opts{Strict: true})
	if err != nil {
		return 0, err
	}
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
		for i, doc := range bytes.Split(b, []byte("\n---")) {
			var head struct {
				APIVersion string `yaml:"apiVersion"`
				Kind       string `yaml:"kind"`
			}
			if err := yaml.Unmarshal(doc, &head); err != nil {
				errs = append(errs, fmt.Errorf("%s document %d: %w", path, i, err))
				continue
			}
			if head.Kind == "" {
				continue // comments only
			}
			n++
			where := fmt.Sprintf("%s document %d (%s %s)", path, i, head.APIVersion, head.Kind)
			if mk, ok := typed[head.APIVersion+"/"+head.Kind]; ok {
				if err := sigsyaml.UnmarshalStrict(doc, mk()); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", where, err))
				}
				continue
			}
			for _, r := range v.Validate(path, io.NopCloser(bytes.NewReader(doc))) {
				switch r.Status {
				case validator.Valid, validator.Empty:
				default:
					errs = append(errs, fmt.Errorf("%s: %v %v", where, r.Err, r.ValidationErrors))
				}
			}
		}
	}
	return n, errors.Join(errs...)
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
