package main

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// A bad value that came from the environment is reported under its
// variable, whichever check finds it (fault trial: INFERENCE_CACHE_LOG_LEVEL=loud
// was reported as --log-level, which the command line did not have).
func TestEnvErrors_NameTheVariable(t *testing.T) {
	cases := []struct {
		name, env, value string
		args             []string
		want             string
	}{
		{"log level at server start", "INFERENCE_CACHE_LOG_LEVEL", "loud", []string{"server"},
			`INFERENCE_CACHE_LOG_LEVEL (--log-level) "loud": must be debug, info, warn or error`},
		{"client timeout", "INFERENCE_CACHE_TIMEOUT", "-1s", []string{"status", "--addr", "127.0.0.1:1"},
			"INFERENCE_CACHE_TIMEOUT (--timeout) -1s: must be positive"},
		{"not UTF-8", "INFERENCE_CACHE_MODEL", "m\xff", []string{"lookup", "--addr", "127.0.0.1:1", "--tokens", "1"},
			"INFERENCE_CACHE_MODEL (--model): not valid UTF-8"},
		{"lookup block size", "INFERENCE_CACHE_BLOCK_SIZE", "-5", []string{"lookup", "--addr", "127.0.0.1:1", "--tokens", "1"},
			"INFERENCE_CACHE_BLOCK_SIZE (--block-size) -5"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(c.env, c.value)
			_, err := runCLI(t, "", c.args...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want one containing %q", err, c.want)
			}
		})
	}
}

// The same bad value typed on the command line is reported under the
// flag, even when the variable is also set (the command line wins).
func TestEnvErrors_CommandLineValueNamesTheFlag(t *testing.T) {
	t.Setenv("INFERENCE_CACHE_LOG_LEVEL", "info")
	_, err := runCLI(t, "", "server", "--log-level", "loud")
	if err == nil || !strings.HasPrefix(err.Error(), `--log-level "loud"`) {
		t.Fatalf("err = %v, want one starting with --log-level", err)
	}
}

// envNamed rewords only whole flag names and keeps the error chain.
func TestEnvNamed_WholeFlagNamesOnly(t *testing.T) {
	cmd := &cobra.Command{Use: "x"}
	cmd.Flags().String("addr", "", "")
	cmd.Flags().String("tls-ca", "", "")
	cmd.Flags().String("tls-cert", "", "")
	t.Setenv("INFERENCE_CACHE_ADDR", "a:1")
	t.Setenv("INFERENCE_CACHE_TLS_CERT", "c.pem")
	if err := applyEnv(cmd); err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]string{
		"--tls-cert and --tls-key go together":   "INFERENCE_CACHE_TLS_CERT (--tls-cert) and --tls-key go together",
		"--tls-ca/--tls-cert: bad":               "--tls-ca/INFERENCE_CACHE_TLS_CERT (--tls-cert): bad",
		"--grpc-addr x, --advertise-addr y":      "--grpc-addr x, --advertise-addr y",
		"--addr-list and --addr":                 "--addr-list and INFERENCE_CACHE_ADDR (--addr)",
		"--tls-cert-file is not --tls-certainly": "--tls-cert-file is not --tls-certainly",
	} {
		base := fmt.Errorf("%s: %w", in, fs.ErrNotExist)
		got := envNamed(cmd, base)
		if want += ": " + fs.ErrNotExist.Error(); got.Error() != want {
			t.Errorf("envNamed(%q) = %q, want %q", base, got, want)
		}
		if !errors.Is(got, fs.ErrNotExist) {
			t.Errorf("envNamed(%q) lost the wrapped error", in)
		}
	}
}

// File and directory flags may hold any bytes (a Linux path need not be
// UTF-8): they reach the open call, not the UTF-8 check.
func TestUTF8Check_SparesPathFlags(t *testing.T) {
	_, err := runCLI(t, "", "lookup", "--addr", "127.0.0.1:1", "--prompt-file", "/nonexistent/\xff.txt")
	if err == nil || strings.Contains(err.Error(), "UTF-8") || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("err = %v, want the open failure", err)
	}
}
