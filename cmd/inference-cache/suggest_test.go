package main

import (
	"strings"
	"testing"
)

// An unknown flag is answered with the command's nearest flags, and an
// unknown subcommand of a group exits with an error and cobra's
// suggestion instead of the group's help (exit 0).
func TestUnknownFlagsAndSubcommandsGetSuggestions(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"lookup", "--modle", "m"}, "unknown flag: --modle; did you mean --model?"},
		{[]string{"lookup", "--model-id", "m"}, "unknown flag: --model-id; did you mean --model?"},
		{[]string{"lookup", "-model", "m"}, "unknown shorthand flag: 'm' in -model; did you mean --model?"},
		{[]string{"status", "--adr", "x:1"}, "unknown flag: --adr; did you mean --addr?"},
		{[]string{"ingest", "--fiel", "x"}, "unknown flag: --fiel; did you mean --file?"},
		{[]string{"status", "--zzzzzz"}, "unknown flag: --zzzzzz; `inference-cache status --help` lists the flags"},
		{[]string{"policy", "sett", "p.yaml"}, `unknown command "sett" for "inference-cache policy"; did you mean set?`},
		{[]string{"snapshot", "bogus"}, `unknown command "bogus" for "inference-cache snapshot"; its commands are inspect, restore, save`},
	} {
		out, err := runCLI(t, "", c.args...)
		if err == nil || err.Error() != c.want {
			t.Errorf("%v: err = %v\nwant        %s\n(output %q)", c.args, err, c.want, out)
		}
	}
	// A group without arguments still prints its help.
	out, err := runCLI(t, "", "policy")
	if err != nil || !strings.Contains(out, "Available Commands:") {
		t.Errorf("policy alone: %v\n%s", err, out)
	}
}

// A command short of its arguments names what is missing as its usage
// line does, not "accepts 1 arg(s), received 0".
func TestNamedArgs_NameWhatIsMissing(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"policy", "set"}, "inference-cache policy set: missing FILE; usage: inference-cache policy set FILE [flags], e.g. inference-cache policy set policy.yaml"},
		{[]string{"snapshot", "save"}, "inference-cache snapshot save: missing FILE; usage: inference-cache snapshot save FILE [flags], e.g. inference-cache snapshot save backup.snap --addr 127.0.0.1:7401"},
		{[]string{"cluster", "add-server", "node4"}, "inference-cache cluster add-server: missing RAFT_ADDR; usage: inference-cache cluster add-server ID RAFT_ADDR [flags], e.g. inference-cache cluster add-server node4 10.0.0.4:7402 --addr 127.0.0.1:7401"},
		{[]string{"cluster", "remove-server"}, "inference-cache cluster remove-server: missing ID; usage: inference-cache cluster remove-server ID [flags], e.g. inference-cache cluster remove-server node3 --addr 127.0.0.1:7401"},
		{[]string{"policy", "set", "a.yaml", "my file.yaml"}, `inference-cache policy set takes FILE, got 2 arguments: a.yaml "my file.yaml"; usage: inference-cache policy set FILE [flags], e.g. inference-cache policy set policy.yaml`},
	} {
		_, err := runCLI(t, "", c.args...)
		if err == nil || err.Error() != c.want {
			t.Errorf("%v: err = %v\nwant        %s", c.args, err, c.want)
		}
	}
}
