// Package kubeapi runs the picker's InferencePool watch (package epp)
// against a real Kubernetes API server: kube-apiserver of
// k8s.io/kubernetes v1.37.2 over etcd of go.etcd.io/etcd/server/v3
// v3.7.3, both built from their Go modules in the nested module
// ./servers (pinned there, apart from the main module's go.mod) and
// cached between runs. There is no kubelet, scheduler or controller
// manager: the test plays them, writing pods' status itself.
package kubeapi

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

// serverBinaries builds etcd and kube-apiserver from ./servers into a
// cache directory keyed by that module's go.mod and go.sum and the Go
// version (IC_KUBEAPI_CACHE, else <user cache dir>/inference-cache/kubeapi),
// and returns their paths. A cached pair is reused as is: the first
// build takes about 25 minutes on two loaded cores, later runs none.
func serverBinaries(logf func(string, ...any)) (etcd, apiserver string, err error) {
	h := sha256.New()
	for _, f := range []string{"servers/go.mod", "servers/go.sum"} {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", "", err
		}
		h.Write(b)
	}
	h.Write([]byte(runtime.Version()))
	root := os.Getenv("IC_KUBEAPI_CACHE")
	if root == "" {
		uc, err := os.UserCacheDir()
		if err != nil {
			return "", "", fmt.Errorf("no cache directory (set IC_KUBEAPI_CACHE): %w", err)
		}
		root = filepath.Join(uc, "inference-cache", "kubeapi")
	}
	dir := filepath.Join(root, hex.EncodeToString(h.Sum(nil))[:16])
	etcd, apiserver = filepath.Join(dir, "etcd"), filepath.Join(dir, "kube-apiserver")
	for _, b := range []struct{ out, pkg string }{
		{etcd, "go.etcd.io/etcd/server/v3"},
		{apiserver, "k8s.io/kubernetes/cmd/kube-apiserver"},
	} {
		if _, err := os.Stat(b.out); err == nil {
			continue
		}
		logf("building %s into %s (cached for later runs)", b.pkg, dir)
		tmp := b.out + ".tmp"
		cmd := exec.Command("go", "build", "-o", tmp, b.pkg)
		cmd.Dir = "servers"
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("go build %s: %v\n%s", b.pkg, err, out)
		}
		if err := os.Rename(tmp, b.out); err != nil {
			return "", "", err
		}
	}
	return etcd, apiserver, nil
}

// writeServiceAccountKey writes a fresh RSA key in PEM to path: the API
// server signs and verifies service account tokens with it (it refuses
// to start without one).
func writeServiceAccountKey(path string) error {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}), 0o600)
}
