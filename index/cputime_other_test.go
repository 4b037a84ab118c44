//go:build !linux

package index

import "time"

func threadCPU() (time.Duration, bool) { return 0, false }
