package tlsconfig_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/tlsconfig"
	"github.com/inference-cache/inference-cache/tlsconfig/tlstest"
)

// stampN numbers the mtimes newStamp hands out.
var stampN atomic.Int64

// newStamp gives each path an mtime no file of this test had before. A
// reloader sees a change by (mtime, size), and a rewrite within the file
// system's clock granularity keeps the old mtime: setting it explicitly
// makes every rewrite a change without waiting for the clock to move.
func newStamp(t *testing.T, paths ...string) {
	t.Helper()
	m := time.Unix(1_700_000_000+stampN.Add(1), 0)
	for _, p := range paths {
		if err := os.Chtimes(p, m, m); err != nil {
			t.Fatal(err)
		}
	}
}

func pki(t *testing.T) tlstest.Set {
	t.Helper()
	s, err := tlstest.WriteSet(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func reloader(t *testing.T, f tlsconfig.Files) *tlsconfig.Reloader {
	t.Helper()
	r, err := tlsconfig.NewReloader(f, tlsconfig.Options{CheckInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// serve runs a TLS echo server with auth and returns its address.
func serve(t *testing.T, r *tlsconfig.Reloader, auth tlsconfig.ClientAuth) string {
	t.Helper()
	cfg, err := r.ServerConfig(auth)
	if err != nil {
		t.Fatal(err)
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				b := make([]byte, 1)
				if _, err := c.Read(b); err == nil {
					c.Write(b)
				}
			}()
		}
	}()
	return l.Addr().String()
}

// roundTrip dials addr with cfg and echoes one byte; it returns the
// server's leaf certificate.
func roundTrip(addr string, cfg *tls.Config) (*x509.Certificate, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte{7}); err != nil {
		return nil, err
	}
	b := make([]byte, 1)
	if _, err := c.Read(b); err != nil { // TLS 1.3: a refused client cert shows here
		return nil, err
	}
	return c.ConnectionState().PeerCertificates[0], nil
}

func TestMutualTLS_AcceptsTheCAAndRefusesWrongCAExpiredAndMissingCerts(t *testing.T) {
	s := pki(t)
	srv := reloader(t, tlsconfig.Files{CertFile: s.NodeCert, KeyFile: s.NodeKey, CAFile: s.CA})
	addr := serve(t, srv, tlsconfig.ClientAuthRequireAndVerify)
	client := func(cert, key, ca string) *tls.Config {
		return reloader(t, tlsconfig.Files{CertFile: cert, KeyFile: key, CAFile: ca}).ClientConfig("")
	}
	if _, err := roundTrip(addr, client(s.ClientCert, s.ClientKey, s.CA)); err != nil {
		t.Fatalf("client cert of the CA: %v", err)
	}
	if _, err := roundTrip(addr, client(s.NodeCert, s.NodeKey, s.CA)); err != nil {
		t.Fatalf("node cert (client auth usage) of the CA: %v", err)
	}
	refusals := []struct {
		name string
		cfg  *tls.Config
	}{
		{"client cert of another CA", client(s.OtherCert, s.OtherKey, s.CA)},
		{"expired client cert", client(s.ExpiredCert, s.ExpiredKey, s.CA)},
		{"no client cert", client("", "", s.CA)},
		{"client trusts another CA", client(s.ClientCert, s.ClientKey, s.OtherCA)},
	}
	for _, c := range refusals {
		if _, err := roundTrip(addr, c.cfg); err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
}

func TestServerTLS_ClientRefusesWrongCAExpiredAndWrongName(t *testing.T) {
	s := pki(t)
	good := serve(t, reloader(t, tlsconfig.Files{CertFile: s.NodeCert, KeyFile: s.NodeKey}), tlsconfig.ClientAuthNone)
	expired := serve(t, reloader(t, tlsconfig.Files{CertFile: s.ExpiredCert, KeyFile: s.ExpiredKey}), tlsconfig.ClientAuthNone)
	other := serve(t, reloader(t, tlsconfig.Files{CertFile: s.OtherCert, KeyFile: s.OtherKey}), tlsconfig.ClientAuthNone)
	trust := reloader(t, tlsconfig.Files{CAFile: s.CA})
	if _, err := roundTrip(good, trust.ClientConfig("")); err != nil {
		t.Fatalf("good server: %v", err)
	}
	if _, err := roundTrip(good, trust.ClientConfig(tlstest.NodeNames[1])); err != nil {
		t.Fatalf("good server under the shared cluster name: %v", err)
	}
	for name, c := range map[string]struct {
		addr, serverName string
	}{
		"expired server cert":  {expired, ""},
		"server of another CA": {other, ""},
		"wrong server name":    {good, "evil.example"},
	} {
		_, err := roundTrip(c.addr, trust.ClientConfig(c.serverName))
		if err == nil || !errors.Is(err, tlsconfig.ErrVerify) && !strings.Contains(err.Error(), "certificate") {
			t.Errorf("%s: err = %v, want a verification refusal", name, err)
		}
	}
}

func TestRequestClientAuth_AcceptsNoCertButRefusesABadOne(t *testing.T) {
	s := pki(t)
	addr := serve(t, reloader(t, tlsconfig.Files{CertFile: s.NodeCert, KeyFile: s.NodeKey, CAFile: s.CA}), tlsconfig.ClientAuthRequest)
	if _, err := roundTrip(addr, reloader(t, tlsconfig.Files{CAFile: s.CA}).ClientConfig("")); err != nil {
		t.Fatalf("no client cert under request: %v", err)
	}
	if _, err := roundTrip(addr, reloader(t, tlsconfig.Files{CertFile: s.OtherCert, KeyFile: s.OtherKey, CAFile: s.CA}).ClientConfig("")); err == nil {
		t.Fatal("a client cert of another CA was accepted under request")
	}
}

func TestReloader_RotatedCertificateServedWithoutRestart(t *testing.T) {
	s := pki(t)
	srv := reloader(t, tlsconfig.Files{CertFile: s.NodeCert, KeyFile: s.NodeKey, CAFile: s.CA})
	addr := serve(t, srv, tlsconfig.ClientAuthNone)
	trust := reloader(t, tlsconfig.Files{CAFile: s.CA}).ClientConfig("")
	before, err := roundTrip(addr, trust)
	if err != nil {
		t.Fatal(err)
	}
	// Rotate: a new node certificate from the same CA, written atomically.
	ca := mustCAFromSet(t, s)
	l, err := ca.Issue(tlstest.LeafOptions{CommonName: "rotated", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := tlstest.WriteLeaf(l, s.NodeCert, s.NodeKey); err != nil {
		t.Fatal(err)
	}
	newStamp(t, s.NodeCert, s.NodeKey)
	after, err := roundTrip(addr, trust)
	if err != nil {
		t.Fatal(err)
	}
	if after.SerialNumber.Cmp(before.SerialNumber) == 0 || after.Subject.CommonName != "rotated" {
		t.Fatalf("still served %q after rotation", after.Subject.CommonName)
	}
	// A broken file keeps the rotated certificate in force.
	os.WriteFile(s.NodeCert, []byte("garbage"), 0o644)
	again, err := roundTrip(addr, trust)
	if err != nil || again.Subject.CommonName != "rotated" {
		t.Fatalf("after a bad rotation: %v, %v", again, err)
	}
}

// mustCAFromSet makes a CA whose certificate replaces the set's bundle (so
// the rotated leaf verifies) — rotation of the CA bundle itself.
func mustCAFromSet(t *testing.T, s tlstest.Set) *tlstest.CA {
	t.Helper()
	ca, err := tlstest.NewCA("rotated CA")
	if err != nil {
		t.Fatal(err)
	}
	old, _ := os.ReadFile(s.CA)
	// Both CAs in the bundle during the change.
	if err := os.WriteFile(s.CA, append(old, ca.PEM...), 0o644); err != nil {
		t.Fatal(err)
	}
	return ca
}

func TestNewReloader_NamesTheBadFile(t *testing.T) {
	s := pki(t)
	bad := filepath.Join(t.TempDir(), "bad.pem")
	os.WriteFile(bad, []byte("not pem"), 0o644)
	for name, f := range map[string]tlsconfig.Files{
		"cert without key": {CertFile: s.NodeCert},
		"missing cert":     {CertFile: bad + "x", KeyFile: s.NodeKey},
		"bad CA":           {CAFile: bad},
		"key of other":     {CertFile: s.NodeCert, KeyFile: s.OtherKey},
	} {
		if _, err := tlsconfig.NewReloader(f, tlsconfig.Options{}); !errors.Is(err, tlsconfig.ErrConfig) {
			t.Errorf("%s: err = %v, want ErrConfig", name, err)
		}
	}
	r := reloader(t, tlsconfig.Files{CAFile: s.CA})
	if _, err := r.ServerConfig(tlsconfig.ClientAuthNone); !errors.Is(err, tlsconfig.ErrConfig) {
		t.Errorf("server config without a certificate: %v", err)
	}
	r = reloader(t, tlsconfig.Files{CertFile: s.NodeCert, KeyFile: s.NodeKey})
	if _, err := r.ServerConfig(tlsconfig.ClientAuthRequireAndVerify); !errors.Is(err, tlsconfig.ErrConfig) {
		t.Errorf("mTLS without a CA bundle: %v", err)
	}
	for _, m := range []string{"none", "request", "require-and-verify"} {
		a, err := tlsconfig.ParseClientAuth(m)
		if err != nil || a.String() != m {
			t.Errorf("ParseClientAuth(%q) = %v, %v", m, a, err)
		}
	}
	if _, err := tlsconfig.ParseClientAuth("yes"); err == nil {
		t.Error("ParseClientAuth(yes) accepted")
	}
}

func TestSecretFile_ReloadsAndKeepsOldOnEmpty(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tok")
	os.WriteFile(p, []byte("# comment\n  alpha \n\nbeta\n"), 0o600)
	s, err := tlsconfig.NewSecretFile(p, tlsconfig.Options{CheckInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Secrets(); len(got) != 2 || string(got[0]) != "alpha" || string(got[1]) != "beta" || s.First() != "alpha" {
		t.Fatalf("secrets %q", got)
	}
	os.WriteFile(p, []byte("gamma\n"), 0o600)
	newStamp(t, p)
	if s.First() != "gamma" {
		t.Fatalf("after rewrite: %q", s.First())
	}
	os.WriteFile(p, []byte("\n"), 0o600)
	newStamp(t, p)
	if s.First() != "gamma" {
		t.Fatalf("an emptied file must keep the previous secret, got %q", s.First())
	}
	if _, err := tlsconfig.NewSecretFile(filepath.Join(t.TempDir(), "none"), tlsconfig.Options{}); !errors.Is(err, tlsconfig.ErrConfig) {
		t.Fatalf("missing file: %v", err)
	}
	if got := tlsconfig.StaticSecrets("", " x ").Secrets(); len(got) != 1 || string(got[0]) != "x" {
		t.Fatalf("static: %q", got)
	}
}

func TestReadGossipKeys(t *testing.T) {
	dir := t.TempDir()
	k32 := base64.StdEncoding.EncodeToString(make([]byte, 32))
	k16 := base64.StdEncoding.EncodeToString(make([]byte, 16))
	good := filepath.Join(dir, "good")
	os.WriteFile(good, []byte(k32+"\n"+k16+"\n"), 0o600)
	keys, err := tlsconfig.ReadGossipKeys(good)
	if err != nil || len(keys) != 2 || len(keys[0]) != 32 || len(keys[1]) != 16 {
		t.Fatalf("keys %d, %v", len(keys), err)
	}
	for name, body := range map[string]string{
		"not base64": "!!!\n",
		"wrong size": base64.StdEncoding.EncodeToString(make([]byte, 20)),
		"empty":      "\n",
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "_"))
		os.WriteFile(p, []byte(body), 0o600)
		_, err := tlsconfig.ReadGossipKeys(p)
		if !errors.Is(err, tlsconfig.ErrConfig) || strings.Contains(err.Error(), body) && body != "\n" {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

func TestGossipKeyFile_ReloadReportsNewKeysAndKeepsOldOnBadFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "gossip.keys")
	key := func(b byte) (string, []byte) {
		k := make([]byte, 32)
		for i := range k {
			k[i] = b
		}
		return base64.StdEncoding.EncodeToString(k), k
	}
	s1, k1 := key(1)
	s2, k2 := key(2)
	os.WriteFile(p, []byte(s1+"\n"), 0o600)
	g, err := tlsconfig.NewGossipKeyFile(p, tlsconfig.Options{CheckInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if keys, changed := g.Reload(); changed || len(keys) != 1 || !bytes.Equal(keys[0], k1) {
		t.Fatalf("unchanged file: changed=%v keys=%d", changed, len(keys))
	}
	steps := []struct {
		body    string
		changed bool
		want    [][]byte
	}{
		{s1 + "\n" + s2 + "\n", true, [][]byte{k1, k2}},
		{s2 + "\n" + s1 + "\n", true, [][]byte{k2, k1}},
		{"not base64!\n", false, [][]byte{k2, k1}},
		{"\n", false, [][]byte{k2, k1}},
		{s2 + "\n", true, [][]byte{k2}},
	}
	for i, st := range steps {
		os.WriteFile(p, []byte(st.body), 0o600)
		newStamp(t, p)
		keys, changed := g.Reload()
		if changed != st.changed || len(keys) != len(st.want) {
			t.Fatalf("step %d: changed=%v keys=%d, want changed=%v keys=%d", i, changed, len(keys), st.changed, len(st.want))
		}
		for j := range keys {
			if !bytes.Equal(keys[j], st.want[j]) {
				t.Fatalf("step %d: key %d differs", i, j)
			}
		}
	}
	if _, err := tlsconfig.NewGossipKeyFile(filepath.Join(t.TempDir(), "none"), tlsconfig.Options{}); !errors.Is(err, tlsconfig.ErrConfig) {
		t.Fatalf("missing file: %v", err)
	}
}

// What an operator sees in the log during a rotation: a deleted file is
// reported (once), a file fixed back to the keys in force is confirmed,
// a key listed twice counts once, and keys are named by fingerprint only.
func TestGossipKeyFile_LogsWhatTheOperatorNeeds(t *testing.T) {
	var logBuf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logBuf, nil))
	p := filepath.Join(t.TempDir(), "gossip.keys")
	k := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	os.WriteFile(p, []byte(k+"\n"+k+"\n"), 0o600)
	g, err := tlsconfig.NewGossipKeyFile(p, tlsconfig.Options{CheckInterval: -1, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(g.Keys()); n != 1 {
		t.Fatalf("a key listed twice gave %d keys, want 1", n)
	}
	os.Remove(p)
	for i := 0; i < 4; i++ {
		if _, changed := g.Reload(); changed {
			t.Fatal("a deleted file changed the keys")
		}
	}
	if c := strings.Count(logBuf.String(), "watched file cannot be read"); c != 1 {
		t.Fatalf("deleted file logged %d times, want once:\n%s", c, logBuf.String())
	}
	os.WriteFile(p, []byte(k+"\n"), 0o600)
	if _, changed := g.Reload(); changed {
		t.Fatal("the same key re-written changed the keys")
	}
	out := logBuf.String()
	fp := tlsconfig.KeyFingerprint(bytes.Repeat([]byte{7}, 32))
	for _, want := range []string{"watched files readable again", "the keys in force are unchanged", "primary=" + fp} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, k) {
		t.Error("a key appeared in the log")
	}
	if len(fp) != 8 || fp == tlsconfig.KeyFingerprint(bytes.Repeat([]byte{8}, 32)) {
		t.Errorf("fingerprint %q: want 8 hex digits that differ between keys", fp)
	}
}
