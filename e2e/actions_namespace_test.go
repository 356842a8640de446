package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// TestActionsOneBindingPerNamespace: the jobspec's actions need no policy
// bound to each job. The operator binds the shipped user policy to team
// ml's namespace once (`nomad acl policy apply -namespace ml`, no -job);
// two notebooks the team submits afterwards run their actions with it:
// "move-to-top" on one waiting for the only GPU (its record says where it
// moved), "pause" on the other (the controller holds it). Run with the
// team's token through `nomad action`, as the UI's Actions menu runs them
// (TestNomadUIActions clicks them in chromium).
func TestActionsOneBindingPerNamespace(t *testing.T) {
	t.Parallel()
	c := actionsCluster(t)
	teamTok := c.aclToken("team-ml", fmt.Sprintf(teamRules, "ml"), userACL(t, "ml"),
		`namespace "ml" { capabilities = ["alloc-node-exec"] }`)
	team := c.as(teamTok)
	ctl := c.startController("ctl", writePolicy(t, uiActionsPolicy), "-listen", "127.0.0.1:0")
	submit := func(name, tier string) {
		job := c.parseJobFile(filepath.Join(testnomad.RepoRoot(t), "jobs", "gpu-work.nomad.hcl"), map[string]string{
			"name": name, "namespace": "ml", "tier": tier, "gpus": "1", "busy_seconds": "600",
			"steward_bin": testnomad.StewardBin(t)})
		if _, _, err := team.Jobs().Register(job, &api.WriteOptions{Namespace: "ml"}); err != nil {
			t.Fatalf("team ml registers %s: %v", name, err)
		}
	}
	run := func(job, name string) (string, error) {
		cmd := exec.Command(testnomad.NomadBin(t), "action", "-namespace", "ml", "-job", job, "-group", "steward", "-task", "actions", name)
		cmd.Env = append(os.Environ(), "NOMAD_ADDR="+c.Address, "NOMAD_TOKEN="+teamTok)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	action := func(job, name, want string) {
		t.Helper()
		if out, err := run(job, name); err != nil || !strings.Contains(out, want) {
			t.Fatalf("nomad action %s on ml/%s: %v\n%s", name, job, err, out)
		}
	}
	submit("nb1", "training")
	c.waitGroups(60*time.Second, "ml", "nb1", map[string]int{"work": 1, "steward": 1})
	// Unbound, the action has only the workload identity's implicit
	// rights.
	if out, _ := run("nb1", "pause"); !strings.Contains(out, "needs write on variables steward/requests/* in namespace ml") {
		t.Fatalf("pause before any binding:\n%s", out)
	}
	// One binding for the namespace, made after nb1 was submitted and
	// before nb2 and nb3 are: no -job.
	if _, err := c.Client.ACLPolicies().Upsert(&api.ACLPolicy{Name: "steward-user-ml", Rules: userACL(t, "ml"),
		JobACL: &api.JobACL{Namespace: "ml"}}, nil); err != nil {
		t.Fatalf("binding the user policy to namespace ml: %v", err)
	}
	submit("nb2", "training")
	submit("nb3", "training")
	c.waitGroups(60*time.Second, "ml", "nb3", map[string]int{"steward": 1})
	c.rounds(ctl, 2)

	// nb3 waits behind nb2 for the only GPU: to the top of ml's queue.
	action("nb3", "move-to-top", "move of ml/nb3 to the top of namespace ml's waiting jobs requested")
	rec := c.waitRecord(60*time.Second, "ml", "nb3", "steward_queue_move", "moved by a request in namespace ml to the top")
	testnomad.WaitFor(t, 30*time.Second, "nb3 first in ml's queue", func() (bool, string) {
		rec = c.record("ml", "nb3")
		return strings.HasPrefix(rec["steward_position"], "1 of 2"), rec["steward_position"]
	})

	// The running one pauses, with the same namespace's binding.
	action("nb1", "pause", "pause of ml/nb1 requested")
	c.waitRecord(60*time.Second, "ml", "nb1", "steward_state", "paused")
}
