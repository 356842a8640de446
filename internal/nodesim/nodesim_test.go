package nodesim

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/hashicorp/nomad/nomad/structs"

	"github.com/gpu-steward/steward/devices"
	"github.com/gpu-steward/steward/driver"
	"github.com/gpu-steward/steward/internal/testnomad"
)

// The node must look to the scheduler like one running Steward's plugins.
func TestMatchesStewardPlugins(t *testing.T) {
	tests := []struct{ name, got, want string }{
		{"vendor", GPUVendor, devices.Vendor},
		{"device type", GPUType, devices.DeviceType},
		{"driver version", gpuDriverVersion, devices.SimDriverVersion},
		{"stat GPU utilization", StatGPUUtilization, devices.StatGPUUtilization},
		{"stat memory utilization", StatMemoryUtilization, devices.StatMemoryUtilization},
		{"stat memory state", StatMemoryState, devices.StatMemoryState},
		{"stat power", StatPowerUsage, devices.StatPowerUsage},
		{"stat temperature", StatTemperature, devices.StatTemperature},
		{"driver name", stewardDriver, driver.PluginName},
		{"driver version attribute", stewardDriverVersion, driver.PluginVersion},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s: nodesim has %q, Steward %q", tc.name, tc.got, tc.want)
		}
	}
	attrs := newNodeTemplate(Config{}).deviceAttrs
	for _, a := range []string{devices.AttrMemory, devices.AttrPower, devices.AttrDriverVersion,
		devices.AttrComputeCapability, devices.AttrMIG, devices.AttrSimulated} {
		if attrs[a] == nil {
			t.Errorf("device attribute %q missing", a)
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
		check   func(Config) string
	}{
		{"no servers", Config{Nodes: 1}, "no servers", nil},
		{"no nodes", Config{Servers: []string{"x"}}, "Nodes must be positive", nil},
		{"negative GPUs", Config{Servers: []string{"x"}, Nodes: 1, GPUsPerNode: -1}, "GPUsPerNode", nil},
		{"defaults", Config{Servers: []string{"x"}, Nodes: 1}, "", func(c Config) string {
			if c.GPUsPerNode != 8 || c.NamePrefix != "sim" || c.Datacenter != "dc1" ||
				c.NodePool != "default" || c.Region != "global" || c.Logger == nil {
				return fmt.Sprintf("%+v", c)
			}
			return ""
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.setDefaults()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if bad := tc.check(tc.cfg); bad != "" {
				t.Errorf("unexpected defaults: %s", bad)
			}
		})
	}
}

// A node as registered: devices, drivers, attributes, class.
func TestBuildNode(t *testing.T) {
	cfg := Config{Servers: []string{"x"}, Nodes: 2, Meta: map[string]string{"steward.sim": "true"}}
	if err := cfg.setDefaults(); err != nil {
		t.Fatal(err)
	}
	f := &Fleet{cfg: cfg}
	tmpl := newNodeTemplate(cfg)
	ids := map[string]struct{}{}
	a, b := newNode(f, 0, tmpl, nil, ids), newNode(f, 1, tmpl, nil, ids)
	n := a.buildNode()
	if n.Name != "sim-0000" || b.name != "sim-0001" {
		t.Errorf("names %q, %q", n.Name, b.name)
	}
	if n.Status != structs.NodeStatusReady || n.SecretID == "" || n.ComputedClass == "" || n.Meta["steward.sim"] != "true" {
		t.Errorf("node: status %q, secret %q, class %q, meta %v", n.Status, n.SecretID, n.ComputedClass, n.Meta)
	}
	for _, k := range []string{"kernel.name", "cpu.arch", "os.name", "unique.hostname", "nomad.version", "driver.raw_exec", "driver.steward-exec"} {
		if n.Attributes[k] == "" {
			t.Errorf("attribute %s missing", k)
		}
	}
	for _, d := range []string{"raw_exec", "steward-exec"} {
		if di := n.Drivers[d]; di == nil || !di.Detected || !di.Healthy {
			t.Errorf("driver %s: %+v", d, di)
		}
	}
	res := n.NodeResources
	if res.Processors.Topology == nil || res.Cpu.CpuShares != nodeCores*nodeCoreMHz || res.Memory.MemoryMB != nodeMemoryMB {
		t.Errorf("resources: %+v", res)
	}
	if len(res.Devices) != 1 || len(res.Devices[0].Instances) != 8 || res.Devices[0].Name != GPUModel {
		t.Fatalf("devices: %+v", res.Devices)
	}
	seen := map[string]bool{}
	for _, id := range append(append([]string(nil), a.gpus...), b.gpus...) {
		if seen[id] || !strings.HasPrefix(id, "SIM-GPU-") {
			t.Errorf("GPU ID %q repeated or malformed", id)
		}
		seen[id] = true
	}
	// The template stays untouched.
	if tmpl.resources.Devices != nil || tmpl.attrs["unique.hostname"] != "" {
		t.Error("buildNode modified the shared template")
	}
}

