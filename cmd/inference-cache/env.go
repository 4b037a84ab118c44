package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// EnvPrefix prefixes the environment variable of every flag: --node-id is
// also read from INFERENCE_CACHE_NODE_ID. A flag given on the command line
// wins over its variable. Repeatable flags take a comma-separated list.
const EnvPrefix = "INFERENCE_CACHE_"

// envName returns the environment variable of a flag name.
func envName(flag string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// applyEnv sets every flag of cmd not given on the command line from its
// environment variable, when that is set.
func applyEnv(cmd *cobra.Command) error {
	var firstErr error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Changed || firstErr != nil || f.Name == "help" {
			return
		}
		v, ok := os.LookupEnv(envName(f.Name))
		if !ok {
			return
		}
		if err := f.Value.Set(v); err != nil {
			firstErr = fmt.Errorf("environment %s=%q: %v", envName(f.Name), v, err)
			return
		}
		f.Changed = true
	})
	return firstErr
}

// newLogger returns a slog logger writing to w in format "json" or "text"
// at level ("debug", "info", "warn", "error").
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: must be debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: must be json or text", format)
}
