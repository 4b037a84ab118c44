package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Sentinel errors, wrapped by the errors of this package.
var (
	// ErrConfig: the files or options given cannot make a TLS config
	// (missing file name, unreadable or unparsable file, unknown mode).
	ErrConfig = errors.New("tlsconfig: invalid configuration")
	// ErrVerify: a peer's certificate chain failed verification against
	// the current CA bundle (wrong CA, expired, wrong name or usage).
	ErrVerify = errors.New("tlsconfig: peer certificate refused")
)

// ClientAuth is how a TLS server treats client certificates.
type ClientAuth int

const (
	// ClientAuthNone asks for no client certificate (TLS, not mutual).
	ClientAuthNone ClientAuth = iota
	// ClientAuthRequest asks for a client certificate and verifies it
	// against the CA bundle when one is sent; a client without one is
	// still accepted.
	ClientAuthRequest
	// ClientAuthRequireAndVerify refuses a client without a certificate
	// signed by the CA bundle (mutual TLS).
	ClientAuthRequireAndVerify
)

// String returns the flag spelling of a.
func (a ClientAuth) String() string {
	switch a {
	case ClientAuthNone:
		return "none"
	case ClientAuthRequest:
		return "request"
	case ClientAuthRequireAndVerify:
		return "require-and-verify"
	}
	return fmt.Sprintf("ClientAuth(%d)", int(a))
}

// ParseClientAuth parses "none", "request" or "require-and-verify".
func ParseClientAuth(s string) (ClientAuth, error) {
	switch s {
	case "", "none":
		return ClientAuthNone, nil
	case "request":
		return ClientAuthRequest, nil
	case "require-and-verify":
		return ClientAuthRequireAndVerify, nil
	}
	return 0, fmt.Errorf("%w: client auth %q: must be none, request or require-and-verify", ErrConfig, s)
}

func (a ClientAuth) std() tls.ClientAuthType {
	switch a {
	case ClientAuthRequest:
		return tls.VerifyClientCertIfGiven
	case ClientAuthRequireAndVerify:
		return tls.RequireAndVerifyClientCert
	}
	return tls.NoClientCert
}

// DefaultCheckInterval is how often (at most) a Reloader or SecretFile
// stats its files for changes: rotation takes effect within a second, and
// a busy server does not stat on every handshake.
const DefaultCheckInterval = time.Second

// MinVersion is the least TLS version accepted on every channel.
const MinVersion = tls.VersionTLS12

// Files names the PEM files of a Reloader. CertFile and KeyFile go
// together (both or neither); CAFile is the bundle that verifies peers
// (servers verify clients with it under ClientAuthRequest/RequireAndVerify,
// clients verify servers with it). A client without CAFile verifies
// servers against the system roots.
type Files struct {
	CertFile, KeyFile, CAFile string
}

// Options tune a Reloader or SecretFile.
type Options struct {
	// CheckInterval: the files are stat'ed at most this often, on use;
	// 0 = DefaultCheckInterval, < 0 = on every use.
	CheckInterval time.Duration
	// Logger receives one event per reload and per failed reload (file
	// names only, never contents); nil = discard.
	Logger *slog.Logger
	// Now is the clock used for rate-limiting checks; nil = time.Now.
	Now func() time.Time
}

func (o *Options) fill() {
	if o.CheckInterval == 0 {
		o.CheckInterval = DefaultCheckInterval
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// fileStamp is what a change check compares.
type fileStamp struct {
	mod  time.Time
	size int64
}

func stamp(path string) (fileStamp, error) {
	if path == "" {
		return fileStamp{}, nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{fi.ModTime(), fi.Size()}, nil
}

// watcher rate-limits change checks over a set of files.
type watcher struct {
	opts      Options
	paths     []string
	mu        sync.Mutex
	stamps    []fileStamp
	nextCheck atomic.Int64 // unix ns
	// missing counts consecutive checks that could not stat a file; the
	// second one is logged (a rename gap lasts less than one interval).
	missing int
}

// changed reports whether any file's stamp differs from the last load;
// it is rate-limited and reports false while another goroutine checks.
func (w *watcher) changed() ([]fileStamp, bool) {
	now := w.opts.Now()
	if now.UnixNano() < w.nextCheck.Load() {
		return nil, false
	}
	if !w.mu.TryLock() {
		return nil, false
	}
	defer w.mu.Unlock()
	w.nextCheck.Store(now.Add(w.opts.CheckInterval).UnixNano())
	cur := make([]fileStamp, len(w.paths))
	diff := false
	for i, p := range w.paths {
		s, err := stamp(p)
		if err != nil {
			// A file briefly missing while it is replaced: keep the old
			// material and look again next interval. Still missing at
			// the next check: say so once, since a deleted file would
			// otherwise go unnoticed until the next restart fails.
			w.missing++
			if w.missing == 2 {
				w.opts.Logger.Warn("watched file cannot be read; keeping what was loaded from it", "file", p, "err", err)
			}
			return nil, false
		}
		cur[i] = s
		if i >= len(w.stamps) || !s.mod.Equal(w.stamps[i].mod) || s.size != w.stamps[i].size {
			diff = true
		}
	}
	if w.missing >= 2 {
		w.opts.Logger.Info("watched files readable again", "files", w.paths)
	}
	w.missing = 0
	return cur, diff
}

func (w *watcher) commit(s []fileStamp) {
	w.mu.Lock()
	w.stamps = s
	w.mu.Unlock()
}

// material is one loaded generation of a Reloader's files.
type material struct {
	cert *tls.Certificate // nil without CertFile
	pool *x509.CertPool   // nil without CAFile
}

// Reloader holds a certificate, key and CA bundle loaded from Files and
// re-reads them when they change. All methods are safe for concurrent use.
type Reloader struct {
	files Files
	w     *watcher
	cur   atomic.Pointer[material]
}

// NewReloader loads files at once (an error names the file at fault and
// wraps ErrConfig) and returns a Reloader that keeps them current.
func NewReloader(files Files, opts Options) (*Reloader, error) {
	opts.fill()
	if (files.CertFile == "") != (files.KeyFile == "") {
		return nil, fmt.Errorf("%w: a certificate file and a key file go together (cert %q, key %q)", ErrConfig, files.CertFile, files.KeyFile)
	}
	r := &Reloader{files: files, w: &watcher{opts: opts, paths: []string{files.CertFile, files.KeyFile, files.CAFile}}}
	st, _ := r.w.changed()
	if st == nil { // stat failed: let load name the file
		st = make([]fileStamp, 3)
	}
	m, err := load(files)
	if err != nil {
		return nil, err
	}
	r.cur.Store(m)
	r.w.commit(st)
	return r, nil
}

func load(f Files) (*material, error) {
	m := &material{}
	if f.CertFile != "" {
		c, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: certificate %s / key %s: %v", ErrConfig, f.CertFile, f.KeyFile, err)
		}
		if c.Leaf == nil && len(c.Certificate) > 0 {
			c.Leaf, _ = x509.ParseCertificate(c.Certificate[0])
		}
		m.cert = &c
	}
	if f.CAFile != "" {
		b, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: CA bundle: %v", ErrConfig, err)
		}
		p := x509.NewCertPool()
		if !p.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("%w: CA bundle %s holds no PEM certificate", ErrConfig, f.CAFile)
		}
		m.pool = p
	}
	return m, nil
}

