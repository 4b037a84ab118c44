// Package doccmds runs the commands the documents print (README.md,
// docs/*.md, clients/*/README.md and every --help example) against
// `make run`: its own package so that its minutes of runtime have their
// own test timeout.
package doccmds

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/internal/syncbuf"
)

// binPath is the inference-cache binary TestMain built (empty in short
// mode).
var binPath string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "ic-doccmds-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "inference-cache")
	build := exec.Command("go", "build", "-o", binPath, "../../cmd/inference-cache")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// The documents whose commands must run as printed against `make run`.
var docFiles = []string{"README.md", "docs/*.md", "clients/*/README.md", "clients/*/examples/README.md"}

// skipMarker, on the line before a fence, says why that block does not
// run against `make run` (it builds an image, needs Kubernetes, …).
var skipMarker = regexp.MustCompile(`^<!-- doc-commands: skip \((.+)\) -->$`)

// outputMarker, on the lines right before a fence (one per line), names
// text the block's output must hold: the claim the document makes about
// what the command prints (a reason code, a replica).
var outputMarker = regexp.MustCompile(`^<!-- doc-commands: output has \((.+)\) -->$`)

// docBlock is one fenced code block of a document.
type docBlock struct {
	file, lang, text, skip string
	wants                  []string // outputMarker texts
	line                   int
}

// docBlocks reads the fenced blocks of path (relative to root).
func docBlocks(t *testing.T, root, path string) []docBlock {
	b, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	var out []docBlock
	var cur *docBlock
	var wants []string // the output markers just read
	prev := ""
	for i, line := range strings.Split(string(b), "\n") {
		switch {
		case cur == nil && outputMarker.MatchString(line):
			wants = append(wants, outputMarker.FindStringSubmatch(line)[1])
		case cur == nil:
			if strings.HasPrefix(line, "```") {
				cur = &docBlock{file: path, lang: strings.TrimSpace(strings.TrimPrefix(line, "```")), line: i + 1, wants: wants}
				if m := skipMarker.FindStringSubmatch(prev); m != nil {
					cur.skip = m[1]
				}
			}
			wants = nil // markers belong to the fence right after them
		case strings.HasPrefix(line, "```"):
			out = append(out, *cur)
			cur = nil
		default:
			cur.text += line + "\n"
		}
		prev = line
	}
	return out
}

