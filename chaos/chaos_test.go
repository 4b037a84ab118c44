package chaos

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// envInt reads an integer environment variable with a default.
func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

// TestChaos is the chaos run. It starts processes, so it runs only when
// CHAOS is set: CHAOS=smoke (bounded, for CI) or CHAOS=long (the report
// run). Knobs: CHAOS_NODES (3|5), CHAOS_LEADER_KILLS, CHAOS_FOLLOWER_KILLS,
// CHAOS_PAUSES, CHAOS_REPLACES, CHAOS_FULL_RESTARTS, CHAOS_PARTITIONS
// (per partition kind), CHAOS_GOSSIP_PARTITIONS, CHAOS_RAFT_PARTITIONS,
// CHAOS_DISK_FULLS, CHAOS_CLOCK_SKEWS, CHAOS_FLOODS, CHAOS_MIN_DURATION (Go duration), CHAOS_FAST=1
// (--fast-timing), CHAOS_NO_NETNS=1, CHAOS_REPORT (Markdown path),
// CHAOS_DIR (keep data and logs there), CHAOS_SERVER_FLAGS (extra server
// flags, space-separated).
func TestChaos(t *testing.T) {
	mode := os.Getenv("CHAOS")
	if mode == "" {
		t.Skip("set CHAOS=smoke or CHAOS=long to run (make chaos-smoke / make chaos)")
	}
	def := map[string]int{"leader": 3, "follower": 1, "pause": 1, "replace": 1, "restart": 1, "part": 1, "one": 1}
	if mode == "long" {
		def = map[string]int{"leader": 22, "follower": 3, "pause": 6, "replace": 2, "restart": 2, "part": 2, "one": 2}
	}
	cfg := Config{
		Nodes: envInt(t, "CHAOS_NODES", 3),
		Counts: map[FaultKind]int{
			LeaderKill:      envInt(t, "CHAOS_LEADER_KILLS", def["leader"]),
			FollowerKill:    envInt(t, "CHAOS_FOLLOWER_KILLS", def["follower"]),
			LeaderPause:     envInt(t, "CHAOS_PAUSES", def["pause"]),
			Replace:         envInt(t, "CHAOS_REPLACES", def["replace"]),
			FullRestart:     envInt(t, "CHAOS_FULL_RESTARTS", def["restart"]),
			IsolateLeader:   envInt(t, "CHAOS_PARTITIONS", def["part"]),
			IsolateFollower: envInt(t, "CHAOS_PARTITIONS", def["part"]),
			SplitMinority:   envInt(t, "CHAOS_PARTITIONS", def["part"]),
			GossipCut:       envInt(t, "CHAOS_GOSSIP_PARTITIONS", def["one"]),
			RaftCut:         envInt(t, "CHAOS_RAFT_PARTITIONS", def["one"]),
			LeaderDiskFull:  envInt(t, "CHAOS_DISK_FULLS", def["one"]),
			ClockSkew:       envInt(t, "CHAOS_CLOCK_SKEWS", def["one"]),
			IngestFlood:     envInt(t, "CHAOS_FLOODS", def["one"]),
		},
		FastTiming: os.Getenv("CHAOS_FAST") == "1",
		NoNetns:    os.Getenv("CHAOS_NO_NETNS") == "1",
		// CHAOS_SERVER_FLAGS: extra server flags, space-separated.
		ServerFlags: strings.Fields(os.Getenv("CHAOS_SERVER_FLAGS")),
		Logger:      slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
	if d := os.Getenv("CHAOS_MIN_DURATION"); d != "" {
		v, err := time.ParseDuration(d)
		if err != nil {
			t.Fatalf("CHAOS_MIN_DURATION: %v", err)
		}
		cfg.MinDuration = v
	}
	cfg.Dir = os.Getenv("CHAOS_DIR")
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	} else if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg.Binary = testBinary(t)

	ctx := context.Background()
	if dl, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl.Add(-30*time.Second))
		defer cancel()
	}
	rep, err := Run(ctx, cfg)
	cmd := "make chaos-" + mode
	if mode == "long" {
		cmd = "make chaos"
	}
	md := rep.Markdown(cmd)
	t.Logf("report:\n%s", md)
	if p := os.Getenv("CHAOS_REPORT"); p != "" {
		if werr := os.WriteFile(p, []byte(md), 0o644); werr != nil {
			t.Error(werr)
		}
	}
	if err != nil {
		t.Fatalf("harness: %v (logs under %s)", err, cfg.Dir)
	}
	if !rep.Passed() {
		if rep.Visualization != "" {
			t.Logf("linearizability visualization: %s", rep.Visualization)
		}
		keepLogs(t, cfg.Dir)
		t.Fatalf("invariants broken:\n%s", strings.Join(rep.SummaryLines(), "\n"))
	}
}

// keepLogs copies the node logs out of a temporary directory so that a
// failed CI run leaves them behind.
func keepLogs(t *testing.T, dir string) {
	if os.Getenv("CHAOS_DIR") != "" {
		return
	}
	dst, err := os.MkdirTemp("", "chaos-logs-")
	if err != nil {
		return
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	for _, f := range files {
		if strings.HasSuffix(f, ".log") || strings.HasSuffix(f, ".html") {
			if b, err := os.ReadFile(f); err == nil {
				_ = os.WriteFile(filepath.Join(dst, filepath.Base(f)), b, 0o644)
			}
		}
	}
	t.Logf("node logs and visualization kept in %s", dst)
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// testBinary builds the server binary once per test process (into a
// directory removed by TestMain).
func testBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "chaos-bin-")
		if err != nil {
			binErr = err
			return
		}
		binDirs = append(binDirs, dir)
		root, _ := filepath.Abs("..")
		binPath, binErr = BuildBinary(root, dir)
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

var binDirs []string

func TestMain(m *testing.M) {
	code := m.Run()
	for _, d := range binDirs {
		os.RemoveAll(d)
	}
	os.Exit(code)
}