// current returns the material in force, reloading it first when the
// files changed (rate-limited).
func (r *Reloader) current() *material {
	if st, ok := r.w.changed(); ok {
		m, err := load(r.files)
		if err != nil {
			r.w.opts.Logger.Warn("tls files changed but do not load; keeping the previous ones",
				"cert", r.files.CertFile, "ca", r.files.CAFile, "err", err)
		} else {
			r.cur.Store(m)
			r.w.opts.Logger.Info("tls files reloaded", "cert", r.files.CertFile, "ca", r.files.CAFile, "not_after", notAfter(m))
		}
		r.w.commit(st) // a bad file is retried when it changes again
	}
	return r.cur.Load()
}

func notAfter(m *material) string {
	if m.cert == nil || m.cert.Leaf == nil {
		return ""
	}
	return m.cert.Leaf.NotAfter.UTC().Format(time.RFC3339)
}

// Certificate returns the certificate in force (nil without CertFile).
func (r *Reloader) Certificate() *tls.Certificate { return r.current().cert }

// ServerConfig returns a TLS server config presenting the current
// certificate and treating client certificates per auth, verified against
// the current CA bundle. It needs CertFile; ClientAuthRequest and
// ClientAuthRequireAndVerify also need CAFile.
func (r *Reloader) ServerConfig(auth ClientAuth) (*tls.Config, error) {
	m := r.cur.Load()
	if m.cert == nil {
		return nil, fmt.Errorf("%w: a TLS server needs a certificate and key", ErrConfig)
	}
	if auth != ClientAuthNone && m.pool == nil {
		return nil, fmt.Errorf("%w: client auth %s needs a CA bundle to verify clients with", ErrConfig, auth)
	}
	base := &tls.Config{MinVersion: MinVersion, ClientAuth: auth.std(), NextProtos: []string{"h2"}}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		m := r.current()
		c := base.Clone()
		c.GetConfigForClient = nil
		c.Certificates = []tls.Certificate{*m.cert}
		c.ClientCAs = m.pool
		return c, nil
	}
	return base, nil
}

// ClientConfig returns a TLS client config that verifies servers against
// the current CA bundle (the system roots without CAFile) and presents the
// current certificate when the server asks for one (with CertFile).
// serverName, when not empty, is the name every server certificate must
// carry instead of the dialed host (for certificates issued to one shared
// cluster name).
//
// Verification happens in VerifyConnection (InsecureSkipVerify only turns
// off the standard check, which cannot follow a reloaded CA bundle): the
// chain must lead to the bundle, be valid now, allow server auth and name
// serverName or the dialed host.
func (r *Reloader) ClientConfig(serverName string) *tls.Config {
	c := &tls.Config{
		MinVersion:         MinVersion,
		InsecureSkipVerify: true, // replaced by VerifyConnection below
		ServerName:         serverName,
	}
	c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		if m := r.current(); m.cert != nil {
			return m.cert, nil
		}
		return &tls.Certificate{}, nil // none: the server decides
	}
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		name := serverName
		if name == "" {
			name = cs.ServerName
		}
		return VerifyChain(cs.PeerCertificates, r.current().pool, name, x509.ExtKeyUsageServerAuth)
	}
	return c
}

// VerifyChain verifies a peer's certificates (leaf first) against roots
// (nil = the system roots), for usage, and when name is not empty that the
// leaf names it (a DNS name or an IP address). Errors wrap ErrVerify.
func VerifyChain(certs []*x509.Certificate, roots *x509.CertPool, name string, usage x509.ExtKeyUsage) error {
	if len(certs) == 0 {
		return fmt.Errorf("%w: peer sent no certificate", ErrVerify)
	}
	opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool(), KeyUsages: []x509.ExtKeyUsage{usage}}
	for _, c := range certs[1:] {
		opts.Intermediates.AddCert(c)
	}
	if name != "" {
		if h, _, err := net.SplitHostPort(name); err == nil {
			name = h
		}
		opts.DNSName = name
	}
	if _, err := certs[0].Verify(opts); err != nil {
		return fmt.Errorf("%w: %v", ErrVerify, err)
	}
	return nil
}
