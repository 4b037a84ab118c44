//go:build !chaos

package main

import (
	"log/slog"
	"testing"
)

// A production build has no clock override: the chaos harness's offset
// variable must change nothing.
func TestChaosClock_IgnoredWithoutChaosTag(t *testing.T) {
	t.Setenv("INFERENCE_CACHE_CHAOS_CLOCK_OFFSET", "11m")
	clock, err := chaosClock(slog.Default())
	if err != nil || clock != nil {
		t.Fatalf("chaosClock() = %v, %v in a build without the chaos tag; want nil, nil", clock != nil, err)
	}
}
