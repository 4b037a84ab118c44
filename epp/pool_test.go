package epp

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"

	"github.com/inference-cache/inference-cache/internal/poll"
)

// pod is a running, ready pod of the test namespace.
func pod(name, ip string, lbl map[string]string) *corev1.Pod {
	return &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: lbl},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
}

// unstructuredPod is a pod as the API server's JSON gives it to the
// dynamic client.
func unstructuredPod(t *testing.T, p *corev1.Pod) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

// inferencePool is an InferencePool as api/v1/inferencepool_types.go of
// gateway-api-inference-extension v1.6.0 shapes it.
func inferencePool(match map[string]any, ports ...int64) *unstructured.Unstructured {
	tps := make([]any, len(ports))
	for i, p := range ports {
		tps[i] = map[string]any{"number": p}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
		"metadata": map[string]any{"name": "pool", "namespace": "ns"},
		"spec": map[string]any{"selector": map[string]any{"matchLabels": match}, "targetPorts": tps,
			"endpointPickerRef": map[string]any{"name": "picker", "port": map[string]any{"number": int64(9002)}, "failureMode": "FailOpen"}},
	}}
}

func endpointsOf(t *Table) []string {
	var out []string
	for _, e := range t.List() {
		out = append(out, e.Address+"="+e.ReplicaID)
	}
	return out
}

// The watch follows pods added, relabelled and deleted, and the pool's
// selector and ports changed, against client-go's fake clientsets.
func TestWatchPool_FollowsPodsAndThePoolSelector(t *testing.T) {
	ctx := context.Background()
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{InferencePoolResource: "InferencePoolList", PodResource: "PodList"},
		unstructuredPod(t, pod("vllm-0", "10.0.0.1", map[string]string{"app": "vllm"})),
		unstructuredPod(t, pod("vllm-1", "10.0.0.2", map[string]string{"app": "vllm", DefaultReplicaLabel: "engine-b"})),
		unstructuredPod(t, pod("other", "10.0.0.9", map[string]string{"app": "other"})),
	)
	tbl := &Table{}
	w, err := WatchPool(ctx, PoolWatchConfig{Dynamic: dyn, Namespace: "ns", Name: "pool", Table: tbl})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if tbl.Synced() {
		t.Fatal("synced (ready) before the InferencePool exists")
	}
	pools := dyn.Resource(InferencePoolResource).Namespace("ns")
	if _, err := pools.Create(ctx, inferencePool(map[string]any{"app": "vllm"}, 8000), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect := func(what string, want ...string) {
		t.Helper()
		poll.Eventually(t, 5*time.Second, 5*time.Millisecond, func() (bool, string) {
			got := endpointsOf(tbl)
			return tbl.Synced() && slices.Equal(got, want), what + ": " + join(got)
		})
	}
	// The replica id is the pod name, or the label's value.
	expect("pool created", "10.0.0.1:8000=vllm-0", "10.0.0.2:8000=engine-b")

	pods := dyn.Resource(PodResource).Namespace("ns")
	if _, err := pods.Create(ctx, unstructuredPod(t, pod("vllm-2", "10.0.0.3", map[string]string{"app": "vllm"})), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("pod added", "10.0.0.1:8000=vllm-0", "10.0.0.2:8000=engine-b", "10.0.0.3:8000=vllm-2")

	p := pod("vllm-0", "10.0.0.1", map[string]string{"app": "vllm", DefaultReplicaLabel: "engine-a"})
	if _, err := pods.Update(ctx, unstructuredPod(t, p), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("pod relabelled with a replica id", "10.0.0.1:8000=engine-a", "10.0.0.2:8000=engine-b", "10.0.0.3:8000=vllm-2")

	p = pod("vllm-2", "10.0.0.3", map[string]string{"app": "gone"})
	if _, err := pods.Update(ctx, unstructuredPod(t, p), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("pod relabelled out of the selector", "10.0.0.1:8000=engine-a", "10.0.0.2:8000=engine-b")

	notReady := pod("vllm-1", "10.0.0.2", map[string]string{"app": "vllm", DefaultReplicaLabel: "engine-b"})
	notReady.Status.Conditions[0].Status = corev1.ConditionFalse
	if _, err := pods.Update(ctx, unstructuredPod(t, notReady), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("pod not ready", "10.0.0.1:8000=engine-a")

	if err := pods.Delete(ctx, "vllm-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("pod deleted")

	// The selector changed to another app, with two target ports (a
	// data-parallel engine): one endpoint per port, rank 1's replica id
	// as the subscriber names it.
	if _, err := pools.Update(ctx, inferencePool(map[string]any{"app": "other"}, 8000, 8001), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("pool selector changed", "10.0.0.9:8000=other", "10.0.0.9:8001=other-dp1")

	if err := pools.Delete(ctx, "pool", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("pool deleted")
}

func join(s []string) string { return "[" + strings.Join(s, " ") + "]" }

// A spec the picker cannot use is refused, naming the field.
func TestPoolSpec_RefusesNamingTheField(t *testing.T) {
	for want, u := range map[string]*unstructured.Unstructured{
		"spec.selector.matchLabels: required":   inferencePool(map[string]any{}, 8000),
		"spec.targetPorts: required":            inferencePool(map[string]any{"app": "x"}),
		"spec.targetPorts[0].number: want 1 to": inferencePool(map[string]any{"app": "x"}, 0),
	} {
		if _, _, err := poolSpec(u); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v, want %q", err, want)
		}
	}
}
