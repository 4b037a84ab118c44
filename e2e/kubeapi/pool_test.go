package kubeapi

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/inference-cache/inference-cache/epp"
	"github.com/inference-cache/inference-cache/internal/fixtures"
	"github.com/inference-cache/inference-cache/internal/freeport"
	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/internal/syncbuf"
)

// followBound is how soon after an API call the picker's endpoints must
// show it. The informers are watches, so it is usually milliseconds; the
// bound leaves room for a loaded two-core machine.
const followBound = 10 * time.Second

// The CRD the picker's InferencePool comes from: the one deploy-check
// validates the manifests against (gateway-api-inference-extension v1.6.0,
// see its PROVENANCE.md).

// apiServer is a running etcd and kube-apiserver pair, and a client
// config for it.
type apiServer struct {
	cfg *rest.Config
}

// startAPIServer starts etcd and kube-apiserver on free loopback ports
// with data under a temporary directory; both are stopped when the test
// ends. Authentication is one static token (group system:masters),
// authorization AlwaysAllow; the ServiceAccount admission plugin is off,
// since no controller creates the default service account.
func startAPIServer(t *testing.T) *apiServer {
	etcdBin, apiBin, err := serverBinaries(t.Logf)
	if err != nil {
		t.Fatalf("building the API server from its Go modules: %v", err)
	}
	dir := t.TempDir()
	ports := make([]int, 3)
	for i := range ports {
		if ports[i], err = freeport.Port(); err != nil {
			t.Fatal(err)
		}
	}
	client, peer, secure := ports[0], ports[1], ports[2]
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(client)
	run(t, "etcd", etcdBin, "--data-dir", filepath.Join(dir, "etcd"), "--name", "test",
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", "http://127.0.0.1:"+strconv.Itoa(peer),
		"--initial-advertise-peer-urls", "http://127.0.0.1:"+strconv.Itoa(peer),
		"--initial-cluster", "test=http://127.0.0.1:"+strconv.Itoa(peer), "--log-level", "warn")

	key := filepath.Join(dir, "sa.key")
	if err := writeServiceAccountKey(key); err != nil {
		t.Fatal(err)
	}
	const token = "inference-cache-e2e-token"
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(token+`,admin,admin,"system:masters"`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	apiDone := run(t, "kube-apiserver", apiBin, "--etcd-servers", etcdURL,
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", strconv.Itoa(secure),
		"--cert-dir", filepath.Join(dir, "certs"), "--token-auth-file", tokens, "--authorization-mode", "AlwaysAllow",
		"--service-account-issuer", "https://kubernetes.default.svc", "--service-account-key-file", key,
		"--service-account-signing-key-file", key, "--service-cluster-ip-range", "10.96.0.0/24",
		"--disable-admission-plugins", "ServiceAccount",
		// A loopback advertise address cannot be the kubernetes
		// Service's endpoint; no client here needs that Service.
		"--endpoint-reconciler-type", "none")

	cfg := &rest.Config{Host: "https://127.0.0.1:" + strconv.Itoa(secure), BearerToken: token,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: 100, Burst: 200}
	kube := kubernetes.NewForConfigOrDie(cfg)
	poll.Eventually(t, 3*time.Minute, 250*time.Millisecond, func() (bool, string) {
		select {
		case <-apiDone:
			t.Fatal("kube-apiserver exited while starting (its output follows)")
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		b, err := kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil, fmt.Sprintf("kube-apiserver /readyz: %v %s", err, b)
	})
	return &apiServer{cfg: cfg}
}

// run starts a server process that the test's end stops (SIGTERM, then
// SIGKILL after 10 s); its output is logged when the test fails. The
// channel closes when the process exits.
func run(t *testing.T, name, bin string, args ...string) <-chan struct{} {
	cmd := exec.Command(bin, args...)
	var out syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			s := out.String()
			t.Logf("%s output (last 4000 bytes):\n%s", name, s[max(0, len(s)-4000):])
		}
	})
	return done
}

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// applyCRD creates the InferencePool CRD and waits until it is
// established (its resource served).
func applyCRD(t *testing.T, ctx context.Context, dyn dynamic.Interface) {
	b, err := os.ReadFile(fixtures.Path(t, "deploy", "kubernetes", "picker", "testdata", "inference.networking.k8s.io_inferencepools.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := yaml.Unmarshal(b, &obj); err != nil {
		t.Fatal(err)
	}
	crd := &unstructured.Unstructured{Object: obj}
	if _, err := dyn.Resource(crdResource).Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the InferencePool CRD: %v", err)
	}
	poll.Eventually(t, time.Minute, 100*time.Millisecond, func() (bool, string) {
		got, err := dyn.Resource(crdResource).Get(ctx, crd.GetName(), metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("CRD not established: %v", conds)
	})
}

// inferencePool is an InferencePool of namespace ns as
// api/v1/inferencepool_types.go of gateway-api-inference-extension v1.6.0
// shapes it (the API server validates it against the CRD's schema).
func inferencePool(ns string, match map[string]any, ports ...int64) *unstructured.Unstructured {
	tps := make([]any, len(ports))
	for i, p := range ports {
		tps[i] = map[string]any{"number": p}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
		"metadata": map[string]any{"name": "pool", "namespace": ns},
		"spec": map[string]any{"selector": map[string]any{"matchLabels": match}, "targetPorts": tps,
			"endpointPickerRef": map[string]any{"name": "picker", "port": map[string]any{"number": int64(9002)}, "failureMode": "FailOpen"}},
	}}
}