// helpExampleSkips are the --help examples that do not run against
// `make run`, by command and the example's first line, with why.
var helpExampleSkips = map[string]string{
	"bench|inference-cache bench --trace testdata/mooncake/conversation_trace.jsonl.gz --engines 8 --cache-blocks 5712": "a simulation of minutes on 2 cores; make evaluate runs bench",
	"bench|inference-cache bench --requests 2000 --strategies round-robin,dynamo,lookuproute-sdk,oracle --json":         "a simulation of minutes on 2 cores; make evaluate runs bench",
	"bench|inference-cache bench --trace trace.jsonl --gateways 4 --prefill-tps 7000 --plot out.png":                    "trace.jsonl stands for the reader's own trace",
	"bench|inference-cache bench --trace trace.jsonl --addr 127.0.0.1:7401 --addr 127.0.0.1:7411 --plot out.png":        "trace.jsonl stands for the reader's own trace",
	"bench|inference-cache bench --trace trace.jsonl --sweep 1000,2000,4000,8000 --plot sweep.png":                      "trace.jsonl stands for the reader's own trace",
	"cluster|inference-cache cluster remove-server node3 --addr 127.0.0.1:7401":                                         "takes node3 out of the cluster the other examples use",
	"cluster|inference-cache cluster add-server node4 10.0.0.4:7402":                                                    "adds a voter on another host",
	"cluster add-server|inference-cache cluster add-server node4 10.0.0.4:7402 --addr 127.0.0.1:7401":                   "adds a voter on another host",
	"cluster remove-server|inference-cache cluster remove-server node3 --addr 127.0.0.1:7401":                           "takes node3 out of the cluster the other examples use",
	"cluster transfer-leadership|inference-cache cluster transfer-leadership node2 10.0.0.2:7402":                       "names a server on another host",
	"dev|inference-cache dev": "is make run itself, already running",
	"dev|inference-cache dev --dir /tmp/ic --base-port 9400 --policy policy.yaml":                                                         "policy.yaml stands for the reader's own policy",
	"dev|inference-cache dev --engines 0 --demo-fleet=false   # the cluster alone":                                                        "a second dev cluster on make run's ports",
	"health|inference-cache health --addr 10.0.0.1:7401 --service inferencecache.v1.InferenceCache":                                       "a node on another host",
	"ingest|inference-cache ingest --file events.json --addr 127.0.0.1:7401 --addr 127.0.0.1:7411":                                        "events.json stands for the reader's own events",
	"loadgen|inference-cache loadgen --target http://127.0.0.1:7480 --model qwen3 --speedup 4 --limit 300":                                "a proxy of another layout (bench --live's)",
	"loadgen|inference-cache loadgen --target http://127.0.0.1:7480 --model qwen3 --skip 1000 --limit 500 --warmup 100 --results r.jsonl": "a proxy of another layout (bench --live's)",
	"loadgen|inference-cache loadgen --target http://127.0.0.1:7461 --compare http://127.0.0.1:7463 --model qwen3 \\":                     "README.md's loadgen block, which runs, is the same command (4 minutes)",
	"render|echo '{\"prompt\": \"Hello world\"}' | inference-cache render --models-dir ./models --model mistral   # your own models":      "a models directory of the reader's, with a mistral tokenizer",
	"lookup|inference-cache lookup --model qwen3-8b --prompt-file conversation.txt":                                                       "conversation.txt stands for the reader's own prompt",
	"lookup|inference-cache lookup --model qwen3-8b --cache-salt \"$TENANT_SALT\" --tokens \"$(seq -s, 0 127)\"":                          "$TENANT_SALT stands for the reader's salt",
	"picker|inference-cache picker --pool-name vllm-qwen3 --pool-namespace default \\":                                                    "needs Kubernetes (an in-cluster config)",
	"policy set|inference-cache policy set old-policy.yaml --force":                                                                       "old-policy.yaml stands for an older policy of the reader's",
	"proxy|kill -HUP <pid>   # reload --backends":                                                                                         "<pid> stands for the proxy's pid",
	"server|inference-cache server --node-id n1 --data-dir /var/lib/inference-cache \\":                                                   "a production node on other hosts",
	"server|inference-cache server --node-id solo --data-dir ./data --bootstrap-expect 1":                                                 "a fourth node on make run's ports",
	"server|inference-cache server --node-id n1 ... --tls-cert node.pem --tls-key node-key.pem --tls-ca ca.pem \\":                        "a production node; ... stands for its other flags",
	"snapshot|inference-cache snapshot restore backup.snap":                                                                               "asks for confirmation at a terminal; the --yes example runs it",
	"snapshot restore|inference-cache snapshot restore backup.snap --addr 127.0.0.1:7401":                                                 "asks for confirmation at a terminal; the --yes example runs it",
	"snapshot inspect|inference-cache snapshot inspect data/raft/snapshots/2-123-456/state.bin --json":                                    "a snapshot file of a node's data directory, named for the example",
	"subscribe|inference-cache subscribe --config engines.yaml --addr 10.0.0.1:7401 --addr 10.0.0.2:7401":                                 "engines and nodes on other hosts",
	"top|inference-cache top --addr 10.0.0.1:7401 --interval 2s":                                                                          "a node on another host",
}

// serving are the commands that serve until stopped: their example passes
// when the process is still up after servingGrace (its flags accepted,
// its ports bound), and is then stopped.
var serving = map[string]bool{"picker": true, "proxy": true, "sim-engine": true, "subscribe": true, "server": true, "dev": true, "top": true}

const servingGrace = 5 * time.Second

// servingCommand reports whether text is one command (continuation lines
// joined) of a serving subcommand: it runs until stopped.
func servingCommand(text string) bool {
	cmds := splitExamples(strings.Split(strings.TrimSpace(text), "\n"))
	if len(cmds) != 1 {
		return false
	}
	f := strings.Fields(cmds[0][0])
	if len(f) < 2 || filepath.Base(f[0]) != "inference-cache" || strings.Contains(text, "--once") {
		return false
	}
	return serving[f[1]]
}

// makeRunPorts are the ports `make run` binds (dev's default layout).
var makeRunPorts = []int{7401, 7402, 7403, 7404, 7411, 7412, 7413, 7414, 7421, 7422, 7423, 7424,
	7431, 7432, 7441, 7442, 7451, 7452, 7461, 7462, 7463}

