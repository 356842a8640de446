package e2e

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

const faultPolicy = twoTiers + `
preemption {
  min_runtime       = "0s"
  grace             = "%s"
  checkpoint_signal = "SIGUSR1"
}
`

// TestControllerKilledMidPreemption: the controller dies (SIGKILL) while a
// victim is in its checkpoint grace. A new controller finds the preemption
// in the saved state, finishes it, and the held job resumes by itself
// once the GPUs are free again: nothing is stranded.
func TestControllerKilledMidPreemption(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 4, "ml")
	policy := writePolicy(t, fmt.Sprintf(faultPolicy, "8s"))
	first := c.startController("first", policy)
	c.work("train", "ml", "training", 4, 1, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"ml/train": 1})
	c.work("nb", "ml", "interactive", 4, 1, "priority", "60")
	c.waitRecord(30*time.Second, "ml", "train", "steward_state", "checkpointing")
	first.Kill()

	// The victim still runs: nobody finished the preemption.
	if n := c.running("ml", "train"); n != 1 {
		t.Fatalf("train running %d after the controller died mid-grace, want 1", n)
	}
	second := c.startController("second", policy)
	c.waitRunning(90*time.Second, map[string]int{"ml/nb": 1, "ml/train": 0})
	c.waitRecord(30*time.Second, "ml", "train", "steward_state", "preempted")
	if !second.Contains("loaded controller state: jobs=") || second.Contains("loaded controller state: jobs=0") {
		t.Errorf("second controller did not load the saved state")
	}

	// Kill it again while train is held; a third resumes it.
	second.Kill()
	if _, _, err := c.Client.Jobs().Deregister("nb", false, &api.WriteOptions{Namespace: "ml"}); err != nil {
		t.Fatal(err)
	}
	c.startController("third", policy)
	c.waitRunning(90*time.Second, map[string]int{"ml/train": 1})
}

// TestTwoControllersOnlyOneActs: two copies run; one leads and acts, the
// other waits. When the leader dies the other takes over.
func TestTwoControllersOnlyOneActs(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 4, "ml")
	policy := writePolicy(t, fmt.Sprintf(faultPolicy, "0s"))
	a, b := c.startLeaderAndFollower(policy)

	c.work("train", "ml", "training", 4, 1, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"ml/train": 1})
	c.work("nb", "ml", "interactive", 4, 1, "priority", "60")
	c.waitRunning(60*time.Second, map[string]int{"ml/nb": 1, "ml/train": 0})
	if b.Contains("leading: this controller acts") || b.Contains("preempt:") {
		t.Fatalf("the second controller acted while the first led:\n%s", tail(b.Log(), 20))
	}
	if !a.Contains("preempt:") {
		t.Fatalf("the leader did not preempt")
	}

	a.Kill()
	testnomad.WaitFor(t, 60*time.Second, "controller b takes over", func() (bool, string) {
		return b.Contains("leading: this controller acts"), ""
	})
	if _, _, err := c.Client.Jobs().Deregister("nb", false, &api.WriteOptions{Namespace: "ml"}); err != nil {
		t.Fatal(err)
	}
	c.waitRunning(60*time.Second, map[string]int{"ml/train": 1})
}

// TestNomadUnreachable: the controller reaches Nomad through a proxy that
// goes away for a while. The controller backs off; when Nomad is back it
// acts once on what it then sees — no burst of stale actions.
func TestNomadUnreachable(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 4, "ml")
	p := newProxy(t, c.Address)
	policy := writePolicy(t, fmt.Sprintf(faultPolicy, "0s"))
	ctl := c.startControllerAt("ctl", policy, p.URL())
	testnomad.WaitFor(t, 30*time.Second, "controller leads", func() (bool, string) { return ctl.Contains("leading: this controller acts"), "" })

	c.work("train", "ml", "training", 4, 1, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"ml/train": 1})
	time.Sleep(2 * time.Second)
	p.Down()
	// While Nomad is out of reach, pressure builds: two notebooks arrive.
	c.work("nb1", "ml", "interactive", 2, 1, "priority", "60")
	c.work("nb2", "ml", "interactive", 2, 1, "priority", "60")
	testnomad.WaitFor(t, 60*time.Second, "the controller backs off", func() (bool, string) {
		return strings.Contains(ctl.Log(), "retry_in="), ""
	})
	time.Sleep(5 * time.Second)
	if n := c.running("ml", "train"); n != 1 {
		t.Fatalf("train stopped while the controller could not reach Nomad")
	}
	p.Up()
	c.waitRunning(90*time.Second, map[string]int{"ml/nb1": 1, "ml/nb2": 1, "ml/train": 0})
	time.Sleep(3 * time.Second)
	if n := strings.Count(ctl.Log(), "steward: preempt:"); n != 1 {
		t.Errorf("%d preemptions after the outage, want exactly 1 (the 4-GPU job once):\n%s", n, tail(ctl.Log(), 40))
	}
}

// TestBadPolicyReload: SIGHUP with a broken policy file logs its errors
// with file:line:col and keeps the last good policy, which goes on acting.
func TestBadPolicyReload(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 4, "ml")
	policy := writePolicy(t, fmt.Sprintf(faultPolicy, "0s"))
	ctl := c.startController("ctl", policy)
	testnomad.WaitFor(t, 30*time.Second, "controller leads", func() (bool, string) { return ctl.Contains("leading: this controller acts"), "" })

	bad := strings.Replace(fmt.Sprintf(faultPolicy, "0s"), "priority    = 40", "priority    = 400\n  colour = \"red\"", 1)
	if err := os.WriteFile(policy, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	ctl.Signal(syscall.SIGHUP)
	testnomad.WaitFor(t, 30*time.Second, "the reload failure is logged", func() (bool, string) {
		return ctl.Contains("policy reload failed: keeping the last good policy"), ""
	})
	for _, want := range []string{policy + ":7,", "colour"} {
		if !ctl.Contains(want) {
			t.Errorf("reload diagnostics do not mention %q:\n%s", want, tail(ctl.Log(), 30))
		}
	}
	// The last good policy still acts.
	c.work("train", "ml", "training", 4, 1, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"ml/train": 1})
	c.work("nb", "ml", "interactive", 4, 1, "priority", "60")
	c.waitRunning(60*time.Second, map[string]int{"ml/nb": 1, "ml/train": 0})
}

// proxy forwards loopback TCP to Nomad and can be cut off and restored.
type proxy struct {
	t      testing.TB
	target string
	ln     net.Listener
	addr   string
	mu     sync.Mutex
	down   bool
	conns  map[net.Conn]bool
}

func newProxy(t testing.TB, nomadAddr string) *proxy {
	u, err := url.Parse(nomadAddr)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, target: u.Host, ln: ln, addr: ln.Addr().String(), conns: map[net.Conn]bool{}}
	t.Cleanup(func() { _ = ln.Close(); p.Down() })
	go p.serve()
	return p
}

func (p *proxy) URL() string { return "http://" + p.addr }

func (p *proxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			_ = in.Close()
			continue
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			_ = in.Close()
			continue
		}
		p.conns[in], p.conns[out] = true, true
		p.mu.Unlock()
		go func() { _, _ = io.Copy(out, in); _ = out.Close() }()
		go func() { _, _ = io.Copy(in, out); _ = in.Close() }()
	}
}

// Down refuses new connections and cuts the open ones.
func (p *proxy) Down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = map[net.Conn]bool{}
}

func (p *proxy) Up() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}