func TestGPUStats(t *testing.T) {
	tests := []struct {
		util               int
		power, temp, memMB int64
	}{
		{0, 60, 30, 0},
		{50, 230, 52, 20480},
		{100, 400, 75, 40960},
	}
	for _, tc := range tests {
		s := gpuStats(tc.util, time.Now())
		a := s.Stats.Attributes
		if *s.Summary.IntNumeratorVal != int64(tc.util) || s.Summary.Unit != "%" ||
			*a[StatPowerUsage].IntNumeratorVal != tc.power || *a[StatTemperature].IntNumeratorVal != tc.temp ||
			*a[StatMemoryState].IntNumeratorVal != tc.memMB {
			t.Errorf("util %d: summary %v, power %d, temp %d, memory %d", tc.util, *s.Summary.IntNumeratorVal,
				*a[StatPowerUsage].IntNumeratorVal, *a[StatTemperature].IntNumeratorVal, *a[StatMemoryState].IntNumeratorVal)
		}
	}
}

func TestUtilisation(t *testing.T) {
	tests := []struct {
		name     string
		activity func(nodeID, gpuID string) (int, bool)
		want     []int
	}{
		{"default", nil, []int{busyUtil, 0}},
		{"activity", func(_, g string) (int, bool) { return 42, true }, []int{42, 42}},
		{"activity clamps", func(_, g string) (int, bool) { return 150, g == "g1" }, []int{busyUtil, 100}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := &node{f: &Fleet{cfg: Config{Activity: tc.activity}}, held: map[string]string{"g0": "a"}}
			got := n.utilisation([]string{"g0", "g1"})
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// startFleet starts a fleet against the agent, closed at the test's end.
func startFleet(t *testing.T, a *testnomad.Agent, cfg Config) *Fleet {
	t.Helper()
	cfg.Servers = []string{fmt.Sprintf("127.0.0.1:%d", a.Ports.RPC)}
	if cfg.Logger == nil {
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "nodesim", Level: hclog.Info, Output: testWriter{t}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("starting fleet: %v", err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// readySimNodes counts the ready nodes whose names start with prefix.
func readySimNodes(c *api.Client, prefix string) (int, error) {
	nodes, _, err := c.Nodes().List(nil)
	if err != nil {
		return 0, err
	}
	ready := 0
	for _, n := range nodes {
		if strings.HasPrefix(n.Name, prefix+"-") && n.Status == api.NodeStatusReady {
			ready++
		}
	}
	return ready, nil
}

func gpuJob(id string, count int) *api.Job {
	job := api.NewBatchJob(id, id, "global", 50)
	task := api.NewTask("work", "raw_exec").
		SetConfig("command", "/bin/false").
		Require(&api.Resources{
			CPU:      intPtr(100),
			MemoryMB: intPtr(64),
			Devices:  []*api.RequestedDevice{{Name: "gpu", Count: uint64Ptr(4)}},
		})
	tg := api.NewTaskGroup("g", count).AddTask(task)
	tg.RestartPolicy = &api.RestartPolicy{Attempts: intPtr(0), Mode: stringPtr("fail")}
	tg.ReschedulePolicy = &api.ReschedulePolicy{Attempts: intPtr(0), Unlimited: boolPtr(false)}
	job.Datacenters = []string{"dc1"}
	job.AddTaskGroup(tg)
	job.Constrain(api.NewConstraint("${meta.steward.sim}", "=", "true"))
	return job
}

func intPtr(i int) *int          { return &i }
func uint64Ptr(i uint64) *uint64 { return &i }
func stringPtr(s string) *string { return &s }
func boolPtr(b bool) *bool       { return &b }

// jobAllocs returns the job's allocations by client status.
func jobAllocs(t *testing.T, c *api.Client, jobID string) map[string][]*api.AllocationListStub {
	t.Helper()
	allocs, _, err := c.Jobs().Allocations(jobID, true, nil)
	if err != nil {
		t.Fatalf("listing allocations of %s: %v", jobID, err)
	}
	out := map[string][]*api.AllocationListStub{}
	for _, al := range allocs {
		out[al.ClientStatus] = append(out[al.ClientStatus], al)
	}
	return out
}

func statusSummary(m map[string][]*api.AllocationListStub) string {
	var parts []string
	for s, l := range m {
		parts = append(parts, fmt.Sprintf("%s=%d", s, len(l)))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// The full cycle against a real agent: registration, placement of GPU
// work, running, stats, signals, Finish, stop.
func TestFleetRunsGPUJobs(t *testing.T) {
	a := testnomad.Start(t, testnomad.Options{LogLevel: "INFO"})
	var sigMu sync.Mutex
	var signals []string
	f := startFleet(t, a, Config{
		Nodes:      4,
		NamePrefix: "gpusim",
		Meta:       map[string]string{"steward.sim": "true"},
		OnSignal: func(nodeID, allocID, task, signal string) {
			sigMu.Lock()
			signals = append(signals, allocID+"/"+task+"/"+signal)
			sigMu.Unlock()
		},
	})
	c := a.Client

	infos := f.Nodes()
	if len(infos) != 4 {
		t.Fatalf("Nodes() = %d nodes", len(infos))
	}
	byID := map[string]NodeInfo{}
	for _, ni := range infos {
		byID[ni.ID] = ni
	}

	testnomad.WaitFor(t, 20*time.Second, "simulated nodes ready", func() (bool, string) {
		n, err := readySimNodes(c, "gpusim")
		return n == 4, fmt.Sprintf("%d ready (%v)", n, err)
	})
	for _, ni := range infos {
		node, _, err := c.Nodes().Info(ni.ID, nil)
		if err != nil {
			t.Fatalf("node %s: %v", ni.Name, err)
		}
		var ids []string
		for _, d := range node.NodeResources.Devices {
			if d.Vendor == "nvidia" && d.Type == "gpu" && d.Name == GPUModel {
				for _, in := range d.Instances {
					if in.Healthy {
						ids = append(ids, in.ID)
					}
				}
			}
		}
		sort.Strings(ids)
		want := append([]string(nil), ni.GPUs...)
		sort.Strings(want)
		if fmt.Sprint(ids) != fmt.Sprint(want) {
			t.Errorf("node %s: server has GPUs %v, fleet %v", ni.Name, ids, want)
		}
		if node.Meta["steward.sim"] != "true" || node.Attributes["driver.steward-exec"] != "1" || node.Drivers["steward-exec"] == nil {
			t.Errorf("node %s: meta %v, attributes/drivers incomplete", ni.Name, node.Meta)
		}
	}

	// A node the server forgets registers again.
	purged := infos[3]
	if _, _, err := c.Nodes().Purge(purged.ID, nil); err != nil {
		t.Fatalf("purging node %s: %v", purged.Name, err)
	}
	testnomad.WaitFor(t, 20*time.Second, "purged node registered again", func() (bool, string) {
		node, _, err := c.Nodes().Info(purged.ID, nil)
		if err != nil {
			return false, err.Error()
		}
		return node.Status == api.NodeStatusReady, node.Status
	})

	job := gpuJob("gpus", 3)
	if _, _, err := c.Jobs().Register(job, nil); err != nil {
		t.Fatalf("registering job: %v", err)
	}
	var running []*api.AllocationListStub
	testnomad.WaitFor(t, 30*time.Second, "3 allocations running", func() (bool, string) {
		m := jobAllocs(t, c, "gpus")
		running = m[api.AllocClientStatusRunning]
		return len(running) == 3, statusSummary(m)
	})

	// Each runs on a simulated node with 4 of its GPUs; the node's stats
	// show them busy, the others idle.
	first := running[0]
	alloc, _, err := c.Allocations().Info(first.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	ni, ok := byID[alloc.NodeID]
	if !ok {
		t.Fatalf("allocation on node %s, not a simulated one", alloc.NodeID)
	}
	held := map[string]bool{}
	for _, tr := range alloc.AllocatedResources.Tasks {
		for _, d := range tr.Devices {
			for _, id := range d.DeviceIDs {
				held[id] = true
			}
		}
	}
	if len(held) != 4 {
		t.Fatalf("allocation holds GPUs %v, want 4", held)
	}
	if ts := alloc.TaskStates["work"]; ts == nil || ts.State != "running" || ts.StartedAt.IsZero() {
		t.Errorf("task state %+v", ts)
	}
	hs, err := c.Nodes().Stats(ni.ID, nil)
	if err != nil {
		t.Fatalf("node stats of %s: %v", ni.Name, err)
	}
	if len(hs.DeviceStats) != 1 {
		t.Fatalf("device stats: %+v", hs.DeviceStats)
	}
	busy := 0
	for id, ds := range hs.DeviceStats[0].InstanceStats {
		want := int64(0)
		if held[id] {
			want = busyUtil
		}
		if ds.Summary == nil || ds.Summary.IntNumeratorVal == nil || *ds.Summary.IntNumeratorVal < want {
			t.Errorf("GPU %s: summary %+v, want %d", id, ds.Summary, want)
		}
		if held[id] {
			busy++
		}
	}
	if busy != 4 || len(hs.DeviceStats[0].InstanceStats) != 8 {
		t.Errorf("stats for %d GPUs, %d of the allocation's", len(hs.DeviceStats[0].InstanceStats), busy)
	}

	// Allocation stats carry the allocation's GPUs.
	as, err := c.Allocations().Stats(alloc, nil)
	if err != nil {
		t.Fatalf("allocation stats: %v", err)
	}
	if as.ResourceUsage == nil || len(as.ResourceUsage.DeviceStats) != 1 || len(as.ResourceUsage.DeviceStats[0].InstanceStats) != 4 {
		t.Errorf("allocation stats: %+v", as.ResourceUsage)
	}

	// Signals are recorded.
	if err := c.Allocations().Signal(alloc, nil, "work", "SIGUSR1"); err != nil {
		t.Fatalf("signal: %v", err)
	}
	sigMu.Lock()
	gotSig := fmt.Sprint(signals)
	sigMu.Unlock()
	if want := alloc.ID + "/work/SIGUSR1"; !strings.Contains(gotSig, want) {
		t.Errorf("signals %s, want %s", gotSig, want)
	}

	// Finish one: complete, its GPUs idle again.
	if err := f.Finish(alloc.ID, false); err != nil {
		t.Fatal(err)
	}
	if err := f.Finish(alloc.ID, false); err == nil {
		t.Error("finishing a finished allocation succeeded")
	}
	testnomad.WaitFor(t, 15*time.Second, "finished allocation complete", func() (bool, string) {
		al, _, err := c.Allocations().Info(alloc.ID, nil)
		if err != nil {
			return false, err.Error()
		}
		ts := al.TaskStates["work"]
		return al.ClientStatus == api.AllocClientStatusComplete && ts != nil && ts.State == "dead" && !ts.Failed,
			al.ClientStatus
	})
	hs, err = c.Nodes().Stats(ni.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	for id := range held {
		if v := *hs.DeviceStats[0].InstanceStats[id].Summary.IntNumeratorVal; v != 0 && f.ownerHolds(ni.ID, id) == "" {
			t.Errorf("GPU %s of the finished allocation at %d%%", id, v)
		}
	}

	// Fail another.
	if err := f.Finish(running[1].ID, true); err != nil {
		t.Fatal(err)
	}

	// Stop the job: the rest complete.
	if _, _, err := c.Jobs().Deregister("gpus", false, nil); err != nil {
		t.Fatal(err)
	}
	testnomad.WaitFor(t, 20*time.Second, "job's allocations terminal", func() (bool, string) {
		m := jobAllocs(t, c, "gpus")
		return len(m[api.AllocClientStatusRunning]) == 0 && len(m[api.AllocClientStatusPending]) == 0 &&
			len(m[api.AllocClientStatusFailed]) == 1 && len(m[api.AllocClientStatusComplete]) == 2, statusSummary(m)
	})
	// A service job's deployment succeeds: its allocations are reported
	// healthy after min_healthy_time.
	svc := api.NewServiceJob("svc", "svc", "global", 50)
	svc.Datacenters = []string{"dc1"}
	svcGroup := api.NewTaskGroup("g", 2).AddTask(api.NewTask("work", "raw_exec").
		SetConfig("command", "/bin/false").
		Require(&api.Resources{CPU: intPtr(100), MemoryMB: intPtr(64),
			Devices: []*api.RequestedDevice{{Name: "gpu", Count: uint64Ptr(1)}}}))
	minHealthy, deadline, progress := time.Second, 20*time.Second, 30*time.Second
	svcGroup.Update = &api.UpdateStrategy{MinHealthyTime: &minHealthy, HealthyDeadline: &deadline, ProgressDeadline: &progress}
	svc.AddTaskGroup(svcGroup)
	svc.Constrain(api.NewConstraint("${meta.steward.sim}", "=", "true"))
	if _, _, err := c.Jobs().Register(svc, nil); err != nil {
		t.Fatalf("registering service job: %v", err)
	}
	testnomad.WaitFor(t, 30*time.Second, "service deployment successful", func() (bool, string) {
		d, _, err := c.Jobs().LatestDeployment("svc", nil)
		if err != nil || d == nil {
			return false, fmt.Sprintf("no deployment (%v)", err)
		}
		return d.Status == api.DeploymentStatusSuccessful, d.Status + ": " + d.StatusDescription
	})
	if _, _, err := c.Jobs().Deregister("svc", false, nil); err != nil {
		t.Fatal(err)
	}
	testnomad.WaitFor(t, 20*time.Second, "service allocations stopped", func() (bool, string) {
		m := jobAllocs(t, c, "svc")
		return len(m[api.AllocClientStatusRunning]) == 0 && len(m[api.AllocClientStatusComplete]) == 2, statusSummary(m)
	})

	s := f.Stats()
	t.Logf("fleet stats: %+v", s)
	if s.AllocsRunning != 0 || s.StatsServed < 3 || s.Signals != 1 || s.AllocUpdates < 6 || s.Registrations != 5 {
		t.Errorf("fleet stats %+v", s)
	}
}

// ownerHolds returns the allocation holding a GPU, for the test.
func (f *Fleet) ownerHolds(nodeID, gpu string) string {
	n := f.byID[nodeID]
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.held[gpu]
}

// At scale: 200 nodes register and go ready, each on a connection of its
// own (testnomad lifts the agent's limit of 100 RPC connections per
// client address).
func TestFleetScale(t *testing.T) {
	const nodes = 200
	a := testnomad.Start(t, testnomad.Options{LogLevel: "WARN"})

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	goroutines := runtime.NumGoroutine()

	start := time.Now()
	f := startFleet(t, a, Config{Nodes: nodes, NamePrefix: "scale"})
	registered := time.Since(start)
	testnomad.WaitFor(t, 30*time.Second, "200 nodes ready", func() (bool, string) {
		n, err := readySimNodes(a.Client, "scale")
		return n == nodes, fmt.Sprintf("%d ready (%v)", n, err)
	})
	ready := time.Since(start)

	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	t.Logf("%d nodes: Start returned after %v, all ready after %v; %.1f KiB heap and %.1f goroutines per node",
		nodes, registered.Round(time.Millisecond), ready.Round(time.Millisecond),
		float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/1024/nodes,
		float64(runtime.NumGoroutine()-goroutines)/nodes)

	// They stay ready past a heartbeat TTL.
	time.Sleep(12 * time.Second)
	if n, err := readySimNodes(a.Client, "scale"); err != nil || n != nodes {
		t.Errorf("after 12s, %d nodes ready (%v)", n, err)
	}
	s := f.Stats()
	t.Logf("fleet stats: %+v", s)
	if s.Heartbeats < nodes {
		t.Errorf("%d heartbeats, want at least one per node", s.Heartbeats)
	}
}
