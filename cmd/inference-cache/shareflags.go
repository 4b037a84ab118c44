package main

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/pflag"

	"github.com/inference-cache/inference-cache/client"
	"github.com/inference-cache/inference-cache/gateway"
)

// shareFlags are the flags of a gateway command (proxy, picker) that
// share its in-flight load with the other gateways of the cluster
// (contract §5.11).
type shareFlags struct {
	on       bool
	pickerID string
	interval time.Duration
}

func (s *shareFlags) register(f *pflag.FlagSet, what string) {
	f.BoolVar(&s.on, "share-load", true, "report this "+what+"'s in-flight requests per replica to the cluster (soft state) so that other gateways sharing it count them; --share-load=false for a single gateway")
	f.StringVar(&s.pickerID, "picker-id", "", "this "+what+"'s name among the gateways sharing the cluster (at most 128 bytes); empty = hostname-pid-random")
	f.DurationVar(&s.interval, "share-interval", client.DefaultLoadShareInterval, "time between two load reports (10ms to 1m); the cluster drops a gateway's load 2 intervals after its last report")
}

// check validates the flags, each error naming its flag and the limit.
func (s *shareFlags) check() error {
	switch {
	case len(s.pickerID) > client.MaxPickerIDBytes:
		return fmt.Errorf("--picker-id: %d bytes, over the limit of %d", len(s.pickerID), client.MaxPickerIDBytes)
	case s.interval < client.MinLoadShareInterval || s.interval > client.MaxLoadShareInterval:
		return fmt.Errorf("--share-interval %v: want %v to %v", s.interval, client.MinLoadShareInterval, client.MaxLoadShareInterval)
	}
	return nil
}

// apply sets the gateway's load sharing from the flags.
func (s *shareFlags) apply(g *gateway.Config, log *slog.Logger) {
	g.ShareLoad = client.LoadShareConfig{PickerID: s.pickerID, Interval: s.interval, Logger: log}
	g.NoShareLoad = !s.on
}
