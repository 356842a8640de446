package e2e

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// TestTwoControllersConsulLock: TestTwoControllersOnlyOneActs with the
// leader elected by a Consul session lock on a real Consul dev agent
// (-consul-address). One controller leads and acts, the other waits; when
// the leader dies the other takes over once Consul invalidates the dead
// one's session; a leader that stops gracefully hands the lock back.
func TestTwoControllersConsulLock(t *testing.T) {
	t.Parallel()
	cs := startConsul(t)
	c := startCluster(t, 4, "ml")
	policy := writePolicy(t, fmt.Sprintf(faultPolicy, "0s"))
	const key = "steward/e2e-leader"
	consulArgs := []string{"-consul-address", cs.Addr, "-consul-lock-key", key}

	a := c.startController("a", policy, consulArgs...)
	testnomad.WaitFor(t, 30*time.Second, "controller a leads", func() (bool, string) { return a.Contains("leading: this controller acts"), "" })
	if !a.Contains("consul=" + cs.Addr) {
		t.Fatalf("controller a did not elect through Consul:\n%s", tail(a.Log(), 20))
	}
	cs.waitHolder(t, key, "a")
	b := c.startController("b", policy, consulArgs...)
	testnomad.WaitFor(t, 30*time.Second, "controller b waits", func() (bool, string) { return b.Contains("waiting to lead"), "" })

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
	// Consul, not Nomad, held the lock: no Nomad variable lock was taken.
	if v, _, err := c.Client.Variables().Read("steward/leader", nil); err == nil && v != nil {
		t.Errorf("the Nomad variable lock steward/leader exists (holder %q) though Consul elects", v.Items["holder"])
	}

	// A crash: b leads once Consul invalidates a's session (within twice
	// the 10s TTL the test controllers get).
	killed := time.Now()
	a.Kill()
	testnomad.WaitFor(t, 60*time.Second, "controller b takes over", func() (bool, string) {
		return b.Contains("leading: this controller acts"), ""
	})
	t.Logf("controller b led %s after controller a was killed", time.Since(killed).Round(time.Second))
	cs.waitHolder(t, key, "b")
	if _, _, err := c.Client.Jobs().Deregister("nb", false, &api.WriteOptions{Namespace: "ml"}); err != nil {
		t.Fatal(err)
	}
	c.waitRunning(60*time.Second, map[string]int{"ml/train": 1})

	// A graceful stop releases the lock at once, for a third to take.
	b.Stop()
	if !b.Contains("no longer leading") {
		t.Errorf("controller b did not log the end of its term:\n%s", tail(b.Log(), 20))
	}
	if holder, session := cs.holder(t, key); session != "" {
		t.Errorf("the lock is still held (session %s, value %q) after the leader stopped gracefully", session, holder)
	}
	started := time.Now()
	d := c.startController("d", policy, consulArgs...)
	testnomad.WaitFor(t, 15*time.Second, "controller d leads at once", func() (bool, string) {
		return d.Contains("leading: this controller acts"), ""
	})
	t.Logf("controller d led %s after it started", time.Since(started).Round(100*time.Millisecond))
	cs.waitHolder(t, key, "d")

	// A controller waiting for the lock (in a blocking query on the key)
	// stops at once, and the leader keeps the lock.
	e := c.startController("e", policy, consulArgs...)
	testnomad.WaitFor(t, 30*time.Second, "controller e waits", func() (bool, string) { return e.Contains("waiting to lead"), "" })
	time.Sleep(time.Second)
	stopped := time.Now()
	e.Stop()
	if took := time.Since(stopped); took > 5*time.Second {
		t.Errorf("a waiting controller took %s to stop", took.Round(100*time.Millisecond))
	}
	if e.Contains("leading: this controller acts") {
		t.Errorf("controller e led while d held the lock:\n%s", tail(e.Log(), 20))
	}
	cs.waitHolder(t, key, "d")
}