// podSpec is a pod of ns with one container (the API server requires
// one); no kubelet runs it.
func podSpec(ns, name string, lbl map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: lbl},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "vllm/vllm-openai"}}}}
}

// The picker's InferencePool watch follows a real API server: the pool
// created after the CRD is applied; pods created and made ready (as a
// kubelet reports them), relabelled with a replica id and out of the
// selector, made unready and deleted; the pool's selector and target
// ports changed; the pool deleted. Each change shows in the endpoints
// within followBound.
func TestPoolWatch_FollowsARealAPIServer(t *testing.T) {
	if os.Getenv("IC_KUBEAPI_E2E") != "1" {
		t.Skip("builds and starts etcd and kube-apiserver: its own suite, make kubeapi-e2e (IC_KUBEAPI_E2E=1), which .ci/run runs")
	}
	srv := startAPIServer(t)
	ctx := context.Background()
	kube := kubernetes.NewForConfigOrDie(srv.cfg)
	dyn := dynamic.NewForConfigOrDie(srv.cfg)
	applyCRD(t, ctx, dyn)
	const ns = "inference"
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	tbl := &epp.Table{}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	w, err := epp.WatchPool(wctx, epp.PoolWatchConfig{Dynamic: dyn, Namespace: ns, Name: "pool", Table: tbl})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if tbl.Synced() {
		t.Fatal("synced (ready) before the InferencePool exists")
	}

	// changed is when the last change was sent to the API server: each
	// expect measures from there.
	var slowest time.Duration
	var changed time.Time
	expect := func(what string, want ...string) {
		t.Helper()
		poll.Eventually(t, followBound, 5*time.Millisecond, func() (bool, string) {
			var got []string
			for _, e := range tbl.List() {
				got = append(got, e.Address+"="+e.ReplicaID)
			}
			return tbl.Synced() && slices.Equal(got, want), fmt.Sprintf("%s: endpoints %v, want %v", what, got, want)
		})
		took := time.Since(changed)
		slowest = max(slowest, took)
		t.Logf("%s: followed in %v", what, took.Round(time.Millisecond))
	}

	pods := kube.CoreV1().Pods(ns)
	// setStatus plays the kubelet: the pod running with ip, Ready or not.
	setStatus := func(name, ip string, ready bool) {
		t.Helper()
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cond := corev1.ConditionFalse
		if ready {
			cond = corev1.ConditionTrue
		}
		changed = time.Now()
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: cond, LastTransitionTime: metav1.Now()}}}
		if _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("status of pod %s: %v", name, err)
		}
	}
	relabel := func(name string, lbl map[string]string) {
		t.Helper()
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Labels = lbl
		changed = time.Now()
		if _, err := pods.Update(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("labels of pod %s: %v", name, err)
		}
	}
	for _, p := range []struct {
		name, ip string
		lbl      map[string]string
	}{
		{"vllm-0", "10.0.0.1", map[string]string{"app": "vllm"}},
		{"vllm-1", "10.0.0.2", map[string]string{"app": "vllm", epp.DefaultReplicaLabel: "engine-b"}},
		{"other", "10.0.0.9", map[string]string{"app": "other"}},
	} {
		if _, err := pods.Create(ctx, podSpec(ns, p.name, p.lbl), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		setStatus(p.name, p.ip, true)
	}

	pools := dyn.Resource(epp.InferencePoolResource).Namespace(ns)
	changed = time.Now()
	if _, err := pools.Create(ctx, inferencePool(ns, map[string]any{"app": "vllm"}, 8000), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the InferencePool: %v", err)
	}
	expect("pool created", "10.0.0.1:8000=vllm-0", "10.0.0.2:8000=engine-b")

	changed = time.Now()
	if _, err := pods.Create(ctx, podSpec(ns, "vllm-2", map[string]string{"app": "vllm"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("pod created, not yet running", "10.0.0.1:8000=vllm-0", "10.0.0.2:8000=engine-b")
	setStatus("vllm-2", "10.0.0.3", true)
	expect("pod running and ready", "10.0.0.1:8000=vllm-0", "10.0.0.2:8000=engine-b", "10.0.0.3:8000=vllm-2")

	relabel("vllm-0", map[string]string{"app": "vllm", epp.DefaultReplicaLabel: "engine-a"})
	expect("pod relabelled with a replica id", "10.0.0.1:8000=engine-a", "10.0.0.2:8000=engine-b", "10.0.0.3:8000=vllm-2")
	relabel("vllm-2", map[string]string{"app": "gone"})
	expect("pod relabelled out of the selector", "10.0.0.1:8000=engine-a", "10.0.0.2:8000=engine-b")

	setStatus("vllm-1", "10.0.0.2", false)
	expect("pod made unready", "10.0.0.1:8000=engine-a")
	setStatus("vllm-1", "10.0.0.2", true)
	expect("pod ready again", "10.0.0.1:8000=engine-a", "10.0.0.2:8000=engine-b")

	// Unscheduled pods (no node) are deleted at once, without a grace
	// period.
	changed = time.Now()
	if err := pods.Delete(ctx, "vllm-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("pod deleted", "10.0.0.2:8000=engine-b")

	// The selector changed to another app, with two target ports (a
	// data-parallel engine): one endpoint per port.
	pool, err := pools.Get(ctx, "pool", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	next := inferencePool(ns, map[string]any{"app": "other"}, 8000, 8001)
	next.SetResourceVersion(pool.GetResourceVersion())
	changed = time.Now()
	if _, err := pools.Update(ctx, next, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("changing the pool's selector and ports: %v", err)
	}
	expect("pool selector and ports changed", "10.0.0.9:8000=other", "10.0.0.9:8001=other-dp1")

	// A spec the API server refuses (no target port) never reaches the
	// picker: its endpoints stay.
	bad := inferencePool(ns, map[string]any{"app": "vllm"})
	pool, _ = pools.Get(ctx, "pool", metav1.GetOptions{})
	bad.SetResourceVersion(pool.GetResourceVersion())
	if _, err := pools.Update(ctx, bad, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("a pool without targetPorts: %v, want refused by the CRD's schema", err)
	}

	changed = time.Now()
	if err := pools.Delete(ctx, "pool", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("pool deleted")
	t.Logf("slowest change followed in %v (bound %v)", slowest.Round(time.Millisecond), followBound)
}
