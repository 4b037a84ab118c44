package main

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// unknownFlag matches pflag's errors for a flag the command does not
// have: "unknown flag: --name" and "unknown shorthand flag: 'x' in -x".
var unknownFlag = regexp.MustCompile(`^unknown flag: --([^=\s]+)|^unknown shorthand flag: '.' in -([^=\s]+)`)

// suggestFlags is the root's flag error function (cobra hands it to every
// subcommand): an unknown flag gets "did you mean --x?" naming the
// command's closest flags, the way cobra suggests subcommands. Other flag
// errors pass unchanged.
func suggestFlags(cmd *cobra.Command, err error) error {
	m := unknownFlag.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	// A shorthand error names what followed the dash: -model is read as
	// -m -o -d …, and --model is likely what was meant.
	typed := m[1] + m[2]
	var names []string
	if len(typed) > 2 {
		names = closestFlags(cmd.Flags(), typed)
	}
	if len(names) == 0 {
		return fmt.Errorf("%w; `%s --help` lists the flags", err, cmd.CommandPath())
	}
	for i, n := range names {
		names[i] = "--" + n
	}
	return fmt.Errorf("%w; did you mean %s?", err, strings.Join(names, " or "))
}

// closestFlags are the names of the flags of fs (at most three, nearest
// first) within cobra's suggestion distance of typed, or that typed
// starts or ends with (--model-id for --model) or that start with it.
func closestFlags(fs *pflag.FlagSet, typed string) []string {
	type cand struct {
		name string
		d    int
	}
	var cs []cand
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		d := editDistance(strings.ToLower(typed), f.Name)
		near := d <= 2
		if len(f.Name) >= 3 && (strings.HasPrefix(typed, f.Name) || strings.HasSuffix(typed, f.Name)) {
			near = true
		}
		if len(typed) >= 3 && strings.HasPrefix(f.Name, typed) {
			near = true
		}
		if near {
			cs = append(cs, cand{f.Name, d})
		}
	})
	slices.SortStableFunc(cs, func(a, b cand) int { return a.d - b.d })
	var out []string
	for _, c := range cs[:min(len(cs), 3)] {
		out = append(out, c.name)
	}
	return out
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// groupRunE is the RunE of a command that only groups subcommands
// (policy, snapshot, cluster): without arguments it prints its help, as
// cobra does; an unknown subcommand is an error (exit 1) with cobra's
// nearest subcommands, where cobra alone would print the help and exit 0.
func groupRunE(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return cmd.Help()
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	var names, near []string
	best := 3 // cobra's suggestion distance is 2
	for _, c := range cmd.Commands() {
		if !c.IsAvailableCommand() {
			continue
		}
		names = append(names, c.Name())
		d := editDistance(strings.ToLower(args[0]), c.Name())
		if strings.HasPrefix(c.Name(), strings.ToLower(args[0])) {
			d = 0
		}
		switch {
		case d < best:
			best, near = d, []string{c.Name()}
		case d == best:
			near = append(near, c.Name())
		}
	}
	if len(near) > 0 {
		msg += "; did you mean " + strings.Join(near, " or ") + "?"
	} else {
		msg += "; its commands are " + strings.Join(names, ", ")
	}
	return fmt.Errorf("%s", msg)
}

// namedArgs is cobra.ExactArgs(len(names)) whose errors name the missing
// arguments as the usage line spells them (FILE, ID, RAFT_ADDR) and show
// the command's first example, instead of "accepts 1 arg(s), received 0".
func namedArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		eg := ""
		if first, _, _ := strings.Cut(strings.TrimSpace(cmd.Example), "\n"); first != "" {
			eg = ", e.g. " + first
		}
		switch {
		case len(args) < len(names):
			return fmt.Errorf("%s: missing %s; usage: %s%s", cmd.CommandPath(), strings.Join(names[len(args):], " and "), cmd.UseLine(), eg)
		case len(args) > len(names):
			return fmt.Errorf("%s takes %s, got %d arguments: %s; usage: %s%s", cmd.CommandPath(), strings.Join(names, " "), len(args), strings.Join(quoteAll(args), " "), cmd.UseLine(), eg)
		}
		return nil
	}
}

// quoteAll quotes each argument that is empty or holds white space, so a
// list of them reads unambiguously.
func quoteAll(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t") {
			out[i] = strconv.Quote(a)
		} else {
			out[i] = printable(a)
		}
	}
	return out
}
