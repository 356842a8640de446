package e2e

import (
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// The tests' controllers run with -lock-ttl 10s -lock-delay 0s.
const testLockTTL = 10 * time.Second

// TestLeaderTakeoverTime: when the leader dies, the other copy leads once
// Nomad gives the lock up: 2×TTL after the dead leader's last renewal plus
// the lock delay (Nomad keeps a lock twice its TTL), plus at most one
// second of polling. docs/reference/controller.md promises exactly this.
func TestLeaderTakeoverTime(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 1, "ml")
	policy := writePolicy(t, fmt.Sprintf(faultPolicy, "0s"))
	a, b := c.startLeaderAndFollower(policy)
	time.Sleep(testLockTTL / 2) // a renews on its own schedule

	killed := time.Now()
	a.Kill()
	testnomad.WaitFor(t, 4*testLockTTL, "controller b takes over", func() (bool, string) {
		return b.Contains("leading: this controller acts"), ""
	})
	took := time.Since(killed)
	t.Logf("takeover %s after the leader was killed (TTL %s, delay 0s)", took.Round(100*time.Millisecond), testLockTTL)
	// a's last renewal was at most TTL/3 before the kill.
	lo, hi := 2*testLockTTL-testLockTTL/3-time.Second, 2*testLockTTL+3*time.Second
	if took < lo || took > hi {
		t.Errorf("takeover took %s, want between %s and %s (2×TTL + delay after the last renewal)", took, lo, hi)
	}
}

var signalingRE = regexp.MustCompile(`(?i)signal`)

// TestLeaderPausedPastTTL (ACLs on, the shipped controller policy) is the
// split-brain test: the leader decides a
// preemption and is stopped (SIGSTOP) before sending the checkpoint signal,
// past its lock's TTL. The other copy takes over and sends the signal.
// When the first resumes (SIGCONT) it knows it lost the lease and takes no
// action: Nomad records exactly one signal on the victim, and the status
// keeps naming the new leader.
func TestLeaderPausedPastTTL(t *testing.T) {
	t.Parallel()
	c := startProdCluster(t, prodSpec{}, "ml")
	policy := writePolicy(t, fmt.Sprintf(faultPolicy, "90s"))
	a, b := c.startLeaderAndFollower(policy)

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

	testnomad.WaitFor(t, 4*testLockTTL, "b takes over while a is stopped", func() (bool, string) {
		return b.Contains("leading: this controller acts"), ""
	})
	testnomad.WaitFor(t, 20*time.Second, "b sends the checkpoint signal", func() (bool, string) {
		return b.Contains("checkpoint signal sent: job=ml/train"), tail(b.Log(), 5)
	})
	resumedAt := len(a.Log())
	a.Signal(syscall.SIGCONT)
	testnomad.WaitFor(t, 20*time.Second, "a notices it lost the lease", func() (bool, string) {
		return strings.Contains(a.Log()[resumedAt:], "lost the leader lock"), tail(a.Log(), 10)
	})
	time.Sleep(5 * time.Second) // room for any stale action a might take
	after := a.Log()[resumedAt:]
	for _, act := range []string{"checkpoint signal sent", "preempt:", "hold:", "resume:", "set-priority:"} {
		if strings.Contains(after, act) {
			t.Errorf("a acted after losing the lease (%q):\n%s", act, after)
		}
	}

	// What Nomad recorded: one signal on the victim's task, and b as the
	// leader in the published status.
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
	v, _, err := c.Client.Variables().Read("steward/status", &api.QueryOptions{Namespace: "steward"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(v.Items["status"], `"leader":"b"`) {
		t.Errorf("the published status names another leader than b: %.200s", v.Items["status"])
	}
}
