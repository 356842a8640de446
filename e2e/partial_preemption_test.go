package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

const signalledPolicy = twoTiers + `
preemption {
  min_runtime       = "0s"
  grace             = "10s"
  checkpoint_signal = "SIGUSR1"
}
`

// TestPartialPreemptionStopsOnlySignalled (issue 28, item 2): a batch
// group of 4 (or 8) one-GPU allocations fills a node; another tenant's
// interactive job needs 2 (or 3) of its GPUs. The victims get the
// checkpoint signal, keep running through the 10 s grace (their task
// traps SIGUSR1), and go when it ends. Every allocation Nomad stops for
// the preemption must have had the signal first, and Nomad must stop no
// more than the victims and place no replacement: a partial preemption
// lowers the group's count, Nomad then stops the highest name indexes,
// and so the victims must be those.
//
// The group's lowest-indexed allocations are restarted first: their new
// allocations (same names) are the newest, the least work at risk, which
// is what the engine preempts first when nothing else decides. Stopped one
// by one before the count was lowered (as before), the victims' own
// evaluations placed replacements under their names, and the count's
// evaluation then stopped the highest indexes: allocations that never had
// the signal. The loaded cases run beside busy CPUs, where Nomad's
// evaluations run in another order.
func TestPartialPreemptionStopsOnlySignalled(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name        string
		count, need int
		load        bool
	}{
		{"group-of-4", 4, 2, false},
		{"group-of-8", 8, 3, false},
		{"group-of-4-loaded", 4, 2, true},
		{"group-of-8-loaded", 8, 3, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.load {
				loadMachine(t, 2)
			}
			c := startCluster(t, tc.count, "research", "product")
			c.startController("ctl", writePolicy(t, signalledPolicy))
			c.work("batch", "research", "training", 1, tc.count, "priority", "40", "type", "batch")
			c.waitRunning(90*time.Second, map[string]int{"research/batch": tc.count})

			restarted := c.restartLowest(tc.need)
			c.waitRunning(90*time.Second, map[string]int{"research/batch": tc.count})
			time.Sleep(2 * time.Second) // the restarted are the newest by whole seconds

			c.work("urgent", "product", "interactive", tc.need, 1, "priority", "60")
			c.waitRunning(120*time.Second, map[string]int{"product/urgent": 1, "research/batch": tc.count - tc.need})
			// Nomad's evaluations of the preemption (and of any stop)
			// settle: what they stop shows by now.
			time.Sleep(8 * time.Second)

			allocs, _, err := c.Client.Jobs().Allocations("batch", true, &api.QueryOptions{Namespace: "research"})
			if err != nil {
				t.Fatal(err)
			}
			var stopped, unsignalled, running, all []string
			for _, stub := range allocs {
				if slices.Contains(restarted, stub.ID) {
					continue
				}
				all = append(all, stub.Name)
				a, _, err := c.Client.Allocations().Info(stub.ID, &api.QueryOptions{Namespace: "research"})
				if err != nil {
					t.Fatal(err)
				}
				signalled := false
				for _, ts := range a.TaskStates {
					for _, e := range ts.Events {
						if e.Type == api.TaskSignaling && strings.Contains(e.DisplayMessage+e.Details["signal"], "SIGUSR1") {
							signalled = true
						}
					}
				}
				if a.DesiredStatus == api.AllocDesiredStatusRun && a.ClientStatus == api.AllocClientStatusRunning {
					running = append(running, a.Name)
					continue
				}
				stopped = append(stopped, a.Name)
				if !signalled {
					unsignalled = append(unsignalled, fmt.Sprintf("%s (%s, %s: %s)", a.Name, a.ID[:8], a.ClientStatus, a.DesiredDescription))
				}
			}
			slices.Sort(stopped)
			slices.Sort(running)
			slices.Sort(all)
			if len(unsignalled) > 0 {
				t.Errorf("Nomad stopped allocations that never had the checkpoint signal: %v", unsignalled)
			}
			if len(stopped) != tc.need || len(all) != tc.count {
				t.Errorf("stopped %v (want %d) of %d allocations %v (want the group's %d: no replacement)", stopped, tc.need, len(all), all, tc.count)
			}
			var top []string
			for i := tc.count - tc.need; i < tc.count; i++ {
				top = append(top, fmt.Sprintf("batch.work[%d]", i))
			}
			if !slices.Equal(stopped, top) {
				t.Errorf("stopped %v, want the group's highest names %v", stopped, top)
			}
			if len(running) != tc.count-tc.need {
				t.Errorf("running %v, want %d", running, tc.count-tc.need)
			}
		})
	}
}

// restartLowest stops the batch job's n allocations with the lowest name
// indexes; Nomad places new ones under the same names. It returns the IDs
// of those stopped.
func (c *cluster) restartLowest(n int) []string {
	c.t.Helper()
	allocs, _, err := c.Client.Jobs().Allocations("batch", false, &api.QueryOptions{Namespace: "research"})
	if err != nil {
		c.t.Fatal(err)
	}
	var ids []string
	for _, a := range allocs {
		for i := range n {
			if a.Name == fmt.Sprintf("batch.work[%d]", i) && a.ClientStatus == api.AllocClientStatusRunning {
				ids = append(ids, a.ID)
			}
		}
	}
	if len(ids) != n {
		c.t.Fatalf("found %d of the %d lowest allocations", len(ids), n)
	}
	for _, id := range ids {
		if _, err := c.Client.Allocations().Stop(&api.Allocation{ID: id, Namespace: "research"}, &api.QueryOptions{Namespace: "research"}); err != nil {
			c.t.Fatal(err)
		}
	}
	return ids
}