// Every command that README.md, docs/*.md, clients/*/README.md and the
// --help examples print runs as printed against `make run`: a dev cluster
// on its default ports with its default fleet, from a directory laid out
// as the repository (bin/inference-cache, .dev-cluster, testdata, …).
// Fenced sh blocks run whole with bash -e -o pipefail; the Python README's
// python blocks run as one script; each --help example runs on its own.
// A block marked <!-- doc-commands: skip (why) --> and the examples in
// helpExampleSkips are the only ones left out, each with its reason.
func TestDocCommands_RunAsPrintedAgainstMakeRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts make run's cluster and fleet")
	}
	for _, p := range makeRunPorts {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Fatalf("port %d, one of make run's, is taken (%v): stop the make run or test that holds it", p, err)
		}
		l.Close()
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	work := repoMirror(t, root)
	dev := exec.Command(filepath.Join(work, "bin", "inference-cache"), "dev")
	dev.Dir = work
	var devOut syncbuf.Buffer
	dev.Stdout, dev.Stderr = &devOut, &devOut
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	devDone := make(chan struct{})
	go func() { _ = dev.Wait(); close(devDone) }()
	t.Cleanup(func() {
		_ = dev.Process.Signal(syscall.SIGINT)
		select {
		case <-devDone:
		case <-time.After(30 * time.Second):
			_ = dev.Process.Kill()
			<-devDone
		}
		if t.Failed() {
			t.Logf("make run's output:\n%s", devOut.String())
		}
	})
	poll.Eventually(t, 3*time.Minute, 200*time.Millisecond, func() (bool, string) {
		select {
		case <-devDone:
			t.Fatalf("dev exited while starting:\n%s", devOut.String())
		default:
		}
		return strings.Contains(devOut.String(), "demo traffic:"), "dev not up (no \"demo traffic:\" line yet):\n" + devOut.String()
	})
	// The banner's curl pair first, as a reader would paste it: the
	// Python README's lookup then finds chat-1's prefix.
	for _, line := range strings.Split(devOut.String(), "\n") {
		if l := strings.TrimSpace(line); strings.HasPrefix(l, "curl ") {
			runSnippet(t, work, "make run's banner", "bash", strings.ReplaceAll(l, work+"/", ""), time.Minute)
		}
	}

	for _, pattern := range docFiles {
		files, _ := filepath.Glob(filepath.Join(root, pattern))
		for _, f := range files {
			rel, _ := filepath.Rel(root, f)
			var python []string
			for _, b := range docBlocks(t, root, rel) {
				name := fmt.Sprintf("%s:%d", rel, b.line)
				switch {
				case b.lang != "sh" && b.lang != "bash" && b.lang != "python":
					continue
				case b.skip != "":
					t.Logf("%s: not run: %s", name, b.skip)
				case b.lang == "python":
					python = append(python, b.text)
				case servingCommand(b.text):
					t.Run(name, func(t *testing.T) { runServing(t, work, b.text) })
				default:
					t.Run(name, func(t *testing.T) {
						if strings.Contains(b.text, "python3 ") {
							skipWithoutPythonClient(t)
						}
						out := runSnippet(t, work, name, "bash", b.text, 8*time.Minute)
						for _, w := range b.wants {
							if !strings.Contains(out, w) {
								t.Errorf("%s: the document says its output has %q; it printed:\n%s", name, w, out)
							}
						}
					})
				}
			}
			if len(python) > 0 {
				t.Run(rel+":python", func(t *testing.T) {
					skipWithoutPythonClient(t)
					runSnippet(t, work, rel, "python", strings.Join(python, "\n"), 2*time.Minute)
				})
			}
		}
	}

	used := map[string]bool{}
	for _, ex := range helpExamples(t, filepath.Join(work, "bin", "inference-cache")) {
		name := ex.cmd + "|" + ex.first
		if why, ok := helpExampleSkips[name]; ok {
			used[name] = true
			t.Logf("--help of %s: %q not run: %s", ex.cmd, ex.first, why)
			continue
		}
		t.Run("help "+ex.cmd, func(t *testing.T) {
			if servingCommand(ex.text) {
				runServing(t, work, ex.text)
				return
			}
			runSnippet(t, work, name, "bash", ex.text, 5*time.Minute)
		})
	}
	// A skip whose example changed would leave the new one unrun.
	for k := range helpExampleSkips {
		if !used[k] {
			t.Errorf("helpExampleSkips names %q, which no --help prints any more: update the table", k)
		}
	}
}

