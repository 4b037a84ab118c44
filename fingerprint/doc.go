// Package fingerprint computes the content fingerprint of contract §3: the
// chained XXH3-64 (seed 1337) block hashes of a token-id sequence. Every
// gateway, subscriber and server computes it identically, so keys match
// across processes even though engines seed their own block hashes per
// process. The Append functions are allocation-free for the hot path.
package fingerprint
