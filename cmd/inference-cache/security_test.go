package main

import (
	"log/slog"
	"strings"
	"testing"
)

// A token variable that is set but blank must not leave its class open
// while the log says a token is configured (fault trial: WRITE_TOKEN=' '
// let unauthenticated writes through).
func TestTokenSource_BlankEnvRefused(t *testing.T) {
	const env = "INFERENCE_CACHE_TEST_TOKEN"
	cases := []struct {
		name, val string
		wantErr   bool
		wantHow   string
	}{
		{"space", " ", true, ""},
		{"tab", "\t", true, ""},
		{"newlines", "\n\n", true, ""},
		{"empty means unset", "", false, "off"},
		{"token", "s3cret", false, "env"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(env, c.val)
			src, how, err := tokenSource("", env, slog.New(slog.DiscardHandler))
			if c.wantErr {
				if err == nil || !strings.Contains(err.Error(), env) || !strings.Contains(err.Error(), "whitespace") {
					t.Fatalf("got %v, %q, %v; want an error naming %s", src, how, err, env)
				}
				return
			}
			if err != nil || how != c.wantHow {
				t.Fatalf("got %q, %v; want %q", how, err, c.wantHow)
			}
		})
	}
}
