package deploy_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/inference-cache/inference-cache/api"
	"github.com/inference-cache/inference-cache/policy"
)

// --- Kubernetes -------------------------------------------------------------

const (
	stsName      = "inference-cache"
	headlessName = "inference-cache-peers"
	clientName   = "inference-cache"
)

func TestKubernetes_EveryManifestListedInKustomization(t *testing.T) {
	m := loadManifests(t)
	k := m.byKind["Kustomization"]
	if len(k) != 1 {
		t.Fatalf("want one kustomization.yaml, got %d", len(k))
	}
	res := strs(k[0], "resources")
	for _, f := range m.files {
		if f != "kustomization.yaml" && !slices.Contains(res, f) {
			t.Errorf("%s is not in kustomization.yaml resources %v", f, res)
		}
	}
	for _, r := range res {
		if !slices.Contains(m.files, r) {
			t.Errorf("kustomization.yaml lists %s, which does not exist", r)
		}
	}
}

func TestKubernetes_StatefulSetThreeStableVotersWithVolumes(t *testing.T) {
	m := loadManifests(t)
	sts := m.one(t, "StatefulSet", stsName)
	if got := num(sts, "spec", "replicas"); got != 3 {
		t.Errorf("replicas = %d, want 3", got)
	}
	if got := str(sts, "spec", "serviceName"); got != headlessName {
		t.Errorf("serviceName = %q, want the headless Service %q (stable network ids)", got, headlessName)
	}
	if got := str(sts, "spec", "podManagementPolicy"); got != "Parallel" {
		t.Errorf("podManagementPolicy = %q, want Parallel (bootstrap_expect waits for all three)", got)
	}
	tmplLabels := get(sts, "spec", "template", "metadata", "labels")
	if !labelsMatch(get(sts, "spec", "selector", "matchLabels"), tmplLabels) {
		t.Errorf("selector %v does not match the pod labels %v", get(sts, "spec", "selector"), tmplLabels)
	}

	c := get(sts, "spec", "template", "spec", "containers", 0)
	args := parseArgs(t, strs(c, "args"))
	want1 := map[string]string{
		"node-id":          "$(POD_NAME)",
		"bootstrap-expect": "3",
		"advertise-addr":   "$(POD_NAME)." + headlessName,
		"data-dir":         "/data",
	}
	for k, v := range want1 {
		if got := args[k]; len(got) != 1 || got[0] != v {
			t.Errorf("--%s = %q, want %q", k, got, v)
		}
	}
	var wantJoin []string
	for i := range 3 {
		wantJoin = append(wantJoin, fmt.Sprintf("%s-%d.%s:7403", stsName, i, headlessName))
	}
	if !slices.Equal(args["join"], wantJoin) {
		t.Errorf("--join = %q, want every pod's stable gossip address %q", args["join"], wantJoin)
	}
	// $(POD_NAME) must come from the downward API.
	var podName bool
	for _, e := range list(c, "env") {
		if str(e, "name") == "POD_NAME" && str(e, "valueFrom", "fieldRef", "fieldPath") == "metadata.name" {
			podName = true
		}
	}
	if !podName {
		t.Error("env POD_NAME must come from fieldRef metadata.name")
	}

	// The data dir is a PVC from volumeClaimTemplates.
	vct := list(sts, "spec", "volumeClaimTemplates")
	if len(vct) != 1 || str(vct[0], "metadata", "name") != "data" ||
		!slices.Contains(strs(vct[0], "spec", "accessModes"), "ReadWriteOnce") || str(vct[0], "spec", "resources", "requests", "storage") == "" {
		t.Errorf("want one ReadWriteOnce volumeClaimTemplate named data with a size, got %v", vct)
	}
	mounts := map[string]string{}
	for _, vm := range list(c, "volumeMounts") {
		mounts[str(vm, "name")] = str(vm, "mountPath")
	}
	if mounts["data"] != args["data-dir"][0] {
		t.Errorf("PVC data mounted at %q, want --data-dir %q", mounts["data"], args["data-dir"][0])
	}
	if fs := num(sts, "spec", "template", "spec", "securityContext", "fsGroup"); fs != 65532 {
		t.Errorf("fsGroup = %d, want 65532 (the image's user) so the PVC is writable", fs)
	}
}

