package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// TestNodeMaintenanceDrain (issue 34, item 7): on the production-shaped
// cluster with two GPU clients (steward-exec, one checkpoint root both
// mount, as on NFS), an operator drains the node a trainer runs on with
// steward drain (Nomad's own drain, its deadline far off), which a
// tenant's token may not. The controller sees the drain
// and treats it as a preemption with the reason "node maintenance": the
// job's record says so (with the node, GPUs, signal and grace), the
// trainer gets its checkpoint signal (a task event with the reason),
// checkpoints, is held, and resumes on the other client from its
// checkpoint (STEWARD_RESUMED=1), long before Nomad's deadline would have
// killed it; the drained node stays ineligible.
func TestNodeMaintenanceDrain(t *testing.T) {
	t.Parallel()
	exec := testnomad.Plugin{Name: "steward-exec", Config: fmt.Sprintf(`    checkpoint_root   = %q
    gpu_sample_period = "250ms"`, t.TempDir())}
	c := startProdCluster(t, prodSpec{gpus: []simGPUs{{count: 1}, {count: 1}}, extra: testnomad.Options{Plugins: []testnomad.Plugin{exec}}})
	first, second := c.gpuNode(0), c.gpuNode(1)
	for _, n := range []string{first.NodeID, second.NodeID} {
		c.waitDriver(n, "steward-exec")
	}
	ctl := c.startController("ctl", writePolicy(t, twoTiers+`
preemption {
  min_runtime = "0s"
  grace       = "20s"
}
`))

	// The second client busy while the trainer is placed: it lands on the
	// first.
	c.workOn(second.NodeID, "filler", "default", "training", 1)
	c.waitRunning(60*time.Second, map[string]int{"default/filler": 1})
	job := c.RegisterJobFile(t, filepath.Join(testnomad.RepoRoot(t), "jobs", "trainer.nomad.hcl"), map[string]string{
		"trainer_bin": testnomad.TrainerBin(t), "steps": "100000", "step_time": "100ms", "checkpoint_every": "10",
		"save_on_stop": "false", "kill_timeout": "5s",
	})
	r := &trainerRun{t: t, a: c.Agent}
	victim := c.waitJobAlloc("default", *job.ID, "", 60*time.Second)
	if victim.NodeID != first.NodeID {
		t.Fatalf("trainer placed on %s, want the first client %s", victim.NodeID, first.NodeID)
	}
	r.waitStdout(victim, "trainer: step 15\n", 30*time.Second)
	c.deregister("default", "filler")
	c.waitRunning(60*time.Second, map[string]int{"default/filler": 0})

	// A tenant (a whole namespace's write, its variables) may not drain a
	// node: Nomad wants node write.
	team := c.aclToken("team-default", fmt.Sprintf(teamRules, "default"), userACL(t, "default"))
	if out, code := c.stewardAs(team, "drain", "gpu-1"); code == 0 || !strings.Contains(out, "403") {
		t.Fatalf("a tenant drained a node: exit %d\n%s", code, out)
	}
	// The operator's drain (steward drain is Nomad's node drain, and says
	// who takes care of what): Nomad would kill the batch job at its
	// deadline, an hour away; the controller acts at once.
	drainedAt := time.Now()
	out, code := c.stewardAs(prodMgmtToken, "drain", "-deadline", "1h", "gpu-1")
	if code != 0 || !strings.Contains(out, "node gpu-1: draining, ineligible") ||
		!strings.Contains(out, "default/"+*job.ID+" train ("+victim.ID[:8]+"): 1 GPU(s): Steward checkpoints it") {
		t.Fatalf("steward drain: exit %d\n%s", code, out)
	}
	t.Logf("steward drain said:\n%s", out)
	wantReason := "node maintenance: node gpu-1 drained by an operator: 1 GPU of group train there (checkpoint signal SIGUSR1, grace 20s)"
	rec := c.waitRecord(30*time.Second, "default", *job.ID, "steward_reason", "node maintenance")
	if !strings.Contains(rec["steward_reason"], wantReason) || rec["steward_rule"] != "maintenance" {
		t.Errorf("record: reason %q rule %q, want %q", rec["steward_reason"], rec["steward_rule"], wantReason)
	}
	out = r.waitStdout(victim, "trainer: checkpoint written at ", 30*time.Second)
	if !strings.Contains(out, "(SIGUSR1 received)") {
		t.Errorf("no signalled checkpoint in the victim's output:\n%s", tail(out, 10))
	}

	moved := c.waitJobAlloc("default", *job.ID, victim.ID, 90*time.Second)
	took := time.Since(drainedAt)
	if moved.NodeID != second.NodeID {
		t.Errorf("trainer resumed on %s, want the second client %s", moved.NodeID, second.NodeID)
	}
	out = r.waitStdout(moved, "trainer: step ", 60*time.Second)
	if !strings.Contains(out, "STEWARD_RESUMED=1 STEWARD_RESUME_COUNT=1") || !strings.Contains(out, "trainer: resuming from checkpoint at step") {
		t.Errorf("resumed trainer not resumed from its checkpoint:\n%s", head(out, 5))
	}
	if ev := taskEventsOf(c.alloc(victim.ID)); !strings.Contains(ev, "node maintenance") {
		t.Errorf("the victim's task events do not say why:%s", ev)
	}
	if n, _, err := c.Client.Nodes().Info(first.NodeID, nil); err != nil || n.SchedulingEligibility != api.NodeSchedulingIneligible {
		t.Errorf("drained node: %v, eligibility %v; want ineligible", err, n)
	}
	if !ctl.Contains("node maintenance: checkpointing and holding work on a drained node") {
		t.Errorf("no maintenance line in the controller's log")
	}
	t.Logf("node maintenance: drain → trainer running on the other node in %s (grace 20s, Nomad's deadline 1h)", took.Round(time.Millisecond))

	// The first client back (steward drain -disable), and the second
	// drained with a deadline sooner than the grace, which the controller
	// learns from the node's event: the grace is cut to end before it, the
	// reason says so, and the trainer goes back to the first client.
	if out, code := c.stewardAs(prodMgmtToken, "drain", "-disable", "gpu-1"); code != 0 || !strings.Contains(out, "eligible again") {
		t.Fatalf("steward drain -disable: exit %d\n%s", code, out)
	}
	if out, code := c.stewardAs(prodMgmtToken, "drain", "-deadline", "25s", "gpu-2"); code != 0 {
		t.Fatalf("steward drain gpu-2: exit %d\n%s", code, out)
	}
	rec = c.waitRecord(30*time.Second, "default", *job.ID, "steward_reason", "node gpu-2")
	if !strings.Contains(rec["steward_reason"], "cut from 20s to end before the drain's deadline") {
		t.Errorf("record: reason %q, want the grace cut to the drain's deadline", rec["steward_reason"])
	}
	t.Logf("short deadline: %s", rec["steward_reason"])
	back := c.waitJobAlloc("default", *job.ID, moved.ID, 90*time.Second)
	if back.NodeID != first.NodeID {
		t.Errorf("trainer resumed on %s, want the first client %s, eligible again", back.NodeID, first.NodeID)
	}
	if out := r.waitStdout(back, "trainer: step ", 60*time.Second); !strings.Contains(out, "STEWARD_RESUMED=1 STEWARD_RESUME_COUNT=2") {
		t.Errorf("trainer back on the first client not told it resumes a second time:\n%s", head(out, 5))
	}
}
