package raftnode

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// raft's hclog.Fmt values arrive formatted, not as "[%+v …]".
func TestSlogSink_FormatsHclogFmt(t *testing.T) {
	var buf bytes.Buffer
	s := slogSink{log: slog.New(slog.NewTextHandler(&buf, nil)), min: slog.LevelInfo}
	s.Accept("raft", hclog.Info, "initial configuration", "servers", hclog.Fmt("%+v", []int{1, 2}))
	if out := buf.String(); !strings.Contains(out, "servers=\"[1 2]\"") || strings.Contains(out, "%+v") {
		t.Fatalf("log line %q: want servers=\"[1 2]\"", out)
	}
}