func TestKubernetes_PodAntiAffinityOneServerPerNode(t *testing.T) {
	m := loadManifests(t)
	sts := m.one(t, "StatefulSet", stsName)
	pod := get(sts, "spec", "template")
	req := list(pod, "spec", "affinity", "podAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
	if len(req) == 0 {
		t.Fatal("no required pod anti-affinity")
	}
	var ok bool
	for _, term := range req {
		if str(term, "topologyKey") == "kubernetes.io/hostname" && labelsMatch(get(term, "labelSelector", "matchLabels"), get(pod, "metadata", "labels")) {
			ok = true
		}
	}
	if !ok {
		t.Errorf("required anti-affinity must select the server pods on kubernetes.io/hostname: %v", req)
	}
}

func TestKubernetes_ProbesAndPorts(t *testing.T) {
	m := loadManifests(t)
	sts := m.one(t, "StatefulSet", stsName)
	c := get(sts, "spec", "template", "spec", "containers", 0)
	ports := map[string]int{}
	for _, p := range list(c, "ports") {
		ports[str(p, "name")] = num(p, "containerPort")
	}
	want := map[string]int{"grpc": 7401, "raft": 7402, "gossip-tcp": 7403, "gossip-udp": 7403, "metrics": 7404}
	for name, port := range want {
		if ports[name] != port {
			t.Errorf("container port %s = %d, want %d", name, ports[name], port)
		}
	}
	args := parseArgs(t, strs(c, "args"))
	for flag, port := range map[string]string{"grpc-addr": ":7401", "raft-addr": ":7402", "gossip-addr": ":7403", "http-addr": ":7404"} {
		if v := args[flag]; len(v) != 1 || !strings.HasSuffix(v[0], port) {
			t.Errorf("--%s = %q, want the port %s", flag, v, port)
		}
	}
	// Readiness: the gRPC health service, probed natively.
	for _, probe := range []string{"readinessProbe", "startupProbe"} {
		if got := num(c, probe, "grpc", "port"); got != 7401 {
			t.Errorf("%s.grpc.port = %d, want the gRPC port 7401 (grpc.health.v1)", probe, got)
		}
	}
	// The startup probe asks whether the state is loaded (it would
	// otherwise restart, forever, a node that only lacks a quorum); the
	// readiness probe asks the default service, which follows Serving.
	if got := str(c, "startupProbe", "grpc", "service"); got != api.StartedHealthService {
		t.Errorf("startupProbe.grpc.service = %q, want %q", got, api.StartedHealthService)
	}
	if got := str(c, "readinessProbe", "grpc", "service"); got != "" {
		t.Errorf("readinessProbe.grpc.service = %q, want the default (Serving)", got)
	}
	if p := get(c, "livenessProbe"); p == nil {
		t.Error("no livenessProbe")
	}
	// Prometheus scrape annotations point at the metrics port.
	ann := get(sts, "spec", "template", "metadata", "annotations")
	if str(ann, "prometheus.io/scrape") != "true" || str(ann, "prometheus.io/port") != "7404" || str(ann, "prometheus.io/path") != "/metrics" {
		t.Errorf("pod annotations %v: want prometheus.io/scrape=true, port=7404, path=/metrics", ann)
	}
}

func TestKubernetes_GracefulTerminationTransfersLeadership(t *testing.T) {
	m := loadManifests(t)
	sts := m.one(t, "StatefulSet", stsName)
	pod := get(sts, "spec", "template", "spec")
	args := parseArgs(t, strs(get(pod, "containers", 0), "args"))
	// SIGTERM → leadership transfer (raftnode: up to 5 s) → gRPC drain
	// (--shutdown-timeout). The grace period must cover both, or the kubelet
	// SIGKILLs a leader mid-transfer.
	shutdown := 10 // the flag's default, seconds
	if v := args["shutdown-timeout"]; len(v) == 1 {
		if _, err := fmt.Sscanf(v[0], "%ds", &shutdown); err != nil {
			t.Fatalf("--shutdown-timeout=%s: want whole seconds like 20s", v[0])
		}
	}
	const transfer = 5
	if g := num(pod, "terminationGracePeriodSeconds"); g < shutdown+transfer+5 {
		t.Errorf("terminationGracePeriodSeconds = %d, want ≥ %d (transfer %d s + shutdown %d s + 5 s slack)", g, shutdown+transfer+5, transfer, shutdown)
	}
	if h := get(pod, "containers", 0, "lifecycle", "preStop"); h != nil {
		t.Errorf("preStop hook %v: the image has no shell and the server handles SIGTERM itself", h)
	}
}

func TestKubernetes_Services(t *testing.T) {
	m := loadManifests(t)
	podLabels := get(m.one(t, "StatefulSet", stsName), "spec", "template", "metadata", "labels")

	h := m.one(t, "Service", headlessName)
	if str(h, "spec", "clusterIP") != "None" {
		t.Errorf("%s: clusterIP = %q, want None (headless)", headlessName, str(h, "spec", "clusterIP"))
	}
	if get(h, "spec", "publishNotReadyAddresses") != true {
		t.Errorf("%s: publishNotReadyAddresses must be true: peers find each other before they are ready", headlessName)
	}
	if !labelsMatch(get(h, "spec", "selector"), podLabels) {
		t.Errorf("%s: selector does not match the pods", headlessName)
	}
	proto := map[string]bool{}
	for _, p := range list(h, "spec", "ports") {
		proto[fmt.Sprintf("%d/%s", num(p, "port"), str(p, "protocol"))] = true
	}
	for _, p := range []string{"7402/TCP", "7403/TCP", "7403/UDP"} {
		if !proto[p] {
			t.Errorf("%s: no port %s (Raft / gossip)", headlessName, p)
		}
	}

	c := m.one(t, "Service", clientName)
	if typ := str(c, "spec", "type"); typ != "" && typ != "ClusterIP" {
		t.Errorf("%s: type %q, want ClusterIP", clientName, typ)
	}
	if str(c, "spec", "clusterIP") == "None" {
		t.Errorf("%s: the client Service must not be headless", clientName)
	}
	if !labelsMatch(get(c, "spec", "selector"), podLabels) {
		t.Errorf("%s: selector does not match the pods", clientName)
	}
	var grpc bool
	for _, p := range list(c, "spec", "ports") {
		if num(p, "port") == 7401 && str(p, "targetPort") == "grpc" {
			grpc = true
		}
	}
	if !grpc {
		t.Errorf("%s: no port 7401 → grpc", clientName)
	}
}

func TestKubernetes_PodDisruptionBudgetKeepsQuorum(t *testing.T) {
	m := loadManifests(t)
	pdbs := m.byKind["PodDisruptionBudget"]
	if len(pdbs) != 1 {
		t.Fatalf("want one PodDisruptionBudget, got %d", len(pdbs))
	}
	p := pdbs[0]
	if str(p, "apiVersion") != "policy/v1" || num(p, "spec", "minAvailable") != 2 {
		t.Errorf("PDB %v: want policy/v1 with minAvailable 2", p)
	}
	if !labelsMatch(get(p, "spec", "selector", "matchLabels"), get(m.one(t, "StatefulSet", stsName), "spec", "template", "metadata", "labels")) {
		t.Error("PDB selector does not match the server pods")
	}
}

func TestKubernetes_ConfigMapHoldsAValidCachePolicy(t *testing.T) {
	m := loadManifests(t)
	sts := m.one(t, "StatefulSet", stsName)
	pod := get(sts, "spec", "template", "spec")
	args := parseArgs(t, strs(get(pod, "containers", 0), "args"))
	pfile := args["policy"]
	if len(pfile) != 1 {
		t.Fatalf("--policy = %q, want the mounted ConfigMap file", pfile)
	}
	dir, key := filepath.Dir(pfile[0]), filepath.Base(pfile[0])
	var cmName string
	for _, vm := range list(pod, "containers", 0, "volumeMounts") {
		if str(vm, "mountPath") == dir {
			for _, v := range list(pod, "volumes") {
				if str(v, "name") == str(vm, "name") {
					cmName = str(v, "configMap", "name")
				}
			}
		}
	}
	if cmName == "" {
		t.Fatalf("no ConfigMap volume mounted at %s", dir)
	}
	cm := m.one(t, "ConfigMap", cmName)
	doc := str(cm, "data", key)
	if doc == "" {
		t.Fatalf("ConfigMap %s has no key %s", cmName, key)
	}
	p, err := policy.Parse("configmap "+cmName+"/"+key, []byte(doc))
	if err != nil {
		t.Fatalf("the ConfigMap's CachePolicy does not load: %v", err)
	}
	if p.MaxResidencies == 0 {
		t.Errorf("policy %+v", p)
	}
}
