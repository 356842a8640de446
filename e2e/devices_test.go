// Package e2e holds Steward's tests against a real Nomad agent (bin/nomad,
// built by `make nomad`) with the plugins in bin/plugins (`make plugins`).
package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// TestSimGPUsOnRealAgent loads the steward-gpu plugin with 4 simulated GPUs
// into a real agent, runs jobs/sim-burst.nomad.hcl on one of them, and
// reads the utilisation the job reports (80%, then 5%) back from the
// allocation's stats endpoint, the way Steward's controller does.
func TestSimGPUsOnRealAgent(t *testing.T) {
	t.Parallel()
	stateDir := t.TempDir()
	a := testnomad.Start(t, testnomad.Options{
		Plugins: []testnomad.Plugin{{
			Name: "steward-gpu",
			Config: fmt.Sprintf(`    backend       = "sim"
    sim_count     = 4
    sim_state_dir = %q`, stateDir),
		}},
	})

	// The node lists 4 healthy simulated nvidia/gpu devices.
	var gpus *api.NodeDeviceResource
	testnomad.WaitFor(t, 60*time.Second, "4 healthy nvidia/gpu devices on the node", func() (bool, string) {
		node, _, err := a.Client.Nodes().Info(a.NodeID, nil)
		if err != nil {
			return false, err.Error()
		}
		if node.NodeResources == nil || len(node.NodeResources.Devices) == 0 {
			return false, "node reports no devices (is the plugin loaded? see the agent log)"
		}
		var seen []string
		for _, d := range node.NodeResources.Devices {
			healthy := 0
			for _, inst := range d.Instances {
				if inst.Healthy {
					healthy++
				}
			}
			seen = append(seen, fmt.Sprintf("%s/%s/%s: %d of %d healthy", d.Vendor, d.Type, d.Name, healthy, len(d.Instances)))
			if d.Vendor == "nvidia" && d.Type == "gpu" && len(d.Instances) == 4 && healthy == 4 {
				gpus = d
				return true, ""
			}
		}
		return false, strings.Join(seen, "; ")
	})
	if gpus.Name != "Simulated A100" {
		t.Errorf("device name %q, want Simulated A100", gpus.Name)
	}
	if attr := gpus.Attributes["simulated"]; attr == nil || attr.BoolVal == nil || !*attr.BoolVal {
		t.Errorf("simulated attribute = %v, want true", attr)
	}
	if attr := gpus.Attributes["memory"]; attr == nil || attr.IntVal == nil || *attr.IntVal != 40960 || attr.Unit != "MiB" {
		t.Errorf("memory attribute = %v, want 40960 MiB", attr)
	}
	for _, inst := range gpus.Instances {
		if !strings.HasPrefix(inst.ID, "SIM-GPU-") {
			t.Errorf("device ID %q does not say it is simulated", inst.ID)
		}
	}

	// A job asking for one GPU, busy (80%) for 15s, then idle (5%).
	jobFile := filepath.Join(testnomad.RepoRoot(t), "jobs", "sim-burst.nomad.hcl")
	job := a.RegisterJobFile(t, jobFile, map[string]string{
		"busy_seconds": "15",
		"idle_seconds": "600",
	})
	t.Cleanup(func() { _, _, _ = a.Client.Jobs().Deregister(*job.ID, true, nil) })
	alloc := a.WaitForRunningAlloc(t, *job.ID, 60*time.Second)

	task := alloc.AllocatedResources.Tasks["burst"]
	if task == nil || len(task.Devices) != 1 || len(task.Devices[0].DeviceIDs) != 1 {
		t.Fatalf("allocation %s: want exactly one GPU allocated to task burst, got %#v", alloc.ID, task)
	}
	gpuID := task.Devices[0].DeviceIDs[0]
	t.Logf("allocation %s got GPU %s", alloc.ID, gpuID)

	waitUtilisation(t, a, alloc, gpuID, 80, 45*time.Second)
	waitUtilisation(t, a, alloc, gpuID, 5, 60*time.Second)

	// The task was told its GPU and its activity file by Reserve.
	out, err := readTaskStdout(a, alloc, "burst")
	if err != nil {
		t.Fatalf("reading the task's stdout: %v", err)
	}
	wantFile := simActivityFile(t, stateDir, gpuID)
	if !strings.Contains(out, "GPUs: "+gpuID) || !strings.Contains(out, "activity files: "+wantFile) {
		t.Errorf("task output does not show NVIDIA_VISIBLE_DEVICES=%s and activity file %s:\n%s", gpuID, wantFile, out)
	}

	logPluginCPU(t, a)
}

