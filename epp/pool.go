package epp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
)

// InferencePoolResource is the InferencePool's API resource
// (inference.networking.k8s.io/v1, kubernetes-sigs/
// gateway-api-inference-extension v1.6.0 api/v1/inferencepool_types.go).
var InferencePoolResource = schema.GroupVersionResource{Group: "inference.networking.k8s.io", Version: "v1", Resource: "inferencepools"}

// PodResource is the core API's pods resource (v1). Pods are watched
// through the dynamic client, like the InferencePool, rather than the
// typed clientset: the typed clientset links every built-in API group
// into the binary, and the picker reads a handful of pod fields.
var PodResource = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// PoolWatchConfig configures WatchPool.
type PoolWatchConfig struct {
	// Dynamic lists and watches the pods (PodResource) and the
	// InferencePool (InferencePoolResource); required.
	Dynamic dynamic.Interface
	// Namespace and Name name the InferencePool (required); its pods are
	// in its namespace.
	Namespace, Name string
	// ReplicaLabel is the pod label whose value, when set, is the pod's
	// replica id; "" = DefaultReplicaLabel.
	ReplicaLabel string
	// Table receives the endpoints (required).
	Table *Table
	// Logger; nil = slog.Default().
	Logger *slog.Logger
}

// PoolWatch keeps a Table equal to the endpoints of one InferencePool
// (contract §14.3): for every pod of the pool's namespace that its
// spec.selector.matchLabels selects, that is running and ready, has an
// IP and is not being deleted, one endpoint per spec.targetPorts entry,
// at podIP:port. The replica id is the pod's ReplicaLabel label, else
// its name; with several target ports (a data-parallel engine, rank r
// on the r-th port), the r-th port's is "<id>-dp<r>" for r > 0, the id
// the subscriber gives rank r of an engine (observe.ReplicaForRank,
// contract §12.6). It is driven by
// client-go informers (list once, then watch: no polling); every pod or
// pool event recomputes the whole list.
type PoolWatch struct {
	cfg    PoolWatchConfig
	pods   cache.GenericLister
	pools  cache.GenericLister
	cancel context.CancelFunc
	mu     sync.Mutex // serializes recomputations
	seen   bool       // the pool existed once
	wg     sync.WaitGroup
}

// WatchPool starts the informers, waits for their first list (ctx
// bounds the wait) and sets the table once the pool exists; the table
// stays unsynced (the picker not ready) until then. Stop ends the
// watch.
func WatchPool(ctx context.Context, cfg PoolWatchConfig) (*PoolWatch, error) {
	if cfg.Dynamic == nil || cfg.Table == nil || cfg.Name == "" || cfg.Namespace == "" {
		return nil, errors.New("epp: WatchPool needs Dynamic, Table, Namespace and Name")
	}
	if cfg.ReplicaLabel == "" {
		cfg.ReplicaLabel = DefaultReplicaLabel
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	wctx, cancel := context.WithCancel(context.Background())
	podInf := informerFor(cfg.Dynamic, PodResource, cfg.Namespace, "")
	poolInf := informerFor(cfg.Dynamic, InferencePoolResource, cfg.Namespace, "metadata.name="+cfg.Name)
	w := &PoolWatch{cfg: cfg, cancel: cancel,
		pods:  cache.NewGenericLister(podInf.GetIndexer(), PodResource.GroupResource()),
		pools: cache.NewGenericLister(poolInf.GetIndexer(), InferencePoolResource.GroupResource())}
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { w.recompute() },
		UpdateFunc: func(any, any) { w.recompute() },
		DeleteFunc: func(any) { w.recompute() },
	}
	for _, inf := range []cache.SharedIndexInformer{podInf, poolInf} {
		if _, err := inf.AddEventHandler(h); err != nil {
			cancel()
			return nil, err
		}
		w.wg.Add(1)
		go func() { defer w.wg.Done(); inf.RunWithContext(wctx) }()
	}
	if !cache.WaitForCacheSync(ctx.Done(), podInf.HasSynced, poolInf.HasSynced) {
		w.Stop()
		return nil, fmt.Errorf("epp: InferencePool %s/%s: informers not synced: %w", cfg.Namespace, cfg.Name, ctx.Err())
	}
	w.recompute()
	return w, nil
}

