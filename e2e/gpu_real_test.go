//go:build gpu

// The mission's idle-reclaim story on a real NVIDIA GPU: built only with
// -tags gpu (`make gpu-check`), on a machine with a GPU and PyTorch. `make
// test` runs the same story on simulated GPUs (TestAMDIdleReclaim).

package e2e

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// gpuBusyScript keeps the task's GPU busy with matrix products for the
// number of seconds in argv[1], then holds its CUDA context and memory
// while doing nothing: a notebook whose user went to lunch.
const gpuBusyScript = `
import os, sys, time
print("NVIDIA_VISIBLE_DEVICES=" + os.environ.get("NVIDIA_VISIBLE_DEVICES", ""), flush=True)
import torch
a = torch.randn(8192, 8192, device="cuda")
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for _ in range(20):
        b = a @ a
    torch.cuda.synchronize()
print("busy done", flush=True)
time.sleep(3600)
`

var realIdleReasonRE = regexp.MustCompile(`GPU utilisation (\d+)% \(under 10%\) for (\d+)s \(idle rule notebooks`)

// TestRealGPUIdleReclaim: on a real GPU, Steward's device plugin (NVML)
// fingerprints it and reports its utilisation, Steward's task driver
// attributes the task's own use of it, and the controller leaves a notebook
// alone while it computes and gives its GPU back once it idles, saying
// with what utilisation, as it does on simulated GPUs.
//
// STEWARD_GPU_PYTHON names a python3 with PyTorch; STEWARD_GPU_DRIVER the
// task driver (steward-exec by default; raw_exec to check the device plugin
// alone).
func TestRealGPUIdleReclaim(t *testing.T) {
	python := os.Getenv("STEWARD_GPU_PYTHON")
	if python == "" {
		t.Fatal("STEWARD_GPU_PYTHON is not set: name a python3 with PyTorch (make gpu-check sets it)")
	}
	driver := os.Getenv("STEWARD_GPU_DRIVER")
	if driver == "" {
		driver = "steward-exec"
	}
	stateDir := t.TempDir()
	a := testnomad.Start(t, testnomad.Options{
		LogLevel: "INFO",
		Plugins: []testnomad.Plugin{
			{Name: "steward-gpu", Config: `    backend      = "nvml"
    stats_period = "1s"`},
			{Name: "steward-exec", Config: fmt.Sprintf(`    checkpoint_root   = %q
    gpu_backend       = "nvml"
    gpu_sample_period = "1s"
    idle_after        = "5s"
    busy_after        = "2s"`, t.TempDir())},
		},
	})
	c := &cluster{Agent: a, t: t, stateDir: stateDir}
	for _, ns := range []string{"steward", "product"} {
		if _, err := a.Client.Namespaces().Register(&api.Namespace{Name: ns}, nil); err != nil {
			t.Fatalf("create namespace %s: %v", ns, err)
		}
	}
	gpu := c.waitRealGPU()
	c.waitDriver(a.NodeID, driver)

	policy := twoTiers + `
idle "notebooks" {
  tiers     = ["interactive"]
  threshold = 10
  after     = "20s"
  mode      = "always"
  action    = "stop"
}
preemption {
  min_runtime = "0s"
  grace       = "0s"
}
`
	ctl := c.startController("ctl", writePolicy(t, policy))

	const busy = 45
	job := &api.Job{
		ID:        ptr("notebook"),
		Namespace: ptr("product"),
		Type:      ptr("service"),
		Meta:      map[string]string{"steward.tier": "interactive"},
		TaskGroups: []*api.TaskGroup{{
			Name:          ptr("nb"),
			Count:         ptr(1),
			RestartPolicy: &api.RestartPolicy{Attempts: ptr(0), Mode: ptr("fail")},
			Tasks: []*api.Task{{
				Name:   "nb",
				Driver: driver,
				Config: map[string]interface{}{
					"command": python,
					"args":    []string{"-c", gpuBusyScript, strconv.Itoa(busy)},
				},
				Env: map[string]string{"HOME": "/tmp"},
				Resources: &api.Resources{
					CPU: ptr(500), MemoryMB: ptr(4096),
					Devices: []*api.RequestedDevice{{Name: "nvidia/gpu", Count: ptr(uint64(1))}},
				},
			}},
		}},
	}
	if _, _, err := c.Client.Jobs().Register(job, nil); err != nil {
		t.Fatalf("register notebook: %v", err)
	}
	c.waitRunning(120*time.Second, map[string]int{"product/notebook": 1})
	alloc := c.alloc(c.allocIDs("product", "notebook")[0])
	ids := alloc.AllocatedResources.Tasks["nb"].Devices[0].DeviceIDs
	if len(ids) != 1 || ids[0] != gpu {
		t.Fatalf("the notebook got devices %v, want [%s]", ids, gpu)
	}

	// While it computes, its GPU's utilisation (what the controller reads:
	// the node's device stats) is high, and the controller keeps it past
	// the idle rule's 20 s.
	busySince := time.Now()
	util := c.waitRealUtil(gpu, func(u int64) bool { return u >= 50 }, "at least 50%", 90*time.Second)
	t.Logf("busy: %s at %d%%, %s after the job ran", gpu, util, time.Since(busySince).Round(time.Second))
	if !strings.Contains(c.taskLog(alloc, "nb", "stdout"), "NVIDIA_VISIBLE_DEVICES="+gpu) {
		t.Errorf("the task did not see NVIDIA_VISIBLE_DEVICES=%s; stdout:\n%s", gpu, c.taskLog(alloc, "nb", "stdout"))
	}
	time.Sleep(25 * time.Second)
	if n := c.running("product", "notebook"); n != 1 {
		t.Fatalf("a notebook computing on its GPU was stopped (running %d); record %v", n, c.record("product", "notebook"))
	}
	if rec := c.record("product", "notebook"); strings.Contains(rec["steward_reason"], "GPU utilisation") {
		t.Fatalf("a busy notebook has an idle reason: %q", rec["steward_reason"])
	}

	// Once it idles, the idle rule gives its GPU back, and says with what
	// utilisation.
	c.waitRealUtil(gpu, func(u int64) bool { return u < 10 }, "under 10%", 120*time.Second)
	idleSince := time.Now()
	c.waitRunning(120*time.Second, map[string]int{"product/notebook": 0})
	rec := c.record("product", "notebook")
	m := realIdleReasonRE.FindStringSubmatch(rec["steward_reason"])
	if m == nil {
		t.Fatalf("the notebook's reason %q does not name its idle utilisation", rec["steward_reason"])
	}
	if u, _ := strconv.Atoi(m[1]); u >= 10 {
		t.Errorf("reclaimed at %d%% utilisation", u)
	}
	t.Logf("idle: stopped %s after its GPU fell under 10%%: %q", time.Since(idleSince).Round(time.Second), rec["steward_reason"])
	t.Logf("controller log, idle lines:\n%s", linesWith(ctl.Log(), "idle"))

	// The driver's own attribution (steward-exec): the task's processes'
	// share of the GPU, as task events.
	if driver == "steward-exec" {
		events := c.taskEvents(alloc.ID, "nb")
		t.Logf("task events:\n%s", events)
		if !regexp.MustCompile(`GPU idle: the task's processes use \d+% of ` + regexp.QuoteMeta(gpu)).MatchString(events) {
			t.Errorf("no GPU idle event from the driver's NVML attribution for %s", gpu)
		}
	}
}

