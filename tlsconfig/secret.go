package tlsconfig

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"sync/atomic"
)

// SecretFile holds the non-empty, trimmed lines of a file (bearer tokens,
// gossip keys) and re-reads it when its modification time or size changes
// (checked at most once per Options.CheckInterval, on use). Several lines
// allow rotation: accept the old and the new secret during the change.
// A file that becomes empty or unreadable keeps the previous secrets in
// force (logged, without the secrets). Safe for concurrent use.
type SecretFile struct {
	path string
	w    *watcher
	cur  atomic.Pointer[[][]byte]
}

// NewSecretFile reads path at once; a missing, unreadable or empty file is
// an error wrapping ErrConfig.
func NewSecretFile(path string, opts Options) (*SecretFile, error) {
	opts.fill()
	s := &SecretFile{path: path, w: &watcher{opts: opts, paths: []string{path}}}
	st, _ := s.w.changed()
	lines, err := readLines(path, "secret file")
	if err != nil {
		return nil, err
	}
	s.cur.Store(&lines)
	s.w.commit(st)
	return s, nil
}

// StaticSecrets returns a SecretFile that holds secrets and never reloads
// (for secrets given through the environment, and for tests). Empty
// secrets are dropped.
func StaticSecrets(secrets ...string) *SecretFile {
	var l [][]byte
	for _, v := range secrets {
		if v = string(bytes.TrimSpace([]byte(v))); v != "" {
			l = append(l, []byte(v))
		}
	}
	s := &SecretFile{}
	s.cur.Store(&l)
	return s
}

// readLines reads the non-empty, non-comment, trimmed lines of path; what
// names the file's kind in errors ("secret file", "gossip key file").
func readLines(path, what string) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrConfig, what, err)
	}
	var out [][]byte
	for _, l := range bytes.Split(b, []byte("\n")) {
		if l = bytes.TrimSpace(l); len(l) > 0 && l[0] != '#' {
			out = append(out, l)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %s %s holds no key or secret (only blank or # comment lines)", ErrConfig, what, path)
	}
	return out, nil
}

// Secrets returns the secrets in force, reloading the file first when it
// changed. The slices must not be modified.
func (s *SecretFile) Secrets() [][]byte {
	if s.w != nil {
		if st, ok := s.w.changed(); ok {
			lines, err := readLines(s.path, "secret file")
			if err != nil {
				s.w.opts.Logger.Warn("secret file changed but does not load; keeping the previous secrets", "file", s.path, "err", err)
			} else {
				s.cur.Store(&lines)
				s.w.opts.Logger.Info("secret file reloaded", "file", s.path, "secrets", len(lines))
			}
			s.w.commit(st)
		}
	}
	return *s.cur.Load()
}

// First returns the first secret in force ("" when there is none): what a
// client sends.
func (s *SecretFile) First() string {
	if l := s.Secrets(); len(l) > 0 {
		return string(l[0])
	}
	return ""
}

// GossipKeyFile is a gossip key file (the ReadGossipKeys format) watched
// for changes, so a key rotation takes effect without a restart: Reload
// re-reads the file when its modification time or size changed (at most
// once per Options.CheckInterval) and reports new keys for the caller to
// hand to raftnode.Node.SetGossipKeys. A file that stops loading keeps the
// previous keys in force (logged, without the keys). Safe for concurrent
// use.
type GossipKeyFile struct {
	path string
	w    *watcher
	cur  atomic.Pointer[[][]byte]
}

// NewGossipKeyFile reads path at once; errors as ReadGossipKeys.
func NewGossipKeyFile(path string, opts Options) (*GossipKeyFile, error) {
	opts.fill()
	g := &GossipKeyFile{path: path, w: &watcher{opts: opts, paths: []string{path}}}
	st, _ := g.w.changed()
	keys, err := ReadGossipKeys(path)
	if err != nil {
		return nil, err
	}
	g.cur.Store(&keys)
	g.w.commit(st)
	return g, nil
}

// Keys returns the keys in force (primary first). The slices must not be
// modified.
func (g *GossipKeyFile) Keys() [][]byte { return *g.cur.Load() }

// Reload re-reads the file if it changed since the last load and returns
// the keys in force and whether they differ from before. A changed file
// that does not load (bad base64, wrong key length, empty) is logged and
// leaves the previous keys in force (changed = false).
func (g *GossipKeyFile) Reload() (keys [][]byte, changed bool) {
	st, ok := g.w.changed()
	if !ok {
		return g.Keys(), false
	}
	defer g.w.commit(st)
	next, err := ReadGossipKeys(g.path)
	if err != nil {
		g.w.opts.Logger.Warn("gossip key file changed but does not load; keeping the previous keys", "file", g.path, "err", err)
		return g.Keys(), false
	}
	prev := g.Keys()
	same := len(prev) == len(next)
	for i := 0; same && i < len(next); i++ {
		same = bytes.Equal(prev[i], next[i])
	}
	if same {
		// Say so: after a warning about a bad file, this is the
		// operator's confirmation that the fixed file is in force.
		g.w.opts.Logger.Info("gossip key file re-read; the keys in force are unchanged", "file", g.path, "keys", len(next), "primary", KeyFingerprint(next[0]))
		return prev, false
	}
	g.cur.Store(&next)
	g.w.opts.Logger.Info("gossip key file reloaded", "file", g.path, "keys", len(next), "primary", KeyFingerprint(next[0]))
	return next, true
}

// ReadGossipKeys reads memberlist encryption keys from path: one base64
// key per line (16, 24 or 32 bytes decoded: AES-128/192/256; `head -c 32
// /dev/urandom | base64` makes one). The first line is the primary key,
// used to encrypt; every line is accepted to decrypt, which allows a
// rolling key change. Errors wrap ErrConfig and never quote a key.
func ReadGossipKeys(path string) ([][]byte, error) {
	lines, err := readLines(path, "gossip key file")
	if err != nil {
		return nil, err
	}
	keys := make([][]byte, 0, len(lines))
	for i, l := range lines {
		k, err := base64.StdEncoding.DecodeString(string(l))
		if err != nil {
			return nil, fmt.Errorf("%w: gossip key file %s: key %d (blank and # lines not counted) is not base64", ErrConfig, path, i+1)
		}
		switch len(k) {
		case 16, 24, 32:
		default:
			return nil, fmt.Errorf("%w: gossip key file %s: key %d (blank and # lines not counted) decodes to %d bytes; want 16, 24 or 32", ErrConfig, path, i+1, len(k))
		}
		dup := false
		for _, o := range keys {
			dup = dup || bytes.Equal(o, k)
		}
		if !dup { // a key listed twice is one key in the keyring
			keys = append(keys, k)
		}
	}
	return keys, nil
}

// KeyFingerprint names a key in logs without revealing it: the first 8
// hex digits of its SHA-256.
func KeyFingerprint(k []byte) string {
	sum := sha256.Sum256(k)
	return hex.EncodeToString(sum[:4])
}
