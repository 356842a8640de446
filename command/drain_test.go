package command

import (
	"strings"
	"testing"

	"github.com/hashicorp/cli"
	"github.com/hashicorp/nomad/api"
)

// TestDrainSummary: steward drain says who takes care of each GPU
// allocation on the node: Steward for batch work (checkpointed, held,
// resumed elsewhere), Nomad for service, system and sysbatch jobs, and
// for work without GPUs (counted); finished allocations are left out.
func TestDrainSummary(t *testing.T) {
	alloc := func(id, job, typ string, gpus int, client string) *api.Allocation {
		a := &api.Allocation{ID: id + "-0000-0000", Namespace: "ml", JobID: job, TaskGroup: "work", ClientStatus: client,
			DesiredStatus: api.AllocDesiredStatusRun, Job: &api.Job{Type: &typ},
			AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"work": {}}}}
		if gpus > 0 {
			ids := make([]string, gpus)
			a.AllocatedResources.Tasks["work"].Devices = []*api.AllocatedDeviceResource{{Type: "gpu", DeviceIDs: ids}}
		}
		return a
	}
	for _, tc := range []struct {
		name   string
		allocs []*api.Allocation
		want   []string
	}{
		{"nothing runs", nil, []string{"no running allocations"}},
		{"batch: Steward's; service and system: Nomad's; no GPUs: counted",
			[]*api.Allocation{alloc("aaaaaaaa", "train", "batch", 2, "running"), alloc("bbbbbbbb", "serve", "service", 1, "running"),
				alloc("cccccccc", "agent", "system", 1, "running"), alloc("dddddddd", "web", "service", 0, "running"),
				alloc("eeeeeeee", "done", "batch", 1, "complete")},
			[]string{
				"ml/agent work (cccccccc): 1 GPU(s): Nomad stops it last (a system job)",
				"ml/serve work (bbbbbbbb): 1 GPU(s): Nomad migrates it (a service job: its migrate block and kill_signal; no checkpoint signal from Steward)",
				"ml/train work (aaaaaaaa): 2 GPU(s): Steward checkpoints it (signal, grace), holds it and resumes it elsewhere",
				"1 allocation(s) without GPUs: Nomad migrates them",
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := drainSummary(tc.allocs); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("summary\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// TestDrainNeedsTime: a drain without a deadline (which would stop
// everything at once, with no checkpoint) is refused before any call.
func TestDrainNeedsTime(t *testing.T) {
	ui := cli.NewMockUi()
	if code := (&DrainCommand{Meta: Meta{UI: ui}}).Run([]string{"-deadline", "0s", "gpu-1"}); code != 1 ||
		!strings.Contains(ui.ErrorWriter.String(), "-deadline must be positive") {
		t.Fatalf("exit %d, stderr %q", code, ui.ErrorWriter.String())
	}
}
