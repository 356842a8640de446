package e2e

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testdocker"
	"github.com/gpu-steward/steward/internal/testnomad"
)

// Containers in the tests (issue 30): Nomad's docker driver against the
// run's own daemon (internal/testdocker), with images built FROM scratch.

// dockerExtra is the client option that enables Nomad's docker driver
// against the test run's daemon.
func dockerExtra(t testing.TB, o testnomad.Options) testnomad.Options {
	t.Helper()
	o.ExtraConfig += testdocker.Shared(t).PluginConfig()
	return o
}

// dockerOnly is dockerExtra on a node that runs containers alone: no
// raw_exec, and Nomad's other built-in drivers (exec, java, qemu) left
// out, as on a GPU node an operator keeps to containers.
func dockerOnly(t testing.TB, o testnomad.Options) testnomad.Options {
	t.Helper()
	o = dockerExtra(t, o)
	o.NoRawExec = true
	o.ClientOptions = maps.Clone(o.ClientOptions)
	if o.ClientOptions == nil {
		o.ClientOptions = map[string]string{}
	}
	o.ClientOptions["driver.allowlist"] = "docker"
	return o
}

// TestDockerJobHasNoNetwork: a job under Nomad's docker driver, on a
// client of the production-shaped cluster, runs an image built FROM
// scratch in the run's daemon, with network_mode "none": the container's
// only interface is loopback.
func TestDockerJobHasNoNetwork(t *testing.T) {
	t.Parallel()
	c := startProdCluster(t, prodSpec{gpus: []simGPUs{{count: 1}}, extra: dockerExtra(t, testnomad.Options{})}, "ml")
	c.waitDriver(c.NodeID, "docker")
	job := &api.Job{ID: ptr("probe"), Namespace: ptr("ml"), Type: ptr("batch"), Datacenters: []string{"*"},
		TaskGroups: []*api.TaskGroup{{Name: ptr("g"), Count: ptr(1),
			RestartPolicy: &api.RestartPolicy{Attempts: ptr(0), Mode: ptr("fail")},
			Tasks: []*api.Task{{Name: "t", Driver: "docker",
				Config: map[string]any{"image": testdocker.Image("shell"), "network_mode": "none",
					"args": []string{"-c", "echo interfaces: $(ls /sys/class/net | tr '\\n' ' '); cat /proc/net/dev | wc -l; sleep 2"}},
				Resources: &api.Resources{CPU: ptr(50), MemoryMB: ptr(32)}}}}}}
	if _, _, err := c.Client.Jobs().Register(job, nil); err != nil {
		t.Fatal(err)
	}
	var out string
	testnomad.WaitFor(t, 60*time.Second, "the container's output", func() (bool, string) {
		stubs, _, err := c.Client.Jobs().Allocations("probe", true, &api.QueryOptions{Namespace: "ml"})
		if err != nil || len(stubs) == 0 {
			evals, _, _ := c.Client.Jobs().Evaluations("probe", &api.QueryOptions{Namespace: "ml"})
			var why []string
			for _, e := range evals {
				for tg, m := range e.FailedTGAllocs {
					why = append(why, fmt.Sprintf("%s: %+v %v", tg, m.ConstraintFiltered, m.DimensionExhausted))
				}
			}
			return false, "no allocation " + strings.Join(why, "; ")
		}
		a := c.alloc(stubs[0].ID)
		r, err := c.Client.AllocFS().Cat(a, "alloc/logs/t.stdout.0", nil)
		if err != nil {
			return false, err.Error()
		}
		out = readAll(r)
		return strings.Contains(out, "interfaces:"), a.ClientStatus + " stdout: " + out + " events: " + taskEventsOf(a)
	})
	if got := strings.TrimSpace(strings.SplitN(strings.SplitN(out, "interfaces:", 2)[1], "\n", 2)[0]); got != "lo" {
		t.Errorf("the container's interfaces: %q, want only lo\n%s", got, out)
	}
}

// taskEventsOf is an allocation's task events, for a failure's message.
func taskEventsOf(a *api.Allocation) string {
	var b strings.Builder
	for task, ts := range a.TaskStates {
		for _, e := range ts.Events {
			fmt.Fprintf(&b, "\n  %s %s: %s", task, e.Type, e.DisplayMessage)
		}
	}
	return b.String()
}
