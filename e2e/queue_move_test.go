package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/controller"
	"github.com/gpu-steward/steward/internal/testnomad"
)

// TestQueueMoveOwnJobs: on the production-shaped cluster (ACLs, mTLS),
// research and ml each wait with training jobs behind an ops job that
// holds all 4 GPUs, interleaved by time: r1, m1, r2, r3. A research token
// moves r3 to the top with `steward queue move`: r3 takes r1's place (1st)
// and r1 and r2 follow it, while ml's m1 keeps its place (2nd): a move
// reorders research's own jobs only. Then r1 moves before r2. The
// research token may not move ml's job (Nomad refuses the request, 403),
// and a request that names ml's job from research's namespace is refused
// by the controller with its reason and changes nothing.
func TestQueueMoveOwnJobs(t *testing.T) {
	t.Parallel()
	c := startProdCluster(t, prodSpec{}, "research", "ml", "ops")
	research := c.aclToken("team-research", fmt.Sprintf(teamRules, "research"), userACL(t, "research"))
	researchUser := c.aclToken("user-research", userACL(t, "research"))
	ctl := c.startController("ctl", writePolicy(t, tenantPolicy), "-listen", "127.0.0.1:0")

	c.work("fill", "ops", "interactive", 4, 1, "priority", "60")
	c.waitRunning(60*time.Second, map[string]int{"ops/fill": 1})
	for _, w := range []struct{ name, ns string }{{"r1", "research"}, {"m1", "ml"}, {"r2", "research"}, {"r3", "research"}} {
		c.work(w.name, w.ns, "training", 4, 1, "priority", "40")
		time.Sleep(1100 * time.Millisecond) // one waiting-since second each
	}
	// order is the whole cluster's queue (the operator's view), by job.
	order := func() (string, []controller.QueueEntry) {
		out, code := c.stewardAs(prodMgmtToken, "queue", "-json")
		var q []controller.QueueEntry
		if code != 0 || json.Unmarshal([]byte(out), &q) != nil {
			return out, nil
		}
		var jobs []string
		for _, e := range q {
			jobs = append(jobs, e.Job)
		}
		return strings.Join(jobs, " "), q
	}
	waitOrder := func(want string) []controller.QueueEntry {
		t.Helper()
		var q []controller.QueueEntry
		testnomad.WaitFor(t, 30*time.Second, "the queue "+want, func() (bool, string) {
			got, entries := order()
			q = entries
			return got == want, got
		})
		return q
	}
	waitOrder("research/r1 ml/m1 research/r2 research/r3")

	// Not research's to move: ml's job (Nomad refuses the request).
	if out, code := c.stewardAs(research, "queue", "move", "-namespace", "ml", "m1", "-top"); code != 1 || !strings.Contains(out, "403") {
		t.Errorf("research moving ml's job: exit %d, want 1 with a 403:\n%s", code, out)
	}
	// A request that names ml's job from research's namespace: the user
	// token cannot list jobs, so the CLI leaves it as given; the
	// controller looks m1 up in research only and refuses.
	if out, code := c.stewardAs(researchUser, "queue", "move", "-namespace", "research", "r2", "-before", "m1"); code != 0 {
		t.Fatalf("steward queue move r2 -before m1 (exit %d):\n%s", code, out)
	}
	testnomad.WaitFor(t, 30*time.Second, "the controller refuses the move before ml's job", func() (bool, string) {
		return strings.Contains(ctl.Log(), "no job m1 runs in namespace research"), ""
	})

	out, code := c.stewardAs(research, "queue", "move", "-namespace", "research", "r3", "-top")
	if code != 0 || !strings.Contains(out, "move of research/r3 to the top") {
		t.Fatalf("steward queue move r3 -top (exit %d):\n%s", code, out)
	}
	q := waitOrder("research/r3 ml/m1 research/r1 research/r2")
	if q[0].TenantPosition != 1 || !strings.Contains(q[0].Moved, "moved by a request in namespace research to the top") {
		t.Errorf("r3's queue entry: tenant position %d, moved %q", q[0].TenantPosition, q[0].Moved)
	}
	rec := c.waitRecord(30*time.Second, "research", "r3", "steward_position", "1 of 4 in the cluster, 1 of 3 in tenant research")
	if !strings.Contains(rec["steward_queue_move"], "other tenants' places are unchanged") {
		t.Errorf("r3's record: steward_queue_move %q", rec["steward_queue_move"])
	}

	if out, code := c.stewardAs(research, "queue", "move", "-namespace", "research", "r2", "-before", "r1"); code != 0 {
		t.Fatalf("steward queue move r2 -before r1 (exit %d):\n%s", code, out)
	}
	waitOrder("research/r3 ml/m1 research/r2 research/r1")
	out, _ = c.stewardAs(research, "queue", "-namespace", "research")
	t.Logf("steward queue -namespace research:\n%s", out)
	if !strings.Contains(out, "moved") {
		t.Errorf("research's queue table does not mark the moved jobs:\n%s", out)
	}
}
