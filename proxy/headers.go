package proxy

import (
	"net/http"
	"net/textproto"
	"strings"
)

// hopHeaders are the hop-by-hop headers a proxy does not forward
// (RFC 9110 §7.6.1; Proxy-Connection, Keep-Alive and TE as RFC 9110
// §7.6.1 and 7230 name them too).
var hopHeaders = map[string]bool{
	"Connection": true, "Proxy-Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
}

// copyHeaders copies src's end-to-end headers into dst: not the
// hop-by-hop ones, nor any header that src's Connection header names
// (RFC 9110 §7.6.1: "the intermediary MUST ... remove or replace any
// received connection options"). Values are shared, not copied.
func copyHeaders(dst, src http.Header) {
	conn := src["Connection"]
	for k, vs := range src {
		if hopHeaders[k] || (len(conn) > 0 && connectionNames(conn, k)) {
			continue
		}
		dst[k] = vs
	}
}

// connectionNames reports whether the Connection header values name
// header key (canonical form), comparing case-insensitively.
func connectionNames(conn []string, key string) bool {
	for _, v := range conn {
		for opt := range strings.SplitSeq(v, ",") {
			if opt = strings.TrimSpace(opt); opt != "" && textproto.CanonicalMIMEHeaderKey(opt) == key {
				return true
			}
		}
	}
	return false
}
