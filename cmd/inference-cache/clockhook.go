//go:build !chaos

package main

import (
	"log/slog"
	"time"
)

// chaosClock is the server's wall clock override: none in a production
// build. The chaos build (clockhook_chaos.go, `go build -tags chaos`)
// reads an offset from the environment instead.
func chaosClock(*slog.Logger) (func() time.Time, error) { return nil, nil }
