package main

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Texts of the security failures callCause recognizes: each names the
// cause and the flag that fixes it (docs/security.md).
const (
	tokenRefusedText = "token refused (UNAUTHENTICATED): the node requires a bearer token and got none or an unknown one; give it with --token-file or " + envToken
	tokenClassText   = "token refused for this call (PERMISSION_DENIED): the token is valid but of a lesser class; this command needs the write or admin token"
	tlsCAText        = "TLS handshake refused: the node's certificate is not signed by a CA of --tls-ca"
	tlsNameText      = "TLS handshake refused: the node's certificate does not name the --addr host; give the name it carries with --tls-server-name"
	tlsClientText    = "TLS handshake refused by the node: it requires a client certificate its CA signed; give --tls-cert and --tls-key"
	tlsPlainText     = "TLS handshake refused: the node serves plaintext gRPC; drop the --tls-* flags"
	tlsNeededText    = "the node serves TLS and this command dialled plaintext: give --tls-ca (and --tls-cert, --tls-key where the node requires client certificates)"
)

// callCause words a failed call to the cluster by its cause, when the
// cause is one of security's (a refused token, a refused TLS handshake);
// fatal says that retrying with the same flags cannot succeed. Other
// errors give "" and false.
func callCause(err error) (string, bool) {
	if err == nil {
		return "", false
	}
	switch status.Code(err) {
	case codes.Unauthenticated:
		return tokenRefusedText, true
	case codes.PermissionDenied:
		return tokenClassText, true
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "first record does not look like a TLS handshake"):
		return tlsPlainText, true
	case strings.Contains(msg, "certificate is valid for") || strings.Contains(msg, "doesn't contain any IP SANs") || strings.Contains(msg, "certificate is not valid for any names"):
		return tlsNameText, true
	case strings.Contains(msg, "x509:"):
		return tlsCAText, true
	case strings.Contains(msg, "tls: certificate required") || strings.Contains(msg, "tls: bad certificate") || strings.Contains(msg, "remote error: tls"):
		return tlsClientText, true
	}
	return "", false
}

// servesTLS reports whether addr completes a TLS handshake within a
// second: a node that closes a plaintext gRPC connection at once may
// simply serve TLS. Nothing is sent after the handshake, and the
// certificate is not checked (only the protocol is asked).
func servesTLS(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	d := tls.Dialer{NetDialer: &net.Dialer{}, Config: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}}} //nolint:gosec // a protocol probe; nothing is sent
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// wantsClientCert reports whether addr, a TLS node, refuses a handshake
// without a client certificate. Under TLS 1.3 the refusal arrives after
// the client finished its side, so a gRPC client may see only a broken
// pipe; this probe reads the node's alert instead.
func wantsClientCert(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	d := tls.Dialer{NetDialer: &net.Dialer{}, Config: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}}} //nolint:gosec // a protocol probe; nothing is sent
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return strings.Contains(err.Error(), "certificate required") || strings.Contains(err.Error(), "bad certificate")
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	_, err = c.Read(make([]byte, 1))
	return err != nil && (strings.Contains(err.Error(), "certificate required") || strings.Contains(err.Error(), "bad certificate"))
}

// probeCause words a connection a node closed (failure "reset" or
// "notgrpc") when security explains it: a TLS node dialled plaintext, or
// one that requires the client certificate this command did not give.
func (s *clientSecurityFlags) probeCause(ctx context.Context, addr string) string {
	switch {
	case !s.dialsTLS() && servesTLS(ctx, addr):
		return tlsNeededText
	case s.dialsTLS() && s.tlsCert == "" && wantsClientCert(ctx, addr):
		return tlsClientText
	}
	return ""
}