// repoMirror is a temporary directory laid out as the repository root
// (its entries linked), with bin/inference-cache the binary under test,
// so that commands run there find testdata/ and write backup.snap, the
// dev cluster's data and the like outside the checkout.
func repoMirror(t *testing.T, root string) string {
	work := t.TempDir()
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		switch e.Name() {
		case "bin", ".dev-cluster", ".git", ".eval":
			continue
		}
		if err := os.Symlink(filepath.Join(root, e.Name()), filepath.Join(work, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(work, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(binPath, filepath.Join(work, "bin", "inference-cache")); err != nil {
		t.Fatal(err)
	}
	return work
}

// snippetEnv is the environment of a snippet: bin/ first on PATH (the
// docs call the binary inference-cache or bin/inference-cache) and the
// Python client importable.
func snippetEnv(work string) []string {
	return append(os.Environ(), "PATH="+filepath.Join(work, "bin")+":"+os.Getenv("PATH"),
		"PYTHONPATH="+filepath.Join(work, "clients", "python"))
}

// runSnippet runs text with bash (-e -o pipefail) or /usr/bin/python3 in
// work and fails the test on a non-zero exit or a run over limit; it
// returns what the snippet printed (stdout and stderr).
func runSnippet(t *testing.T, work, name, lang, text string, limit time.Duration) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var cmd *exec.Cmd
	if lang == "python" {
		cmd = exec.CommandContext(ctx, "/usr/bin/python3", "-c", text)
	} else {
		cmd = exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", text)
	}
	cmd.Dir, cmd.Env = work, snippetEnv(work)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("%s: %v (limit %v)\n--- ran:\n%s\n--- output:\n%s", name, err, limit, text, out)
	}
	return string(out)
}

// runServing starts a serving command's example and passes when it is
// still running after servingGrace; it is then stopped with SIGINT.
func runServing(t *testing.T, work, text string) {
	t.Helper()
	cmd := exec.Command("bash", "-c", "exec "+strings.TrimSpace(text))
	cmd.Dir, cmd.Env = work, snippetEnv(work)
	var out syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Errorf("exited within %v (%v):\n--- ran:\n%s\n--- output:\n%s", servingGrace, err, text, out.String())
		return
	case <-time.After(servingGrace):
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// helpExample is one example of a command's --help: its first line and
// the whole (continuation lines and quoted newlines joined).
type helpExample struct{ cmd, first, text string }

// helpExamples collects the examples of every command of bin.
func helpExamples(t *testing.T, bin string) []helpExample {
	var out []helpExample
	var walk func(path []string)
	walk = func(path []string) {
		b, err := exec.Command(bin, append(append([]string{}, path...), "--help")...).Output()
		if err != nil {
			t.Fatalf("%v --help: %v", path, err)
		}
		section := ""
		var subs []string
		var examples []string
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "Examples:" || line == "Available Commands:" || line == "Flags:" || line == "Global Flags:":
				section = line
				continue
			case strings.HasSuffix(line, ":") && !strings.HasPrefix(line, " "):
				section = ""
				continue
			}
			switch section {
			case "Examples:":
				examples = append(examples, line)
			case "Available Commands:":
				if f := strings.Fields(line); len(f) > 0 && f[0] != "help" && f[0] != "completion" {
					subs = append(subs, f[0])
				}
			}
		}
		if len(path) > 0 {
			for _, ex := range splitExamples(examples) {
				out = append(out, helpExample{cmd: strings.Join(path, " "), first: ex[0], text: strings.Join(ex, "\n")})
			}
		}
		for _, s := range subs {
			walk(append(append([]string{}, path...), s))
		}
	}
	walk(nil)
	return out
}

// splitExamples cuts an Examples section into commands: a command starts
// at a line that is not a comment and runs on while the text so far ends
// in a backslash or a pipe or leaves a quote open.
func splitExamples(lines []string) [][]string {
	var out [][]string
	var cur []string
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if cur == nil && (l == "" || strings.HasPrefix(l, "#")) {
			continue
		}
		cur = append(cur, l)
		code := make([]string, len(cur))
		for i, c := range cur {
			code[i] = stripComment(c)
		}
		last := strings.TrimSpace(code[len(code)-1])
		if openQuote(strings.Join(code, "\n")) || strings.HasSuffix(last, "\\") || strings.HasSuffix(last, "|") {
			continue
		}
		out = append(out, cur)
		cur = nil
	}
	if cur != nil {
		out = append(out, cur)
	}
	return out
}

// stripComment is line without a trailing " # comment" outside quotes.
func stripComment(line string) string {
	var q rune
	for i, r := range line {
		switch {
		case q != 0 && r == q:
			q = 0
		case q == 0 && (r == '\'' || r == '"'):
			q = r
		case q == 0 && r == '#' && (i == 0 || line[i-1] == ' '):
			return line[:i]
		}
	}
	return line
}

// openQuote reports whether s leaves a single or double quote open.
func openQuote(s string) bool {
	var q rune
	for _, r := range s {
		switch {
		case q != 0 && r == q:
			q = 0
		case q == 0 && (r == '\'' || r == '"'):
			q = r
		}
	}
	return q != 0
}

// skipWithoutPythonClient skips a block that runs the Python client when
// /usr/bin/python3 cannot import its dependencies (a block waiting for a
// gateway that cannot start would otherwise wait out its whole limit);
// with CLIENTS_REQUIRED=1 (CI) their absence fails instead.
func skipWithoutPythonClient(t *testing.T) {
	t.Helper()
	if exec.Command("/usr/bin/python3", "-c", "import grpc, google.protobuf, xxhash").Run() == nil {
		return
	}
	const why = "/usr/bin/python3 lacks grpcio, protobuf or xxhash (make deps-clients installs them)"
	if os.Getenv("CLIENTS_REQUIRED") == "1" {
		t.Fatal(why + ", and CLIENTS_REQUIRED=1")
	}
	t.Skip(why)
}
