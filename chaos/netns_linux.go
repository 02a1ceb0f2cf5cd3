package chaos

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// netns is a network namespace of the run's own with veth pairs to the
// run's network, one per link: PostgreSQL runs inside it, and each client
// reaches it over the link it is given, at that link's address inside the
// namespace. Taking a link down inside the namespace cuts its clients off
// for real: their packets are dropped, their connections hang as on a
// network partition, while every other link (and everything else the
// client talks to) works on.
type netns struct {
	name  string // the name under /run/netns
	links []nsLink
}

type nsLink struct {
	hostIf, nsIf     string // interface names outside and inside
	hostAddr, nsAddr string // the two ends' addresses (a /30)
}

// newNetns makes namespace "courier-chaos-<pid>" with n links. It needs
// root and iproute2's ip; the error says what is missing.
func newNetns(n int) (*netns, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("chaos: network namespace: not root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, errors.New("chaos: network namespace: no ip command (iproute2)")
	}
	if n < 1 || n > 60 {
		return nil, fmt.Errorf("chaos: network namespace: %d links: want 1 to 60", n)
	}
	reapNetns()
	pid := os.Getpid()
	ns := &netns{name: netnsPrefix + strconv.Itoa(pid)}
	if _, err := ipCmd("netns", "add", ns.name); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			ns.close()
		}
	}()
	if _, err := ipCmd("-n", ns.name, "link", "set", "lo", "up"); err != nil {
		return nil, err
	}
	subnet, err := freeSubnet(pid)
	if err != nil {
		return nil, err
	}
	tag := strconv.Itoa(pid % 100000)
	for i := range n {
		l := nsLink{
			hostIf: fmt.Sprintf("cc%sh%d", tag, i), nsIf: fmt.Sprintf("cc%sn%d", tag, i),
			hostAddr: fmt.Sprintf("%s.%d", subnet, 4*i+1), nsAddr: fmt.Sprintf("%s.%d", subnet, 4*i+2),
		}
		steps := [][]string{
			{"link", "add", l.hostIf, "type", "veth", "peer", "name", l.nsIf, "netns", ns.name},
			{"addr", "add", l.hostAddr + "/30", "dev", l.hostIf},
			{"link", "set", l.hostIf, "up"},
			{"-n", ns.name, "addr", "add", l.nsAddr + "/30", "dev", l.nsIf},
			{"-n", ns.name, "link", "set", l.nsIf, "up"},
		}
		for _, s := range steps {
			if _, err := ipCmd(s...); err != nil {
				return nil, err
			}
		}
		ns.links = append(ns.links, l)
	}
	ok = true
	return ns, nil
}

// netnsPrefix starts the name of every run's namespace; the rest is the
// run's pid.
const netnsPrefix = "courier-chaos-"

// reapNetns removes the namespaces of runs that died without removing
// theirs (a run killed with SIGKILL cannot): those whose pid names no
// live process. Their veth pairs go with them. Best effort: a namespace
// that cannot be listed or removed is left as it was.
func reapNetns() {
	names, err := netnsNames()
	if err != nil {
		return
	}
	for _, name := range names {
		if !strings.HasPrefix(name, netnsPrefix) {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimPrefix(name, netnsPrefix))
		if err != nil || pid <= 0 || unix.Kill(pid, 0) != unix.ESRCH {
			continue // not a run's name, or its run may live
		}
		_, _ = ipCmd("netns", "del", name)
	}
}

// netnsNames lists the machine's named network namespaces.
func netnsNames() ([]string, error) {
	out, err := ipCmd("netns", "list")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			names = append(names, f[0])
		}
	}
	return names, nil
}

// freeSubnet picks a 10.213.X prefix no interface of the machine uses.
func freeSubnet(pid int) (string, error) {
	out, err := ipCmd("-o", "addr", "show")
	if err != nil {
		return "", err
	}
	for try := range 250 {
		p := fmt.Sprintf("10.213.%d", (pid+try)%250)
		if !bytes.Contains(out, []byte(" "+p+".")) {
			return p, nil
		}
	}
	return "", errors.New("chaos: network namespace: no free 10.213.x.0/24")
}

// addr is the server's address on link i, as its clients dial it.
func (ns *netns) addr(i int) string { return ns.links[i].nsAddr }

// cut takes link i down inside the namespace: its clients' packets are
// dropped from now on.
func (ns *netns) cut(i int) error {
	_, err := ipCmd("-n", ns.name, "link", "set", ns.links[i].nsIf, "down")
	return err
}

// restore brings link i up again.
func (ns *netns) restore(i int) error {
	_, err := ipCmd("-n", ns.name, "link", "set", ns.links[i].nsIf, "up")
	return err
}

// close removes the namespace; its veth pairs go with it. Call it after
// every process in it has exited.
func (ns *netns) close() {
	for _, l := range ns.links {
		_, _ = ipCmd("link", "del", l.hostIf) // gone already when the namespace went first
	}
	_, _ = ipCmd("netns", "del", ns.name) // best effort: the error is logged by ipCmd's caller
}

// start starts cmd inside the namespace: the calling thread enters it for
// the fork and leaves it again, so cmd's process (and only it) lives in
// the namespace. The thread stays the child's parent thread (Pdeathsig is
// tied to it), so it is returned to the runtime only once it is back in
// the run's own namespace; if leaving fails it is left locked and ends
// with this goroutine, and the child is killed.
func (ns *netns) start(cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		own, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("chaos: network namespace: %w", err)
			return
		}
		defer own.Close()
		target, err := os.Open("/run/netns/" + ns.name)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("chaos: network namespace: %w", err)
			return
		}
		defer target.Close()
		if err := setns(target); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("chaos: network namespace: enter %s: %w", ns.name, err)
			return
		}
		startErr := cmd.Start()
		if err := setns(own); err != nil {
			// This thread stays in the namespace: never hand it back.
			if startErr == nil {
				_ = cmd.Process.Kill()
			}
			errc <- fmt.Errorf("chaos: network namespace: leave %s: %w", ns.name, err)
			return
		}
		runtime.UnlockOSThread()
		errc <- startErr
	}()
	return <-errc
}

func setns(f *os.File) error {
	return unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
}

// ipCmd runs iproute2's ip with args.
func ipCmd(args ...string) ([]byte, error) {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("chaos: ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return out, nil
}
