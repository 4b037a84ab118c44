package chaos

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// echoServer accepts connections and echoes them back.
func echoServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

// roundTrip sends msg through addr and times the echo.
func roundTrip(t *testing.T, c net.Conn, msg []byte) time.Duration {
	start := time.Now()
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatalf("echo changed the bytes")
	}
	return time.Since(start)
}

// The proxy delays each direction by the one-way delay (a round trip
// through it takes at least twice that), a certain loss adds the stall
// to each direction, and the bytes arrive unchanged and in order.
func TestDelayProxy_DelayAndLoss(t *testing.T) {
	p, err := NewDelayProxy("127.0.0.1:0", echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if d := roundTrip(t, c, []byte("warm")); d > 100*time.Millisecond {
		t.Fatalf("no impairment: round trip %v", d)
	}
	p.SetImpairment(40*time.Millisecond, 0, 0)
	if d := roundTrip(t, c, []byte("delayed")); d < 80*time.Millisecond {
		t.Fatalf("40 ms one way: round trip %v, want ≥ 80 ms", d)
	}
	p.SetImpairment(20*time.Millisecond, 1, 100*time.Millisecond)
	if d := roundTrip(t, c, []byte("lost")); d < 240*time.Millisecond {
		t.Fatalf("every segment lost, 100 ms stall: round trip %v, want ≥ 2 × (20 + 100) ms", d)
	}
	p.SetImpairment(0, 0, 0)
	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	go func() { _, _ = c.Write(big) }()
	got := make([]byte, len(big))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("1 MiB through the proxy: err %v, equal %v", err, bytes.Equal(got, big))
	}
}