// waitUtilisation polls GET /v1/client/allocation/:id/stats until the
// GPU's utilisation (the device summary) is want.
func waitUtilisation(t *testing.T, a *testnomad.Agent, alloc *api.Allocation, gpuID string, want int64, timeout time.Duration) {
	t.Helper()
	start := time.Now()
	testnomad.WaitFor(t, timeout, fmt.Sprintf("utilisation %d%% of GPU %s in the stats of allocation %s", want, gpuID, alloc.ID), func() (bool, string) {
		usage, err := a.Client.Allocations().Stats(alloc, nil)
		if err != nil {
			return false, fmt.Sprintf("reading allocation stats: %v", err)
		}
		if usage.ResourceUsage == nil || len(usage.ResourceUsage.DeviceStats) == 0 {
			return false, "allocation stats have no device stats"
		}
		for _, g := range usage.ResourceUsage.DeviceStats {
			ds := g.InstanceStats[gpuID]
			if g.Vendor != "nvidia" || g.Type != "gpu" || ds == nil {
				continue
			}
			if ds.Summary == nil || ds.Summary.IntNumeratorVal == nil {
				return false, fmt.Sprintf("GPU %s has no utilisation summary: %#v", gpuID, ds.Summary)
			}
			got := *ds.Summary.IntNumeratorVal
			util := ds.Stats.Attributes["GPU utilization"]
			if util == nil || util.IntNumeratorVal == nil || *util.IntNumeratorVal != got || ds.Summary.Unit != "%" {
				return false, fmt.Sprintf("summary %d%s disagrees with the GPU utilization statistic %#v", got, ds.Summary.Unit, util)
			}
			if got == want {
				t.Logf("GPU %s at %d%% after %v (summary %d%s, power %s, temperature %s)", gpuID, got,
					time.Since(start).Round(time.Millisecond), got, ds.Summary.Unit,
					statText(ds.Stats.Attributes["Power usage"]), statText(ds.Stats.Attributes["Temperature"]))
				return true, ""
			}
			return false, fmt.Sprintf("GPU %s at %d%%", gpuID, got)
		}
		return false, fmt.Sprintf("no stats for GPU %s in %d device groups", gpuID, len(usage.ResourceUsage.DeviceStats))
	})
}

func statText(v *api.StatValue) string {
	switch {
	case v == nil:
		return "missing"
	case v.IntNumeratorVal != nil && v.IntDenominatorVal != nil:
		return fmt.Sprintf("%d/%d %s", *v.IntNumeratorVal, *v.IntDenominatorVal, v.Unit)
	case v.IntNumeratorVal != nil:
		return fmt.Sprintf("%d %s", *v.IntNumeratorVal, v.Unit)
	case v.StringVal != nil:
		return *v.StringVal
	}
	return "?"
}

func readTaskStdout(a *testnomad.Agent, alloc *api.Allocation, task string) (string, error) {
	rc, err := a.Client.AllocFS().Cat(alloc, fmt.Sprintf("alloc/logs/%s.stdout.0", task), nil)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := rc.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return b.String(), nil
}

// logPluginCPU logs the CPU time the plugin process used over its life
// (stats every second since the node started), from /proc.
func logPluginCPU(t *testing.T, a *testnomad.Agent) {
	t.Helper()
	pid, ok := findChild(a.Pid(), "steward-gpu")
	if !ok {
		t.Log("plugin process not found; CPU use not measured")
		return
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Logf("reading plugin CPU time: %v", err)
		return
	}
	// Fields after the command name: state is 3rd, utime 14th, stime
	// 15th, starttime 22nd (clock ticks; 100 per second on Linux).
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	start, _ := strconv.ParseInt(fields[19], 10, 64)
	uptimeRaw, _ := os.ReadFile("/proc/uptime")
	uptime, _ := strconv.ParseFloat(strings.Fields(string(uptimeRaw))[0], 64)
	life := uptime - float64(start)/100
	cpu := float64(utime+stime) / 100
	t.Logf("steward-gpu plugin (pid %d): %.2fs CPU in %.0fs = %.2f%% of one core", pid, cpu, life, 100*cpu/life)
}

// findChild finds a direct child process of parent by command name.
func findChild(parent int, comm string) (int, bool) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(stat)
		lp, rp := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if lp < 0 || rp < lp || s[lp+1:rp] != comm {
			continue
		}
		fields := strings.Fields(s[rp+2:])
		if len(fields) > 1 && fields[1] == strconv.Itoa(parent) {
			return pid, true
		}
	}
	return 0, false
}

// TestNVMLBackendOnRealAgent loads the plugin with its default NVML
// backend. Without an NVIDIA driver (as on CI) the node must come up with
// no GPUs and the agent log must say why in exactly one line; with a
// driver the node must list the GPUs.
func TestNVMLBackendOnRealAgent(t *testing.T) {
	t.Parallel()
	a := testnomad.Start(t, testnomad.Options{
		Plugins: []testnomad.Plugin{{Name: "steward-gpu"}},
	})
	const noNVML = "NVML is unavailable, reporting no GPUs"
	testnomad.WaitFor(t, 30*time.Second, "the plugin to fingerprint or to report that NVML is unavailable", func() (bool, string) {
		if a.LogContains(noNVML) || a.LogContains("GPUs fingerprinted") {
			return true, ""
		}
		return false, "no word from steward-gpu in the agent log yet"
	})

	if !a.LogContains(noNVML) {
		node := a.Node(t)
		n := 0
		for _, d := range node.NodeResources.Devices {
			if d.Vendor == "nvidia" && d.Type == "gpu" {
				n += len(d.Instances)
			}
		}
		t.Logf("NVIDIA driver present: the node lists %d GPUs", n)
		if n == 0 {
			t.Errorf("NVML initialised but the node lists no GPUs:\n%s", a.LogTail(40))
		}
		return
	}

	// Give the agent time to (wrongly) log it again.
	time.Sleep(3 * time.Second)
	var lines []string
	for _, line := range strings.Split(a.LogTail(100000), "\n") {
		if strings.Contains(line, "steward-gpu") && strings.Contains(line, "NVML") {
			lines = append(lines, line)
		}
	}
	if len(lines) != 1 {
		t.Errorf("want one log line about NVML, got %d:\n%s", len(lines), strings.Join(lines, "\n"))
	} else {
		t.Logf("agent log: %s", strings.TrimSpace(lines[0]))
	}
	node := a.Node(t)
	if node.Status != api.NodeStatusReady {
		t.Errorf("node is %s, want ready", node.Status)
	}
	for _, d := range node.NodeResources.Devices {
		if d.Vendor == "nvidia" {
			t.Errorf("node lists %s/%s/%s without a driver", d.Vendor, d.Type, d.Name)
		}
	}
}