// waitRealGPU waits for one healthy NVML-fingerprinted GPU and returns its
// UUID, logging what Nomad shows of it.
func (c *cluster) waitRealGPU() string {
	c.t.Helper()
	var id string
	testnomad.WaitFor(c.t, 90*time.Second, "a healthy NVML GPU on the node", func() (bool, string) {
		node, _, err := c.Client.Nodes().Info(c.NodeID, nil)
		if err != nil {
			return false, err.Error()
		}
		if node.NodeResources == nil {
			return false, "no node resources"
		}
		for _, d := range node.NodeResources.Devices {
			if d.Vendor != "nvidia" || d.Type != "gpu" {
				continue
			}
			for _, inst := range d.Instances {
				if inst.Healthy && strings.HasPrefix(inst.ID, "GPU-") {
					var attrs []string
					for k, v := range d.Attributes {
						attrs = append(attrs, k+"="+v.String())
					}
					c.t.Logf("Nomad shows nvidia/gpu/%s %s: %s", d.Name, inst.ID, strings.Join(attrs, " "))
					if v := d.Attributes["simulated"]; v != nil && v.BoolVal != nil && *v.BoolVal {
						c.t.Fatalf("the NVML backend's GPU says it is simulated")
					}
					id = inst.ID
					return true, ""
				}
			}
		}
		return false, fmt.Sprintf("devices %d", len(node.NodeResources.Devices))
	})
	return id
}

// waitRealUtil waits until the node's device stats show gpu's utilisation
// passing ok and returns it.
func (c *cluster) waitRealUtil(gpu string, ok func(int64) bool, what string, timeout time.Duration) int64 {
	c.t.Helper()
	var got int64
	var seen []string
	testnomad.WaitFor(c.t, timeout, fmt.Sprintf("GPU %s utilisation %s", gpu, what), func() (bool, string) {
		hs, err := c.Client.Nodes().Stats(c.NodeID, nil)
		if err != nil {
			return false, err.Error()
		}
		for _, g := range hs.DeviceStats {
			ds := g.InstanceStats[gpu]
			if ds == nil || ds.Stats == nil {
				continue
			}
			u := ds.Stats.Attributes["GPU utilization"]
			if u == nil || u.IntNumeratorVal == nil {
				return false, "no GPU utilization statistic"
			}
			got = *u.IntNumeratorVal
			seen = append(seen, strconv.FormatInt(got, 10))
			return ok(got), "samples " + strings.Join(seen, " ")
		}
		return false, "no stats for the GPU"
	})
	return got
}

// taskLog reads one of a task's log files.
func (c *cluster) taskLog(a *api.Allocation, task, stream string) string {
	r, err := c.Client.AllocFS().Cat(a, fmt.Sprintf("alloc/logs/%s.%s.0", task, stream), nil)
	if err != nil {
		return err.Error()
	}
	return readAll(r)
}

// taskEvents lists a task's events, one a line.
func (c *cluster) taskEvents(allocID, task string) string {
	a := c.alloc(allocID)
	var b strings.Builder
	if ts := a.TaskStates[task]; ts != nil {
		for _, e := range ts.Events {
			fmt.Fprintf(&b, "%s %s: %s\n", time.Unix(0, e.Time).UTC().Format("15:04:05.000"), e.Type, e.DisplayMessage)
		}
	}
	return b.String()
}

// linesWith keeps the lines of s that contain sub.
func linesWith(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
