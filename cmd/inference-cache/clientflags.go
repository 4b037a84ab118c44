package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/inference-cache/inference-cache/client"
)

// clientFlags are shared by every client subcommand.
type clientFlags struct {
	addrs    []string
	json     bool
	timeout  time.Duration
	security clientSecurityFlags
}

// register adds the client flags to cmd; how says what cmd does with
// several --addr (the addr* texts). A failure to reach any node comes out
// of cmd's RunE in words (explain); register therefore goes after RunE is
// set.
func (c *clientFlags) register(cmd *cobra.Command, how string) {
	cmd.Flags().StringSliceVar(&c.addrs, "addr", []string{defaultGRPCAddr}, "gRPC address HOST:PORT of a server node (its --grpc-addr; repeatable); "+how)
	cmd.Flags().BoolVar(&c.json, "json", false, "print JSON instead of a table")
	cmd.Flags().DurationVar(&c.timeout, "timeout", 10*time.Second, "bound on the whole command (positive)")
	c.security.register(cmd)
	cmd.PreRunE = func(*cobra.Command, []string) error { return c.validate() }
	if run := cmd.RunE; run != nil {
		cmd.RunE = func(cmd *cobra.Command, args []string) error { return c.explain(cmd.Context(), run(cmd, args)) }
	}
}

// validate refuses client flag values no call could succeed with, before
// any call.
func (c *clientFlags) validate() error {
	if c.timeout <= 0 {
		return fmt.Errorf("--timeout %v: must be positive", c.timeout)
	}
	for _, a := range c.addrs {
		if err := checkAddr(a); err != nil {
			return err
		}
	}
	return nil
}

func (c *clientFlags) dial() (*client.Client, error) {
	return c.dialAddrs(c.addrs)
}

// dialAddrs is dial to addrs instead of --addr.
func (c *clientFlags) dialAddrs(addrs []string) (*client.Client, error) {
	cfg := client.Config{Addrs: addrs, LookupTimeout: c.timeout}
	if err := c.security.apply(&cfg); err != nil {
		return nil, err
	}
	return client.New(cfg)
}

var pjson = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true, Multiline: true, Indent: "  "}

func printJSON(w io.Writer, m proto.Message) error {
	b, err := pjson.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}

func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

// parseUints parses a list of unsigned integers of at most bits bits,
// separated by commas or white space. An empty item between two commas or
// at either end of the list is an error naming its position, not skipped:
// "1,,2" is more likely a lost value than a list of two.
func parseUints(s string, bits int) ([]uint64, error) {
	var out []uint64
	pos := 0
	for _, item := range strings.Split(s, ",") {
		fields := strings.Fields(item)
		if len(fields) == 0 {
			pos++
			return nil, fmt.Errorf("item %d is empty (two commas in a row, or a comma at an end of the list)", pos)
		}
		for _, f := range fields {
			pos++
			v, err := strconv.ParseUint(f, 10, bits)
			if err != nil {
				return nil, fmt.Errorf("item %d %q: must be an integer between 0 and %d", pos, f, uint64(1)<<bits-1)
			}
			out = append(out, v)
		}
	}
	return out, nil
}

// pathErr is err about the file at path, naming path once: an
// *fs.PathError for path already names it, and wrapping it again prints
// "open x: open x: …".
func pathErr(path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Path == path {
		return fmt.Errorf("%s %s: %w", pe.Op, path, pe.Err)
	}
	return fmt.Errorf("%s: %w", path, err)
}

// printable returns s as is when every rune is printable, else quoted
// with escapes: ids come from the engines, and a control character (a
// terminal escape, a NUL) must not reach the operator's terminal raw.
func printable(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) < 0 {
		return s
	}
	return strconv.Quote(s)
}

// run dials the --addr nodes, bounds the whole call by --timeout and runs
// fn with the client, closing it after: the frame of every client command.
func (c *clientFlags) run(cmd *cobra.Command, fn func(ctx context.Context, cl *client.Client) error) error {
	cl, err := c.dial()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(cmd.Context(), c.timeout)
	defer cancel()
	return fn(ctx, cl)
}

// print writes m to the command's output as JSON with --json, else in
// the human form human writes (a table, YAML, a line).
func (c *clientFlags) print(cmd *cobra.Command, m proto.Message, human func(w io.Writer) error) error {
	if c.json {
		return printJSON(cmd.OutOrStdout(), m)
	}
	return human(cmd.OutOrStdout())
}
