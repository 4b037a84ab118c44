// Package tlstest makes throwaway certificate authorities and certificates
// for tests and for `make certs` (crypto/x509 only, no openssl). Keys are
// ECDSA P-256. Nothing here is fit for production keys.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// CA is a self-signed certificate authority.
type CA struct {
	// Cert is the CA certificate; PEM its encoding.
	Cert *x509.Certificate
	PEM  []byte
	key  *ecdsa.PrivateKey
}

// Leaf is an issued certificate and its private key, PEM-encoded.
type Leaf struct {
	CertPEM, KeyPEM []byte
}

// LeafOptions describe a certificate to issue.
type LeafOptions struct {
	// CommonName of the subject.
	CommonName string
	// DNSNames and IPs are the subject alternative names.
	DNSNames []string
	IPs      []net.IP
	// NotBefore and NotAfter bound validity; zero = from an hour ago for
	// ten years.
	NotBefore, NotAfter time.Time
	// Server and Client select the extended key usages (server auth,
	// client auth); a node certificate has both.
	Server, Client bool
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}

// NewCA returns a fresh self-signed CA named name, valid for ten years.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"inference-cache test"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), key: key}, nil
}

// Issue signs a certificate for o.
func (ca *CA) Issue(o LeafOptions) (*Leaf, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	if o.NotBefore.IsZero() {
		o.NotBefore = time.Now().Add(-time.Hour)
	}
	if o.NotAfter.IsZero() {
		o.NotAfter = time.Now().AddDate(10, 0, 0)
	}
	tpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: o.CommonName},
		NotBefore:    o.NotBefore,
		NotAfter:     o.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		DNSNames:     o.DNSNames,
		IPAddresses:  o.IPs,
	}
	if o.Server {
		tpl.ExtKeyUsage = append(tpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if o.Client {
		tpl.ExtKeyUsage = append(tpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &Leaf{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}),
	}, nil
}

// Set is the file paths of a throwaway PKI written by WriteSet.
type Set struct {
	// Dir holds every file.
	Dir string
	// CA is the bundle that verifies every certificate below except
	// Other*.
	CA string
	// NodeCert/NodeKey: server and client auth, for localhost,
	// 127.0.0.1, ::1 and the extra names given to WriteSet.
	NodeCert, NodeKey string
	// ClientCert/ClientKey: client auth only (an operator or gateway).
	ClientCert, ClientKey string
	// ExpiredCert/ExpiredKey: like the node certificate, expired a day
	// ago.
	ExpiredCert, ExpiredKey string
	// OtherCA and OtherCert/OtherKey: a second, unrelated CA and a node
	// certificate it signed (for wrong-CA refusals).
	OtherCA, OtherCert, OtherKey string
}

// NodeNames are the names every node certificate of WriteSet carries.
var NodeNames = []string{"localhost", "server.inference-cache"}

// WriteSet writes a fresh CA, node, client, expired and other-CA
// certificates into dir (created 0700; keys 0600). extraNames are added to
// the node certificates' SANs (IP addresses or DNS names).
func WriteSet(dir string, extraNames ...string) (Set, error) {
	s := Set{
		Dir: dir, CA: filepath.Join(dir, "ca.pem"),
		NodeCert: filepath.Join(dir, "node.pem"), NodeKey: filepath.Join(dir, "node-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem"),
		ExpiredCert: filepath.Join(dir, "expired.pem"), ExpiredKey: filepath.Join(dir, "expired-key.pem"),
		OtherCA: filepath.Join(dir, "other-ca.pem"), OtherCert: filepath.Join(dir, "other-node.pem"), OtherKey: filepath.Join(dir, "other-node-key.pem"),
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return s, err
	}
	ca, err := NewCA("inference-cache test CA")
	if err != nil {
		return s, err
	}
	other, err := NewCA("unrelated test CA")
	if err != nil {
		return s, err
	}
	node := LeafOptions{CommonName: "server.inference-cache", DNSNames: append([]string(nil), NodeNames...),
		IPs: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, Server: true, Client: true}
	for _, n := range extraNames {
		if ip := net.ParseIP(n); ip != nil {
			node.IPs = append(node.IPs, ip)
		} else if n != "" {
			node.DNSNames = append(node.DNSNames, n)
		}
	}
	expired := node
	expired.NotBefore, expired.NotAfter = time.Now().AddDate(0, 0, -30), time.Now().AddDate(0, 0, -1)
	type out struct {
		ca        *CA
		o         LeafOptions
		cert, key string
	}
	for _, w := range []out{
		{ca, node, s.NodeCert, s.NodeKey},
		{ca, LeafOptions{CommonName: "client.inference-cache", Client: true}, s.ClientCert, s.ClientKey},
		{ca, expired, s.ExpiredCert, s.ExpiredKey},
		{other, node, s.OtherCert, s.OtherKey},
	} {
		l, err := w.ca.Issue(w.o)
		if err != nil {
			return s, err
		}
		if err := WriteLeaf(l, w.cert, w.key); err != nil {
			return s, err
		}
	}
	if err := os.WriteFile(s.CA, ca.PEM, 0o644); err != nil {
		return s, err
	}
	return s, os.WriteFile(s.OtherCA, other.PEM, 0o644)
}

// WriteLeaf writes l's certificate (0644) and key (0600) atomically (a
// temp file renamed over the target), as a rotation would.
func WriteLeaf(l *Leaf, certPath, keyPath string) error {
	if err := writeAtomic(keyPath, l.KeyPEM, 0o600); err != nil {
		return err
	}
	return writeAtomic(certPath, l.CertPEM, 0o644)
}

func writeAtomic(path string, b []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	return os.Rename(tmp, path)
}
