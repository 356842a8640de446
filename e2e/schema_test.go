package e2e

import (
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// TestUnversionedStateReadByNewController (issue 34, item 6): on the
// production-shaped cluster, a job's state in the format the controller
// wrote before schema versions (no "schema" item), written by hand for a
// job held at 0, is read whole by this controller: the job is resumed on
// the free GPUs, its record keeps the counts only that state knew
// (preempted 3 times over its life, resumed twice), and the state is
// written back as schema 1. Then a state of a newer schema (2) makes a
// second controller refuse to lead: it says why and leaves that state
// as it is.
func TestUnversionedStateReadByNewController(t *testing.T) {
	t.Parallel()
	c := startProdCluster(t, prodSpec{gpus: []simGPUs{{count: 2}}}, "ml")
	c.work("train", "ml", "training", 1, 1, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"ml/train": 1})
	job, _, err := c.Client.Jobs().Info("train", &api.QueryOptions{Namespace: "ml"})
	if err != nil {
		t.Fatal(err)
	}
	// Held by Steward, as the old controller left it: scaled to 0, and its
	// state says so.
	zero := 0
	testnomad.WaitFor(t, 60*time.Second, "train scaled to 0 (once its deployment ends)", func() (bool, string) {
		_, _, err := c.Client.Jobs().Scale("train", "work", &zero, "held (by hand, as an older controller)", false, nil, &api.WriteOptions{Namespace: "ml"})
		return err == nil, errString(err)
	})
	job, _, err = c.Client.Jobs().Info("train", &api.QueryOptions{Namespace: "ml"})
	if err != nil {
		t.Fatal(err)
	}
	c.waitRunning(60*time.Second, map[string]int{"ml/train": 0})
	since := time.Now().Add(-10 * time.Minute).UTC().Format(time.RFC3339)
	old := `{"namespace":"ml","id":"train","held":{"work":{"count":1,"original":1,"since":"` + since + `","rule":"priority","index":` +
		strconv.FormatUint(*job.JobModifyIndex, 10) + `}},"preempted_total":3,"resumes":2,"status":"preempted","rule":"priority",` +
		`"reason":"tier training (priority 40) yields 1 GPU to ml/nb/work","updated":"` + since + `"}`
	mustPutVar(t, c.Client, "steward", "steward/jobs/ml/train", map[string]string{"state": old})

	ctl := c.startController("ctl", writePolicy(t, twoTiers))
	c.waitRunning(60*time.Second, map[string]int{"ml/train": 1})
	rec := c.waitRecord(30*time.Second, "ml", "train", "steward_state", "running")
	if rec["steward_preemptions_total"] != "3" || rec["steward_resume_count"] != "2" || rec["steward_schema"] != "1" {
		t.Errorf("record %v: want the unversioned state's counts (3 preemptions, 2 resumes) and schema 1", rec)
	}
	testnomad.WaitFor(t, 30*time.Second, "the state written back as schema 1", func() (bool, string) {
		v, _, err := c.Client.Variables().Read("steward/jobs/ml/train", &api.QueryOptions{Namespace: "steward"})
		if err != nil || v == nil {
			return false, "read: " + errString(err)
		}
		return v.Items["schema"] == "1" && strings.Contains(v.Items["state"], `"preempted_total":3`), v.Items["schema"] + " " + v.Items["state"]
	})
	ctl.Stop()

	// A newer schema: refused, left as it is.
	newer := map[string]string{"state": strings.Replace(old, `"id":"train"`, `"id":"other"`, 1), "schema": "2"}
	mustPutVar(t, c.Client, "steward", "steward/jobs/ml/other", newer)
	ctl2 := c.startController("ctl2", writePolicy(t, twoTiers))
	testnomad.WaitFor(t, 30*time.Second, "the refusal in the controller's log", func() (bool, string) {
		return ctl2.Contains("refusing to lead: the state was written by a newer controller"), tail(ctl2.Log(), 5)
	})
	if !ctl2.Contains("steward/jobs/ml/other") {
		t.Errorf("the refusal does not name the state:\n%s", tail(ctl2.Log(), 10))
	}
	if ctl2.Contains("leading: this controller acts") && ctl2.Contains("loaded controller state") {
		t.Errorf("the controller loaded the state and led:\n%s", tail(ctl2.Log(), 10))
	}
	v, _, err := c.Client.Variables().Read("steward/jobs/ml/other", &api.QueryOptions{Namespace: "steward"})
	if err != nil || !maps.Equal(v.Items, newer) {
		t.Errorf("the newer state changed: %v, %v", err, v)
	}
}

func mustPutVar(t *testing.T, client *api.Client, ns, path string, items map[string]string) {
	t.Helper()
	if err := putVar(client, ns, path, items); err != nil {
		t.Fatalf("write %s@%s: %v", path, ns, err)
	}
}

func errString(err error) string {
	if err == nil {
		return "none"
	}
	return err.Error()
}
