package connlimit

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// At the bound, a connection that has sent nothing for over MinWait is
// closed to make room, and a normal request on a new connection is
// served.
func TestLimiter_EvictsTheLongestWaitingConnectionAtTheBound(t *testing.T) {
	l := New(2)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }),
		ConnState: l.ConnState, ConnContext: l.ConnContext}
	go func() { _ = srv.Serve(l.Listener(ln)) }()
	defer srv.Close()

	var idle []net.Conn
	for range 2 { // fill the bound with connections that send nothing
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle = append(idle, c)
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Get("http://" + ln.Addr().String())
	if err != nil {
		t.Fatalf("a request at the bound: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "ok" || l.Evicted() < 1 {
		t.Fatalf("answer %q, %d evicted: want the request served after an idle connection was closed", b, l.Evicted())
	}
	closed := 0
	for _, c := range idle {
		_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err != nil && !strings.Contains(err.Error(), "timeout") {
			closed++
		}
	}
	if closed < 1 {
		t.Errorf("no idle connection was closed")
	}
}
