package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// TestConsulLeaderCutOffStopsActing: the leader elects through Consul, and
// its Consul agent stops answering it (a proxy that stalls every request:
// its session renewals, its watch on the lock) while Nomad still does.
// Consul invalidates its session and the other copy takes over. The first
// must not act from then on: its lease ends a TTL after its last renewal
// was sent, which ends its term before Consul frees the lock. A preemption
// that follows is made by the new leader alone, and Nomad records one
// checkpoint signal. Before, the Consul path had no fence: the cut-off
// leader, its watch on the lock hung, went on leading beside the new one,
// and both signalled the victim.
func TestConsulLeaderCutOffStopsActing(t *testing.T) {
	t.Parallel()
	cs := startConsul(t)
	c := startProdCluster(t, prodSpec{}, "ml")
	policy := writePolicy(t, fmt.Sprintf(faultPolicy, "90s"))
	const key = "steward/e2e-fence"
	p := newStallProxy(t, "http://"+cs.Addr, "")
	a := c.startController("a", policy, "-consul-address", strings.TrimPrefix(p.URL(), "http://"), "-consul-lock-key", key)
	testnomad.WaitFor(t, 30*time.Second, "controller a leads", func() (bool, string) { return a.Contains("leading: this controller acts"), "" })
	cs.waitHolder(t, key, "a")
	b := c.startController("b", policy, "-consul-address", cs.Addr, "-consul-lock-key", key)
	testnomad.WaitFor(t, 30*time.Second, "controller b waits", func() (bool, string) { return b.Contains("waiting to lead"), "" })

	c.work("train", "ml", "training", 4, 1, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"ml/train": 1})
	victim := c.allocIDs("ml", "train")[0]

	p.Stall()
	cut := time.Now()
	testnomad.WaitFor(t, 5*testLockTTL, "b takes over once Consul drops a's session", func() (bool, string) {
		return b.Contains("leading: this controller acts"), tail(b.Log(), 5)
	})
	t.Logf("b led %s after a was cut off from Consul (TTL %s)", time.Since(cut).Round(time.Second), testLockTTL)
	if !a.Contains("no longer leading") {
		t.Errorf("a still leads, cut off from Consul, while b leads:\n%s", tail(a.Log(), 10))
	}

	c.work("nb", "ml", "interactive", 4, 1, "priority", "60")
	testnomad.WaitFor(t, 30*time.Second, "b sends the checkpoint signal", func() (bool, string) {
		return b.Contains("checkpoint signal sent: job=ml/train"), tail(b.Log(), 5)
	})
	time.Sleep(5 * time.Second) // room for any action a might take
	for _, act := range []string{"preempt: job=ml/train", "checkpoint signal sent", "hold:"} {
		if a.Contains(act) {
			t.Errorf("a acted (%q) after it was cut off from Consul:\n%s", act, tail(a.Log(), 20))
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