// informerFor is a shared informer over one resource of one namespace
// through the dynamic client (objects *unstructured.Unstructured),
// narrowed by a field selector when fieldSelector is not "". It is what
// client-go's dynamicinformer builds, without that package: it imports
// the typed informer factory, and with it every built-in API group.
func informerFor(dc dynamic.Interface, gvr schema.GroupVersionResource, namespace, fieldSelector string) cache.SharedIndexInformer {
	ri := dc.Resource(gvr).Namespace(namespace)
	narrow := func(o *metav1.ListOptions) {
		if fieldSelector != "" {
			o.FieldSelector = fieldSelector
		}
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			narrow(&o)
			return ri.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			narrow(&o)
			return ri.Watch(ctx, o)
		},
	}
	// The wrapper tells the reflector when the client cannot stream a
	// watch list (client-go's fake), so that it lists then watches.
	return cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, dc), &unstructured.Unstructured{}, cache.SharedIndexInformerOptions{
		Indexers:          cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
		ObjectDescription: gvr.String(),
	})
}

// Stop ends the watch; the table keeps its last endpoints.
func (w *PoolWatch) Stop() {
	w.cancel()
	w.wg.Wait()
}

// recompute sets the table from the listers.
func (w *PoolWatch) recompute() {
	w.mu.Lock()
	defer w.mu.Unlock()
	obj, err := w.pools.ByNamespace(w.cfg.Namespace).Get(w.cfg.Name)
	if err != nil {
		if w.seen {
			w.cfg.Logger.Warn("InferencePool gone: no endpoints", "pool", w.cfg.Namespace+"/"+w.cfg.Name)
			_ = w.cfg.Table.Set(nil)
		}
		return
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	sel, ports, err := poolSpec(u)
	if err != nil {
		w.cfg.Logger.Error("InferencePool spec refused: endpoints unchanged", "pool", w.cfg.Namespace+"/"+w.cfg.Name, "err", err)
		return
	}
	w.seen = true
	objs, err := w.pods.ByNamespace(w.cfg.Namespace).List(sel)
	if err != nil {
		return
	}
	var eps []Endpoint
	for _, o := range objs {
		p := podOf(o)
		if p == nil || !podReady(p) {
			continue
		}
		id := p.Name
		if v := p.Labels[w.cfg.ReplicaLabel]; v != "" {
			id = v
		}
		for r, port := range ports {
			rid := id
			if r > 0 {
				rid = id + "-dp" + strconv.Itoa(r)
			}
			eps = append(eps, Endpoint{Address: net.JoinHostPort(p.Status.PodIP, strconv.Itoa(port)), ReplicaID: rid})
		}
	}
	if err := w.cfg.Table.Set(eps); err != nil {
		// Two pods with one replica id label, or one IP: keep the last
		// good list rather than pick among ambiguous endpoints.
		w.cfg.Logger.Error("InferencePool endpoints refused: endpoints unchanged", "pool", w.cfg.Namespace+"/"+w.cfg.Name, "err", err)
	}
}

// poolSpec reads spec.selector.matchLabels and spec.targetPorts[].number.
func poolSpec(u *unstructured.Unstructured) (labels.Selector, []int, error) {
	ml, _, err := unstructured.NestedStringMap(u.Object, "spec", "selector", "matchLabels")
	if err != nil {
		return nil, nil, fmt.Errorf("spec.selector.matchLabels: %w", err)
	}
	if len(ml) == 0 {
		return nil, nil, errors.New("spec.selector.matchLabels: required (an empty selector would select every pod)")
	}
	tps, _, err := unstructured.NestedSlice(u.Object, "spec", "targetPorts")
	if err != nil {
		return nil, nil, fmt.Errorf("spec.targetPorts: %w", err)
	}
	var ports []int
	for i, tp := range tps {
		m, _ := tp.(map[string]any)
		n, ok, _ := unstructured.NestedInt64(m, "number")
		if !ok || n < 1 || n > 65535 {
			return nil, nil, fmt.Errorf("spec.targetPorts[%d].number: want 1 to 65535", i)
		}
		if !slices.Contains(ports, int(n)) {
			ports = append(ports, int(n))
		}
	}
	if len(ports) == 0 {
		return nil, nil, errors.New("spec.targetPorts: required (at least one port)")
	}
	return labels.SelectorFromSet(ml), ports, nil
}

// podOf converts a listed pod (unstructured, from the dynamic
// informer) to the typed pod; nil when it does not convert.
func podOf(o runtime.Object) *corev1.Pod {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	var p corev1.Pod
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p); err != nil {
		return nil
	}
	return &p
}

// podReady reports whether a pod can take requests: running, its Ready
// condition true, an IP, not being deleted.
func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.PodIP == "" || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
