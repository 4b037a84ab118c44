package chaos

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
)

// Network is a private layer-2 network of Linux network namespaces: one
// namespace per node, each with a veth pair into a bridge that lives in a
// hub namespace of its own, and one veth pair from the harness's
// namespace into the same bridge so the harness reaches every node
// directly. Nothing is routed or forwarded through the host: the subnet is
// a /24 of 10.213.0.0/16 that no host route covers, and every node talks
// to its peers and the harness on that bridge only.
//
// A partition installs blackhole routes inside the node namespaces, per
// peer address and in both directions; the harness's own address is never
// blackholed, so partitioned nodes stay observable.
type Network struct {
	tag    string
	subnet string // "10.213.K"
	hub    string
	nodes  []string // namespace names
	log    *slog.Logger

	mu     sync.Mutex
	holes  map[[2]int]bool // (from, to) blackholes installed
	chains map[int]bool    // node namespaces with portChain installed
}

// ErrNoNetns is wrapped by NewNetwork when network namespaces cannot be
// used (not root, no iproute2, or the kernel refuses).
var ErrNoNetns = errors.New("chaos: network namespaces unavailable")

// NetnsAvailable reports whether partitions can be built here and, if
// not, why.
func NetnsAvailable() (bool, string) {
	if os.Geteuid() != 0 {
		return false, "not running as root (network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN)"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return false, "the ip command (iproute2) is not installed: apt-get install -y iproute2"
	}
	name := fmt.Sprintf("icc-probe-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return false, fmt.Sprintf("ip netns add failed: %v: %s", err, bytes.TrimSpace(out))
	}
	defer exec.Command("ip", "netns", "del", name).Run()
	if out, err := exec.Command("ip", "netns", "exec", name, "ip", "link", "add", "p0", "type", "veth", "peer", "name", "p1").CombinedOutput(); err != nil {
		return false, fmt.Sprintf("veth pairs refused: %v: %s", err, bytes.TrimSpace(out))
	}
	return true, ""
}

// NewNetwork creates the hub bridge, the harness's link and n node
// namespaces. Close removes all of it.
func NewNetwork(n int, log *slog.Logger) (*Network, error) {
	if ok, why := NetnsAvailable(); !ok {
		return nil, fmt.Errorf("%w: %s", ErrNoNetns, why)
	}
	w := &Network{tag: fmt.Sprintf("%04x", rand.IntN(1<<16)), holes: map[[2]int]bool{}, log: log}
	k, err := freeSubnet()
	if err != nil {
		return nil, err
	}
	w.subnet = fmt.Sprintf("10.213.%d", k)
	w.hub = "icc-hub-" + w.tag
	ok := false
	defer func() {
		if !ok {
			w.Close()
		}
	}()
	root, rootPeer := "icr"+w.tag, "icrp"+w.tag
	steps := [][]string{
		{"ip", "netns", "add", w.hub},
		{"ip", "netns", "exec", w.hub, "ip", "link", "add", "br0", "type", "bridge"},
		{"ip", "netns", "exec", w.hub, "ip", "link", "set", "br0", "up"},
		{"ip", "link", "add", root, "type", "veth", "peer", "name", rootPeer},
		{"ip", "link", "set", rootPeer, "netns", w.hub},
		{"ip", "netns", "exec", w.hub, "ip", "link", "set", rootPeer, "master", "br0", "up"},
		{"ip", "addr", "add", w.subnet + ".1/24", "dev", root},
		{"ip", "link", "set", root, "up"},
	}
	for i := 0; i < n; i++ {
		ns := fmt.Sprintf("icc-n%d-%s", i+1, w.tag)
		w.nodes = append(w.nodes, ns)
		a, b := fmt.Sprintf("icn%d%s", i+1, w.tag), fmt.Sprintf("ich%d%s", i+1, w.tag)
		steps = append(steps,
			[]string{"ip", "netns", "add", ns},
			[]string{"ip", "link", "add", a, "type", "veth", "peer", "name", b},
			[]string{"ip", "link", "set", a, "netns", ns},
			[]string{"ip", "link", "set", b, "netns", w.hub},
			[]string{"ip", "netns", "exec", w.hub, "ip", "link", "set", b, "master", "br0", "up"},
			[]string{"ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"},
			[]string{"ip", "netns", "exec", ns, "ip", "link", "set", a, "name", "eth0"},
			[]string{"ip", "netns", "exec", ns, "ip", "addr", "add", w.Addr(i) + "/24", "dev", "eth0"},
			[]string{"ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "up"},
		)
	}
	for _, s := range steps {
		if err := run(s...); err != nil {
			return nil, err
		}
	}
	ok = true
	log.Info("chaos: network namespaces ready", "subnet", w.subnet+".0/24", "hub", w.hub, "nodes", w.nodes)
	return w, nil
}

// freeSubnet picks K so that 10.213.K.0/24 overlaps no address or route
// of the harness's namespace.
func freeSubnet() (int, error) {
	out, err := exec.Command("ip", "-o", "route", "show", "table", "all").CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("chaos: ip route: %v: %s", err, out)
	}
	addrs, _ := exec.Command("ip", "-o", "addr").CombinedOutput()
	used := string(out) + string(addrs)
	for _, k := range rand.Perm(200) {
		k += 20
		if !strings.Contains(used, fmt.Sprintf("10.213.%d.", k)) && !strings.Contains(used, "10.213.0.0/16") && !strings.Contains(used, "10.0.0.0/8") {
			return k, nil
		}
	}
	return 0, errors.New("chaos: no free 10.213.K.0/24 subnet")
}

