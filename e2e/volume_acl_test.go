package e2e

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// volumeJob registers gpu-work with priority prio and the clients' host
// volume "scratch" (read-write; startProdCluster's) in its group, as a tenant would to keep its
// priority. Its raw_exec task mounts nothing (raw_exec cannot): Nomad
// checks the volume rights on the group's volume block alone.
func (c *cluster) volumeJob(name string, prio int) {
	c.t.Helper()
	src := filepath.Join(testnomad.RepoRoot(c.t), "jobs", "gpu-work.nomad.hcl")
	job := c.parseJobFile(src, map[string]string{"name": name, "namespace": "ml", "tier": "training", "gpus": "1", "count": "1",
		"priority": fmt.Sprint(prio)})
	tg := job.TaskGroups[0]
	tg.Volumes = map[string]*api.VolumeRequest{"scratch": {Name: "scratch", Type: "host", Source: "scratch"}}
	if _, _, err := c.Client.Jobs().Register(job, nil); err != nil {
		c.t.Fatalf("register %s with a host volume: %v", name, err)
	}
}

// priorityOf is a job's priority as Nomad has it.
func (c *cluster) priorityOf(ns, id string) int {
	j, _, err := c.Client.Jobs().Info(id, &api.QueryOptions{Namespace: ns})
	if err != nil || j.Priority == nil {
		return -1
	}
	return *j.Priority
}

// healthz answers the controller's /healthz status code ("-listen" in the
// log).
func healthz(t *testing.T, ctl *controllerProc) func() int {
	t.Helper()
	var addr string
	testnomad.WaitFor(t, 30*time.Second, "the /healthz address in the log", func() (bool, string) {
		if m := listenRE.FindStringSubmatch(ctl.Log()); m != nil {
			addr = m[1]
		}
		return addr != "", ""
	})
	return func() int {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return -1
		}
		resp.Body.Close()
		return resp.StatusCode
	}
}

// TestVolumeJobUnderACLsIsGoverned (issue 29, item 5): under ACLs, with the
// shipped controller policy, a tenant's job that mounts a host volume and
// asks for priority 100 has its priority reset to its tier's (40) like any
// other job: re-registering it needs the host volume right, which the
// policy now carries. /healthz stays 200 and no round fails. Then, with a
// policy without the volume rights (as shipped before), Nomad refuses the
// reset: the refusal is backed off (a handful of tries, not one every
// round), the job's record says Nomad's error and the right that is
// missing (host_volume "scratch", not submit-job), the other tenant job's
// priority is still reset, and /healthz stays 200 throughout.
func TestVolumeJobUnderACLsIsGoverned(t *testing.T) {
	t.Parallel()
	c := startProdCluster(t, prodSpec{}, "ml")
	rules := shippedACL(t, "steward-controller.policy.hcl") // c.controllerToken's
	policy := writePolicy(t, fmt.Sprintf(faultPolicy, "0s"))

	// The shipped policy: both jobs are reset.
	c.volumeJob("vol", 100)
	c.work("plain", "ml", "training", 1, 1, "priority", "90")
	c.waitRunning(90*time.Second, map[string]int{"ml/vol": 1, "ml/plain": 1})
	ctl := c.startController("shipped", policy, "-listen", "127.0.0.1:0")
	health := healthz(t, ctl)
	testnomad.WaitFor(t, 60*time.Second, "both jobs at their tier's priority 40", func() (bool, string) {
		v, p := c.priorityOf("ml", "vol"), c.priorityOf("ml", "plain")
		return v == 40 && p == 40, fmt.Sprintf("vol=%d plain=%d", v, p)
	})
	for i := range 10 {
		if code := health(); code != http.StatusOK {
			t.Errorf("/healthz sample %d: %d, want 200", i, code)
		}
		time.Sleep(500 * time.Millisecond)
	}
	for _, bad := range []string{"Permission denied", "action failed", "some Nomad calls failed", "control round failed"} {
		if ctl.Contains(bad) {
			t.Errorf("the shipped policy's controller log says %q:\n%s", bad, tail(ctl.Log(), 40))
		}
	}
	ctl.Stop()

	// Without the volume rights: refused, backed off, recorded; the
	// round goes on.
	hostRule := "host_volume \"*\" {\n  policy = \"write\"\n}\n"
	weak := strings.Replace(rules, hostRule, "", 1)
	if weak == rules {
		t.Fatal("could not remove the host_volume rule from the shipped policy")
	}
	c.controllerToken = c.aclToken("steward-novolumes", weak)
	c.volumeJob("vol2", 100)
	c.work("plain2", "ml", "training", 1, 1, "priority", "90")
	c.waitRunning(90*time.Second, map[string]int{"ml/vol2": 1, "ml/plain2": 1})
	weakCtl := c.startController("novolumes", policy, "-listen", "127.0.0.1:0")
	health = healthz(t, weakCtl)
	testnomad.WaitFor(t, 60*time.Second, "plain2 reset to 40", func() (bool, string) {
		p := c.priorityOf("ml", "plain2")
		return p == 40, fmt.Sprintf("plain2=%d", p)
	})
	rec := c.waitRecord(60*time.Second, "ml", "vol2", "steward_write_error", "403")
	for _, want := range []string{"priority reset", "Permission denied", `host_volume "scratch" "mount-readwrite"`} {
		if !strings.Contains(rec["steward_write_error"], want) {
			t.Errorf("steward_write_error %q lacks %q", rec["steward_write_error"], want)
		}
	}
	start := time.Now()
	bad := 0
	for time.Since(start) < 25*time.Second {
		if code := health(); code != http.StatusOK {
			bad++
		}
		time.Sleep(500 * time.Millisecond)
	}
	if bad > 0 {
		t.Errorf("/healthz answered other than 200 in %d samples over 25s while Nomad refused one job's write", bad)
	}
	if p := c.priorityOf("ml", "vol2"); p != 100 {
		t.Errorf("vol2 priority %d: Nomad should have refused its reset without the volume right", p)
	}
	log := weakCtl.Log()
	tries := strings.Count(log, "Nomad refused a write")
	t.Logf("refused re-registrations in about %s: %d", time.Since(start).Round(time.Second)+10*time.Second, tries)
	if tries == 0 || tries > 6 {
		t.Errorf("%d refused writes logged: want a few, backed off (10s, 20s, ...), not one a round", tries)
	}
	if !strings.Contains(log, `host_volume \"scratch\"`) && !strings.Contains(log, `host_volume "scratch"`) {
		t.Errorf("the log does not name the missing host_volume right:\n%s", tail(log, 30))
	}
	for _, bad := range []string{"action failed", "some Nomad calls failed", "control round failed"} {
		if strings.Contains(log, bad) {
			t.Errorf("the log says %q: a refused write failed the round:\n%s", bad, tail(log, 30))
		}
	}
}
