package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// floodPolicy: each tenant may use 2 GPUs; limits hold at once.
const floodPolicy = twoTiers + `
tenant "ml" {
  reserve = 0
  limit   = 2
}
tenant "flood" {
  reserve = 0
  limit   = 2
}
preemption {
  min_runtime = "0s"
  grace       = "0s"
}
`

// The flood's size: request variables, and the bytes of its bad tier value
// and of its long job ID.
const (
	floodRequests = 2000
	floodTierSize = 100 << 10
	floodIDSize   = 70 << 10
)

// TestTenantFloodsDoNotStarveLeader: tenant flood leaves 2,000 request
// variables in its namespace, runs a job whose meta carries 200 keys of its
// own and a 100 KB tier value, and one whose ID is 70 KB. The leader keeps
// enforcing for everyone: tenant ml's over-limit job is held within 60 s,
// flood's own GPUs are brought back to its limit with the long-ID job's
// state saved (under a hash of the ID), and the status keeps being
// published, within a variable, saying what it cut; tenant lab's pause
// request is carried out beside the flood.
func TestTenantFloodsDoNotStarveLeader(t *testing.T) {
	t.Parallel()
	c := startProdCluster(t, prodSpec{gpus: []simGPUs{{count: 8}}}, "ml", "flood", "lab")
	c.work("nb", "lab", "interactive", 1, 1, "priority", "60")

	// The request flood, written on loopback by 8 writers, bounded in time.
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, floodRequests)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < floodRequests; i += 8 {
				v := &api.Variable{Namespace: "flood", Path: fmt.Sprintf("steward/requests/ghost-%05d", i),
					Items: api.VariableItems{"action": "pause", "job": "ghost", "by": "flood"}}
				if _, _, err := c.Client.Variables().Create(v, &api.WriteOptions{Namespace: "flood"}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("write the request flood: %v", err)
	}
	if d := time.Since(start); d > 90*time.Second {
		t.Fatalf("writing %d request variables took %s", floodRequests, d)
	}
	t.Logf("%d request variables written in %s", floodRequests, time.Since(start).Round(time.Millisecond))

	fat := c.parseWork("fat", "flood", "training", 1, 1)
	for i := range 200 {
		fat.Meta[fmt.Sprintf("junk-%03d", i)] = strings.Repeat("x", 256)
	}
	fat.Meta["steward.tier"] = strings.Repeat("t", floodTierSize)
	if _, _, err := c.Client.Jobs().Register(fat, nil); err != nil {
		t.Fatalf("register flood/fat: %v", err)
	}
	c.waitRunning(120*time.Second, map[string]int{"flood/fat": 1, "lab/nb": 1})
	// The long-ID job starts last: it is the one over flood's limit.
	long := c.parseWork("long", "flood", "training", 1, 2)
	longID := strings.Repeat("j", floodIDSize)
	long.ID = &longID
	if _, _, err := c.Client.Jobs().Register(long, nil); err != nil {
		t.Fatalf("register flood's job with a %d-byte ID: %v", floodIDSize, err)
	}
	c.waitRunning(120*time.Second, map[string]int{"flood/fat": 1, "flood/" + longID: 2})

	ctl := c.startController("ctl", writePolicy(t, floodPolicy))
	c.work("over", "ml", "training", 1, 3, "priority", "40")
	held := time.Now()
	testnomad.WaitFor(t, 60*time.Second, "ml/over held at its tenant's limit of 2", func() (bool, string) {
		n, count := c.running("ml", "over"), c.groupCount("ml", "over", "work")
		return n == 2 && count == 2, fmt.Sprintf("running %d, count %d", n, count)
	})
	t.Logf("ml/over held back to its tenant's limit %s after it was registered", time.Since(held).Round(time.Second))

	// Flood's own work is brought back to its limit too, the held job's
	// state saved (the long ID's as a hash of it).
	testnomad.WaitFor(t, 60*time.Second, "flood back at its limit of 2 GPUs", func() (bool, string) {
		fatN, longN := c.groupCount("flood", "fat", "work"), c.groupCount("flood", longID, "work")
		return fatN+longN == 2, fmt.Sprintf("counts: fat %d, long %d", fatN, longN)
	})
	// The status keeps being published, within a variable, with ml/over
	// held and the flood's values cut.
	var status string
	testnomad.WaitFor(t, 30*time.Second, "a status naming ml/over held", func() (bool, string) {
		v, _, err := c.Client.Variables().Read("steward/status", &api.QueryOptions{Namespace: "steward"})
		if err != nil {
			return false, err.Error()
		}
		status = v.Items["status"]
		var s struct {
			Held []struct{ Job string } `json:"held"`
		}
		_ = json.Unmarshal([]byte(status), &s)
		for _, h := range s.Held {
			if h.Job == "ml/over" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d bytes", len(status))
	})
	t.Logf("status: %d bytes", len(status))
	if len(status) > 64<<10 {
		t.Errorf("the status is %d bytes", len(status))
	}
	if !strings.Contains(status, "bytes cut)") {
		t.Errorf("the status does not say it cut the flood's values: %s", clipped(status))
	}
	testnomad.WaitFor(t, 30*time.Second, "the long-ID job's hold saved, under a hash of its ID", func() (bool, string) {
		refs, _, err := c.Client.Variables().PrefixList("steward/jobs/~~", &api.QueryOptions{Namespace: "steward"})
		if err != nil {
			return false, err.Error()
		}
		for _, r := range refs {
			v, _, err := c.Client.Variables().Read(r.Path, &api.QueryOptions{Namespace: "steward"})
			if err == nil && strings.Contains(v.Items["state"], `"id_hash"`) && strings.Contains(v.Items["state"], `"held"`) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d hashed states", len(refs))
	})

	// Another namespace's pause is carried out while the flood waits its
	// turn.
	paused := time.Now()
	if _, _, err := c.Client.Variables().Create(&api.Variable{Namespace: "lab", Path: "steward/requests/nb",
		Items: api.VariableItems{"action": "pause", "job": "nb", "by": "lab"}}, &api.WriteOptions{Namespace: "lab"}); err != nil {
		t.Fatalf("request lab/nb's pause: %v", err)
	}
	c.waitRecord(30*time.Second, "lab", "nb", "steward_state", "paused")
	c.waitRunning(30*time.Second, map[string]int{"lab/nb": 0})
	t.Logf("lab/nb paused %s after its request, beside the flood", time.Since(paused).Round(time.Second))
	if refs, _, err := c.Client.Variables().PrefixList("steward/requests/", &api.QueryOptions{Namespace: "flood"}); err == nil {
		t.Logf("%d of the flood's %d requests still wait their turn", len(refs), floodRequests)
	}

	// The requests wait their turn: the controller never read them all in
	// one round.
	if !ctl.Contains("requests wait for later rounds") {
		t.Errorf("the request flood was not bounded per round:\n%s", tail(ctl.Log(), 40))
	}
}

func clipped(s string) string {
	if len(s) > 300 {
		return s[:300] + fmt.Sprintf("...(%d bytes)", len(s))
	}
	return s
}