func run(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("chaos: %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// Addr is node i's address (0-based) on the private network.
func (w *Network) Addr(i int) string { return fmt.Sprintf("%s.%d", w.subnet, 11+i) }

// Namespace is node i's namespace name.
func (w *Network) Namespace(i int) string { return w.nodes[i] }

// Prefix is the command prefix that runs a program inside node i's
// namespace (ip netns exec execs it, so signals reach the program).
func (w *Network) Prefix(i int) []string {
	return []string{"ip", "netns", "exec", w.nodes[i]}
}

// Isolate cuts every path between the nodes of groups a and b (both
// directions). Nodes in the same group, and every node and the harness,
// still reach each other.
func (w *Network) Isolate(a, b []int) error {
	for _, i := range a {
		for _, j := range b {
			for _, p := range [][2]int{{i, j}, {j, i}} {
				if err := w.hole(p[0], p[1], true); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (w *Network) hole(from, to int, add bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := [2]int{from, to}
	if w.holes[k] == add {
		return nil
	}
	verb := "add"
	if !add {
		verb = "del"
	}
	if err := run("ip", "netns", "exec", w.nodes[from], "ip", "route", verb, "blackhole", w.Addr(to)+"/32"); err != nil {
		return err
	}
	if add {
		w.holes[k] = true
	} else {
		delete(w.holes, k)
	}
	return nil
}

// Heal removes every blackhole route.
func (w *Network) Heal() error {
	w.mu.Lock()
	var ks [][2]int
	for k := range w.holes {
		ks = append(ks, k)
	}
	w.mu.Unlock()
	var first error
	for _, k := range ks {
		if err := w.hole(k[0], k[1], false); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Close deletes the namespaces (which deletes their veth pairs and the
// bridge). Processes inside must have been stopped.
func (w *Network) Close() {
	for _, ns := range append(append([]string{}, w.nodes...), w.hub) {
		if err := run("ip", "netns", "del", ns); err != nil && w.log != nil {
			w.log.Warn("chaos: remove namespace", "ns", ns, "err", err)
		}
	}
	_ = exec.Command("ip", "link", "del", "icr"+w.tag).Run() // gone with its peer normally
}

// HarnessAddr is the harness's own address on the private network.
func (w *Network) HarnessAddr() string { return w.subnet + ".1" }

// portChain is the iptables chain the harness installs its port cuts in
// (inside the node namespaces only), so HealPorts removes exactly them.
const portChain = "ICCHAOS"

// PortCutsAvailable reports whether CutPort can work here (iptables
// installed and accepted by the kernel inside a network namespace) and,
// if not, why.
func PortCutsAvailable() (bool, string) {
	if _, err := exec.LookPath("iptables"); err != nil {
		return false, "the iptables command is not installed: apt-get install -y iptables"
	}
	name := fmt.Sprintf("icc-ipt-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return false, fmt.Sprintf("ip netns add failed: %v: %s", err, bytes.TrimSpace(out))
	}
	defer exec.Command("ip", "netns", "del", name).Run()
	if out, err := exec.Command("ip", "netns", "exec", name, "iptables", "-N", portChain).CombinedOutput(); err != nil {
		return false, fmt.Sprintf("iptables refused in a network namespace: %v: %s", err, bytes.TrimSpace(out))
	}
	return true, ""
}

// CutPort drops every TCP and UDP packet to or from port between the
// nodes of groups a and b, both ways (Raft-only or gossip-only
// partitions: the other ports keep working). The rules live in each node
// namespace's OUTPUT path and name the peer's address, so the harness
// still reaches every node.
func (w *Network) CutPort(port int, a, b []int) error {
	p := fmt.Sprint(port)
	for _, i := range a {
		for _, j := range b {
			for _, pr := range [][2]int{{i, j}, {j, i}} {
				if err := w.ensureChain(pr[0]); err != nil {
					return err
				}
				for _, proto := range []string{"tcp", "udp"} {
					for _, dir := range []string{"--dport", "--sport"} {
						if err := run("ip", "netns", "exec", w.nodes[pr[0]], "iptables", "-A", portChain, "-d", w.Addr(pr[1]),
							"-p", proto, dir, p, "-j", "DROP"); err != nil {
							return err
						}
					}
				}
			}
		}
	}
	return nil
}

func (w *Network) ensureChain(i int) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.chains == nil {
		w.chains = map[int]bool{}
	}
	if w.chains[i] {
		return nil
	}
	ns := w.nodes[i]
	if err := run("ip", "netns", "exec", ns, "iptables", "-N", portChain); err != nil {
		return err
	}
	if err := run("ip", "netns", "exec", ns, "iptables", "-I", "OUTPUT", "-j", portChain); err != nil {
		return err
	}
	w.chains[i] = true
	return nil
}

// HealPorts removes every port cut.
func (w *Network) HealPorts() error {
	w.mu.Lock()
	var ns []string
	for i := range w.chains {
		ns = append(ns, w.nodes[i])
	}
	w.mu.Unlock()
	var first error
	for _, n := range ns {
		if err := run("ip", "netns", "exec", n, "iptables", "-F", portChain); err != nil && first == nil {
			first = err
		}
	}
	return first
}
