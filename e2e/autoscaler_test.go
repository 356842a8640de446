package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// TestAutoscalerPolicyPinnedWhileHeld: project-a's training job has a
// scaling block on its GPU group (min 1, max 4), as a job the Nomad
// Autoscaler manages does. project-b's notebook takes the GPUs back within
// its reservation: Steward preempts and holds the training job (Nomad
// would refuse a plain scale to 0, below min), pinning its policy
// (disabled, max 0) while held, so that a scale up through the scaling API
// (what the Autoscaler calls) is refused by Nomad and starts nothing; when
// the notebook ends the job resumes with its owner's policy back.
func TestAutoscalerPolicyPinnedWhileHeld(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 8, "project-a", "project-b")
	c.startController("ctl", writePolicy(t, runAIPolicy))
	a := &api.QueryOptions{Namespace: "project-a"}

	job := c.parseWork("train", "project-a", "training", 8, 1, "priority", "40")
	enabled, lo, hi := true, int64(1), int64(4)
	job.TaskGroups[0].Scaling = &api.ScalingPolicy{Enabled: &enabled, Min: &lo, Max: &hi,
		Policy: map[string]any{"cooldown": "1m"}}
	if _, _, err := c.Client.Jobs().Register(job, nil); err != nil {
		t.Fatalf("register train with a scaling block: %v", err)
	}
	c.waitRunning(60*time.Second, map[string]int{"project-a/train": 1})
	if p := c.scalingPolicy(t, a, "train"); !on(p.Enabled) || *p.Min != 1 || *p.Max != 4 {
		t.Fatalf("before: policy enabled=%v min=%d max=%d", on(p.Enabled), *p.Min, *p.Max)
	}

	c.work("notebook", "project-b", "interactive", 4, 1, "priority", "60")
	c.waitRunning(60*time.Second, map[string]int{"project-b/notebook": 1, "project-a/train": 0})
	rec := c.waitRecord(30*time.Second, "project-a", "train", "steward_scaling", "scaling policy disabled while held")
	if !strings.Contains(rec["steward_scaling"], "enabled, min 1, max 4") || rec["steward_state"] != "preempted" {
		t.Errorf("record while held: %v", rec)
	}
	p := c.scalingPolicy(t, a, "train")
	if on(p.Enabled) || *p.Max != 0 || *p.Min != 0 {
		t.Errorf("while held: policy enabled=%v min=%d max=%d, want disabled, min 0, max 0", on(p.Enabled), *p.Min, *p.Max)
	}
	// GET /v1/scaling/policies, as the Autoscaler reads it.
	stubs, _, err := c.Client.Scaling().ListPolicies(a)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stubs {
		if s.Target["Job"] == "train" && s.Enabled {
			t.Errorf("/v1/scaling/policies lists train's policy %s as enabled while held", s.ID)
		}
	}
	events := c.scalingEvents(t, a, "train")
	if !strings.Contains(events, "its scaling policy is disabled while held") {
		t.Errorf("scaling events say nothing of the policy: %s", events)
	}

	// The Autoscaler scales the held group up: Nomad refuses, nothing
	// starts.
	two := 2
	_, _, err = c.Client.Jobs().Scale("train", "work", &two, "nomad-autoscaler: scaling up", false, nil, &api.WriteOptions{Namespace: "project-a"})
	if err == nil || !strings.Contains(err.Error(), "maximum") {
		t.Errorf("the Autoscaler's scale up while held: %v, want Nomad's refusal (above the policy's max)", err)
	}
	time.Sleep(3 * time.Second)
	c.waitRunning(10*time.Second, map[string]int{"project-b/notebook": 1, "project-a/train": 0})

	// The notebook ends: train resumes, its owner's policy back.
	if _, _, err := c.Client.Jobs().Deregister("notebook", false, &api.WriteOptions{Namespace: "project-b"}); err != nil {
		t.Fatal(err)
	}
	c.waitRunning(60*time.Second, map[string]int{"project-a/train": 1})
	testnomad.WaitFor(t, 30*time.Second, "train's scaling policy restored", func() (bool, string) {
		p := c.scalingPolicy(t, a, "train")
		return on(p.Enabled) && *p.Min == 1 && *p.Max == 4, fmt.Sprintf("enabled=%v min=%d max=%d", on(p.Enabled), *p.Min, *p.Max)
	})
	testnomad.WaitFor(t, 30*time.Second, "no steward_scaling in the record after the resume", func() (bool, string) {
		rec := c.record("project-a", "train")
		_, has := rec["steward_scaling"]
		return !has, fmt.Sprint(rec)
	})
}

// parseWork parses jobs/gpu-work.nomad.hcl with the given variables, as
// work does, without registering it.
func (c *cluster) parseWork(name, ns, tier string, gpus, count int, extra ...string) *api.Job {
	c.t.Helper()
	src, err := os.ReadFile(filepath.Join(testnomad.RepoRoot(c.t), "jobs", "gpu-work.nomad.hcl"))
	if err != nil {
		c.t.Fatal(err)
	}
	vars := fmt.Sprintf("name = %q\nnamespace = %q\ntier = %q\ngpus = %d\ncount = %d\n", name, ns, tier, gpus, count)
	for i := 0; i+1 < len(extra); i += 2 {
		vars += fmt.Sprintf("%s = %q\n", extra[i], extra[i+1])
	}
	job, err := c.Client.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: string(src), Variables: vars, Canonicalize: true})
	if err != nil {
		c.t.Fatalf("parse gpu-work: %v", err)
	}
	return job
}

// scalingPolicy reads the scaling policy of a job's group "work".
func (c *cluster) scalingPolicy(t *testing.T, q *api.QueryOptions, jobID string) *api.ScalingPolicy {
	t.Helper()
	stubs, _, err := c.Client.Scaling().ListPolicies(q)
	if err != nil {
		t.Fatalf("list scaling policies: %v", err)
	}
	for _, s := range stubs {
		if s.Target["Job"] == jobID && s.Target["Group"] == "work" {
			p, _, err := c.Client.Scaling().GetPolicy(s.ID, q)
			if err != nil {
				t.Fatalf("read scaling policy %s: %v", s.ID, err)
			}
			return p
		}
	}
	t.Fatalf("no scaling policy for %s/work", jobID)
	return nil
}

func on(b *bool) bool { return b != nil && *b }

// scalingEvents is the messages of a job's scaling events, one a line.
func (c *cluster) scalingEvents(t *testing.T, q *api.QueryOptions, jobID string) string {
	t.Helper()
	st, _, err := c.Client.Jobs().ScaleStatus(jobID, q)
	if err != nil {
		t.Fatalf("scale status of %s: %v", jobID, err)
	}
	var b strings.Builder
	for _, g := range st.TaskGroups {
		for _, e := range g.Events {
			b.WriteString(e.Message + "\n")
		}
	}
	return b.String()
}