// consulAgent is a Consul dev agent on loopback.
type consulAgent struct {
	Addr    string // host:port of the HTTP API
	Client  *consulapi.Client
	LogPath string
}

// startConsul runs `consul agent -dev` on free loopback ports until the
// test ends. A missing binary fails the test (`make consul`).
func startConsul(t *testing.T) *consulAgent {
	t.Helper()
	bin := testnomad.ConsulBin(t)
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var a *consulAgent
		if a, err = tryStartConsul(t, bin, attempt); err == nil {
			return a
		}
		if !errors.Is(err, errConsulPortInUse) {
			break
		}
	}
	t.Fatalf("starting the consul agent: %v", err)
	return nil
}

var errConsulPortInUse = errors.New("a port was taken before the agent bound it")

func tryStartConsul(t *testing.T, bin string, attempt int) (*consulAgent, error) {
	dir := t.TempDir()
	ports, err := loopbackPorts(3)
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, "consul.hcl")
	// Only the ports it needs, all free ones: tests run in parallel, and
	// no update check or anything else that leaves the machine.
	cfg := fmt.Sprintf(`disable_update_check = true
log_level = "DEBUG"
ports {
  http     = %d
  server   = %d
  serf_lan = %d
  serf_wan = -1
  dns      = -1
  grpc     = -1
  grpc_tls = -1
}
`, ports[0], ports[1], ports[2])
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, fmt.Sprintf("consul-%d.log", attempt))
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "agent", "-dev", "-bind", "127.0.0.1", "-client", "127.0.0.1",
		"-disable-host-node-id", "-node", fmt.Sprintf("steward-e2e-%d", ports[0]), "-config-file", cfgPath)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CONSUL_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("running %s: %w", bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logFile.Close(); close(exited) }()
	stop := func() {
		select {
		case <-exited:
			return
		default:
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	}
	logTail := func(n int) string { b, _ := os.ReadFile(logPath); return tail(string(b), n) }
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("consul agent log %s (last 40 lines):\n%s", logPath, logTail(40))
		}
		stop()
	})

	a := &consulAgent{Addr: fmt.Sprintf("127.0.0.1:%d", ports[0]), LogPath: logPath}
	ccfg := consulapi.DefaultNonPooledConfig()
	ccfg.Address, ccfg.Token, ccfg.TokenFile = a.Addr, "", ""
	if a.Client, err = consulapi.NewClient(ccfg); err != nil {
		stop()
		return nil, err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-exited:
			if strings.Contains(logTail(200), "address already in use") {
				return nil, errConsulPortInUse
			}
			return nil, fmt.Errorf("consul agent exited:\n%s", logTail(40))
		default:
		}
		if leader, err := a.Client.Status().Leader(); err == nil && leader != "" {
			// The KV store answers once the leader has set up its state.
			if _, _, err := a.Client.KV().Get("steward/ready", nil); err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("consul agent not ready after 60s:\n%s", logTail(40))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("consul agent ready at %s (log %s)", a.Addr, logPath)
	return a, nil
}

// holder reads the lock key: its value (the holder's identity) and the
// session holding it ("" when free).
func (a *consulAgent) holder(t *testing.T, key string) (value, session string) {
	t.Helper()
	p, _, err := a.Client.KV().Get(key, &consulapi.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatalf("read consul key %s: %v", key, err)
	}
	if p == nil {
		return "", ""
	}
	return string(p.Value), p.Session
}

// waitHolder waits until the controller named holds the lock in Consul.
func (a *consulAgent) waitHolder(t *testing.T, key, want string) {
	t.Helper()
	testnomad.WaitFor(t, 10*time.Second, fmt.Sprintf("consul key %s held by %s", key, want), func() (bool, string) {
		v, s := a.holder(t, key)
		return v == want && s != "", fmt.Sprintf("value %q session %q", v, s)
	})
}

// loopbackPorts finds n free TCP ports on 127.0.0.1.
func loopbackPorts(n int) ([]int, error) {
	var ports []int
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
