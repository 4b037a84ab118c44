package main

import (
	"strings"
	"testing"
	"time"
)

// Flag values that would start a server unable to work (or one waiting
// forever) are refused, naming the flag.
func TestServerOptions_Validate(t *testing.T) {
	ok := serverOptions{nodeID: "n1", bootstrapExpect: 3, shutdownTimeout: time.Second}
	if err := ok.validate(); err != nil {
		t.Fatalf("valid options: %v", err)
	}
	for name, c := range map[string]struct {
		mod  func(*serverOptions)
		flag string
	}{
		"no node id":        {func(o *serverOptions) { o.nodeID = "" }, "--node-id"},
		"newline in id":     {func(o *serverOptions) { o.nodeID = "a\nb" }, "--node-id"},
		"space in id":       {func(o *serverOptions) { o.nodeID = "a b" }, "--node-id"},
		"long id":           {func(o *serverOptions) { o.nodeID = strings.Repeat("x", 129) }, "--node-id"},
		"negative expect":   {func(o *serverOptions) { o.bootstrapExpect = -1 }, "--bootstrap-expect"},
		"negative shutdown": {func(o *serverOptions) { o.shutdownTimeout = -5 * time.Second }, "--shutdown-timeout"},
	} {
		o := ok
		c.mod(&o)
		if err := o.validate(); err == nil || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("%s: err = %v, want one naming %s", name, err, c.flag)
		}
	}
}
