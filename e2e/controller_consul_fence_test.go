package e2e

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// TestConsulLeaderPausedPastTTL is TestLeaderPausedPastTTL with the leader
// elected through Consul: the leader decides a preemption and is stopped
// (SIGSTOP) before its checkpoint signal, past its session's TTL. The
// other copy takes over and sends the signal. When the first resumes
// (SIGCONT) its lease (a TTL after its last session renewal) has ended, so
// it sends nothing: Nomad records exactly one signal on the victim.
// Before, the Consul path had no fence: the resumed leader sent its signal
// before it noticed the lock was gone.
func TestConsulLeaderPausedPastTTL(t *testing.T) {
	t.Parallel()
	cs := startConsul(t)
	c := startCluster(t, 4, "ml")
	policy := writePolicy(t, fmt.Sprintf(faultPolicy, "90s"))
	const key = "steward/e2e-fence"
	consulArgs := []string{"-consul-address", cs.Addr, "-consul-lock-key", key}
	a := c.startController("a", policy, consulArgs...)
	testnomad.WaitFor(t, 30*time.Second, "controller a leads", func() (bool, string) { return a.Contains("leading: this controller acts"), "" })
	cs.waitHolder(t, key, "a")
	b := c.startController("b", policy, consulArgs...)
	testnomad.WaitFor(t, 30*time.Second, "controller b waits", func() (bool, string) { return b.Contains("waiting to lead"), "" })

	c.work("train", "ml", "training", 4, 1, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"ml/train": 1})
	victim := c.allocIDs("ml", "train")[0]
	c.work("nb", "ml", "interactive", 4, 1, "priority", "60")
	// The signal follows the decision by a second: stop a in between.
	testnomad.WaitFor(t, 30*time.Second, "a decides the preemption", func() (bool, string) { return a.Contains("preempt: job=ml/train"), "" })
	a.Signal(syscall.SIGSTOP)
	t.Cleanup(func() { a.Signal(syscall.SIGCONT) })
	if a.Contains("checkpoint signal sent") {
		t.Fatalf("a sent the signal before it was stopped; the test needs it stopped in between:\n%s", tail(a.Log(), 10))
	}

	testnomad.WaitFor(t, 5*testLockTTL, "b takes over while a is stopped", func() (bool, string) {
		return b.Contains("leading: this controller acts"), ""
	})
	testnomad.WaitFor(t, 20*time.Second, "b sends the checkpoint signal", func() (bool, string) {
		return b.Contains("checkpoint signal sent: job=ml/train"), tail(b.Log(), 5)
	})
	resumedAt := len(a.Log())
	a.Signal(syscall.SIGCONT)
	testnomad.WaitFor(t, 20*time.Second, "a notices it lost the lock", func() (bool, string) {
		return strings.Contains(a.Log()[resumedAt:], "lost the Consul lock"), tail(a.Log(), 10)
	})
	time.Sleep(5 * time.Second) // room for any stale action a might take
	after := a.Log()[resumedAt:]
	for _, act := range []string{"checkpoint signal sent", "hold:", "resume:", "set-priority:"} {
		if strings.Contains(after, act) {
			t.Errorf("a acted after its lease ended (%q):\n%s", act, after)
		}
	}

	alloc, _, err := c.Client.Allocations().Info(victim, &api.QueryOptions{Namespace: "ml"})
	if err != nil {
		t.Fatal(err)
	}
	signals := 0
	for _, ts := range alloc.TaskStates {
		for _, ev := range ts.Events {
			if ev.Type == api.TaskSignaling || signalingRE.MatchString(ev.Type) && strings.Contains(ev.DisplayMessage, "SIGUSR1") {
				signals++
			}
		}
	}
	if signals != 1 {
		t.Errorf("Nomad recorded %d checkpoint signals on the victim, want 1", signals)
	}
}
