package client

import (
	"testing"
	"time"
)

// A probe that ends without teaching anything (the caller gave up, the
// write's budget ran out) is released: the next call probes the node at
// once, instead of the node staying skipped for the probe's whole hold.
// A probe that gets any answer brings the node back.
func TestBackoff_ReleasedProbeIsRetriedAtOnce(t *testing.T) {
	var b backoff
	t0 := time.Unix(1000, 0)
	b.failed(t0, time.Second, false)
	if ok, _ := b.claim(t0.Add(500*time.Millisecond), 2*time.Second); ok {
		t.Fatal("claimed during the skip period")
	}
	ok, probe := b.claim(t0.Add(1100*time.Millisecond), 2*time.Second)
	if !ok || !probe {
		t.Fatalf("after the period: usable %v probe %v, want the probe", ok, probe)
	}
	if ok, _ := b.claim(t0.Add(1200*time.Millisecond), 2*time.Second); ok {
		t.Fatal("a second caller claimed the node while its probe runs")
	}
	b.release(t0.Add(1300 * time.Millisecond))
	ok, probe = b.claim(t0.Add(1310*time.Millisecond), 2*time.Second)
	if !ok || !probe {
		t.Fatalf("after release: usable %v probe %v, want a new probe at once (not at +3.1 s)", ok, probe)
	}
	b.ok()
	if ok, probe := b.claim(t0.Add(1320*time.Millisecond), 2*time.Second); !ok || probe {
		t.Fatalf("after an answer: usable %v probe %v, want up", ok, probe)
	}
	b.release(t0.Add(1330 * time.Millisecond)) // no effect on an up node
	if ok, probe := b.claim(t0.Add(1340*time.Millisecond), 2*time.Second); !ok || probe {
		t.Fatalf("release of an up node changed it: usable %v probe %v", ok, probe)
	}
}
