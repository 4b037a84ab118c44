// Package tlsconfig loads the TLS material and shared secrets of an
// inference-cache node from files and keeps them current (contract §9.7).
//
// A Reloader holds a certificate, its key and a CA bundle. It builds
// *tls.Config values whose callbacks (GetConfigForClient on servers,
// GetClientCertificate and VerifyConnection on clients) read the current
// material, and it re-reads the files when their modification time or size
// changes (checked at most once per Options.CheckInterval, on the next
// handshake), so a rotated certificate or CA bundle takes effect without a
// restart. A file that fails to parse after a change is logged and ignored:
// the previous material stays in force.
//
// A SecretFile holds newline-separated secrets (bearer tokens, gossip keys)
// re-read on change in the same way; ReadGossipKeys parses memberlist keys.
//
// The package has no goroutines of its own and never logs secret values.
package tlsconfig
