package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"unicode/utf8"

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

// envAnnotation marks a flag whose value came from its environment
// variable; envNamed reads it.
const envAnnotation = "inference-cache/from-env"

// applyEnv sets every flag of cmd not given on the command line from its
// environment variable, when that is set, and marks it (envAnnotation).
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
		_ = cmd.Flags().SetAnnotation(f.Name, envAnnotation, []string{envName(f.Name)})
	})
	return firstErr
}

// envNamed makes err name the environment variable instead of the flag
// when the value it complains about came from the environment: an operator
// told "--log-level" looks for it on a command line that does not have it.
// The first mention of each such flag, "--log-level", becomes
// "INFERENCE_CACHE_LOG_LEVEL (--log-level)"; errors.Is and errors.As still
// see err.
func envNamed(cmd *cobra.Command, err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		env, ok := f.Annotations[envAnnotation]
		if !ok || len(env) == 0 {
			return
		}
		if i := flagMention(msg, f.Name); i >= 0 {
			n := len("--" + f.Name)
			msg = msg[:i] + env[0] + " (" + msg[i:i+n] + ")" + msg[i+n:]
		}
	})
	if msg == err.Error() {
		return err
	}
	return &envError{msg: msg, err: err}
}

// envError is an error reworded by envNamed.
type envError struct {
	msg string
	err error
}

func (e *envError) Error() string { return e.msg }
func (e *envError) Unwrap() error { return e.err }

// flagMention returns the byte offset of the first "--name" in msg that is
// the whole flag name (not the start of --name-suffix), or -1.
func flagMention(msg, name string) int {
	word := func(b byte) bool { return b == '-' || b == '_' || 'a' <= b && b <= 'z' || '0' <= b && b <= '9' }
	needle := "--" + name
	for off := 0; ; {
		i := strings.Index(msg[off:], needle)
		if i < 0 {
			return -1
		}
		i += off
		end := i + len(needle)
		if (i == 0 || !word(msg[i-1])) && (end == len(msg) || !word(msg[end])) {
			return i
		}
		off = i + 1
	}
}

// checkUTF8Flags refuses a string flag (or an item of a list flag) that is
// not valid UTF-8, naming the flag and the byte offset: ids, names and
// prompts travel in protobuf string fields, which must be UTF-8, and a
// marshalling failure inside an RPC names no flag. File and directory
// flags (markPaths) are exempt: a path is bytes.
func checkUTF8Flags(cmd *cobra.Command) error {
	var err error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if err != nil || isPathFlag(f) {
			return
		}
		var items []string
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			items = sv.GetSlice()
		} else if f.Value.Type() == "string" {
			items = []string{f.Value.String()}
		}
		for i, s := range items {
			if utf8.ValidString(s) {
				continue
			}
			off := invalidUTF8At(s)
			what := "--" + f.Name
			if len(items) > 1 {
				what = fmt.Sprintf("--%s item %d", f.Name, i+1)
			}
			err = fmt.Errorf("%s: not valid UTF-8: byte %#02x at offset %d", what, s[off], off)
			return
		}
	})
	return err
}

// invalidUTF8At returns the byte offset of the first invalid UTF-8
// sequence of s, or -1.
func invalidUTF8At(s string) int {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(s[i:]); n <= 1 {
				return i
			}
		}
	}
	return -1
}

// markPaths marks flags of f as file or directory paths: shells complete
// them as files, and checkUTF8Flags lets them hold any bytes. A name that
// is not a flag of f is a programming error.
func markPaths(f *pflag.FlagSet, names ...string) {
	for _, n := range names {
		if err := cobra.MarkFlagFilename(f, n); err != nil {
			panic(err)
		}
	}
}

func isPathFlag(f *pflag.Flag) bool {
	_, ok := f.Annotations[cobra.BashCompFilenameExt]
	return ok
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
