package devices

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func simPlugin(t *testing.T, extra map[string]interface{}) (*Plugin, string) {
	t.Helper()
	dir := t.TempDir()
	values := map[string]interface{}{"backend": "sim", "sim_state_dir": dir}
	for k, v := range extra {
		values[k] = v
	}
	p, _ := newTestPlugin(t, nil, values)
	return p, dir
}

func TestSimFingerprint(t *testing.T) {
	p, dir := simPlugin(t, nil)
	ch, err := p.Fingerprint(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	f, _ := nextFingerprint(t, ch)
	if len(f.Devices) != 1 {
		t.Fatalf("want 1 group, got %d", len(f.Devices))
	}
	g := f.Devices[0]
	if g.Vendor != "nvidia" || g.Type != "gpu" || g.Name != "Simulated A100" {
		t.Errorf("group %s/%s/%s, want nvidia/gpu/Simulated A100", g.Vendor, g.Type, g.Name)
	}
	if len(g.Devices) != 4 {
		t.Fatalf("default sim_count: want 4 GPUs, got %d", len(g.Devices))
	}
	for i, d := range g.Devices {
		if want := SimUUID(dir, i); d.ID != want || !d.Healthy {
			t.Errorf("GPU %d: %s healthy=%t, want %s healthy", i, d.ID, d.Healthy, want)
		}
		if !strings.HasPrefix(d.ID, "SIM-GPU-") || !strings.HasSuffix(d.ID, "-"+string(rune('0'+i))) {
			t.Errorf("GPU %d: ID %q is not SIM-GPU-<node>-<i>", i, d.ID)
		}
		// A private dir per GPU; its activity files come with Reserve.
		info, err := os.Lstat(filepath.Join(dir, d.ID))
		if err != nil || !info.IsDir() || info.Mode().Perm() != 0o711 {
			t.Errorf("activity dir of %s: %v %v, want a dir with mode 0711", d.ID, info, err)
		}
	}
	for k, want := range map[string]string{AttrSimulated: "true", AttrMemory: "40960MiB", AttrDriverVersion: "simulated", AttrMIG: "false"} {
		if got := g.Attributes[k].GoString(); got != want {
			t.Errorf("attribute %s = %s, want %s", k, got, want)
		}
	}
	// The six nomad-device-nvidia also fingerprints, as an A100 has them.
	checkAttrs(t, g, stockAttrs)
}

func TestSimOptions(t *testing.T) {
	dir := t.TempDir()
	ignored := SimUUID(dir, 1)
	p, _ := newTestPlugin(t, nil, map[string]interface{}{
		"backend":         "sim",
		"sim_state_dir":   dir,
		"sim_count":       3,
		"sim_model":       "Simulated H100",
		"sim_memory_mib":  81920,
		"ignored_gpu_ids": []interface{}{ignored},
	})
	ch, _ := p.Fingerprint(testContext(t))
	f, _ := nextFingerprint(t, ch)
	g := f.Devices[0]
	if g.Name != "Simulated H100" || len(g.Devices) != 2 || g.Attributes[AttrMemory].GoString() != "81920MiB" {
		t.Fatalf("group %q with %d GPUs, memory %s: want Simulated H100, 2 GPUs, 81920MiB", g.Name, len(g.Devices), g.Attributes[AttrMemory].GoString())
	}
	if _, ok := devicesByID(f.Devices)[ignored]; ok {
		t.Error("ignored simulated GPU was fingerprinted")
	}
}

func TestSimActivityDrivesStats(t *testing.T) {
	p, dir := simPlugin(t, nil)
	ch, _ := p.Fingerprint(testContext(t))
	nextFingerprint(t, ch)
	ids := []string{SimUUID(dir, 2), SimUUID(dir, 0)}

	// A stale value from an earlier allocation is not carried over:
	// Reserve gives a new file, and removes the old one.
	old, err := p.Reserve(ids[:1])
	if err != nil {
		t.Fatal(err)
	}
	oldFile := old.Envs[EnvSimActivityFile]
	if err := os.WriteFile(oldFile, []byte("99\n"), 0o666); err != nil {
		t.Fatal(err)
	}
	res, err := p.Reserve(ids)
	if err != nil {
		t.Fatal(err)
	}
	files := strings.Split(res.Envs[EnvSimActivityFiles], ",")
	if len(files) != 2 || files[0] == oldFile {
		t.Fatalf("activity files %q after a reservation that had %s", files, oldFile)
	}
	if _, err := os.Lstat(oldFile); !os.IsNotExist(err) {
		t.Errorf("the previous reservation's file %s is still there (%v)", oldFile, err)
	}
	for i, f := range files {
		if filepath.Dir(f) != filepath.Join(dir, ids[i]) || !strings.HasPrefix(filepath.Base(f), SimActivityFileName+"-") {
			t.Errorf("activity file %s: want %s/%s-<time>-<random>", f, filepath.Join(dir, ids[i]), SimActivityFileName)
		}
	}
	wantEnv := map[string]string{
		"NVIDIA_VISIBLE_DEVICES":     ids[0] + "," + ids[1],
		"CUDA_VISIBLE_DEVICES":       ids[0] + "," + ids[1],
		"STEWARD_SIM_ACTIVITY_FILE":  files[0],
		"STEWARD_SIM_ACTIVITY_FILES": files[0] + "," + files[1],
		"STEWARD_SIM_ACTIVITY_DIR":   filepath.Join(dir, ids[0]),
	}
	for k, v := range wantEnv {
		if res.Envs[k] != v {
			t.Errorf("env %s = %q, want %q", k, res.Envs[k], v)
		}
	}
	if len(res.Mounts) != 2 || res.Mounts[0].HostPath != filepath.Join(dir, ids[0]) || res.Mounts[0].TaskPath != res.Mounts[0].HostPath || res.Mounts[0].ReadOnly {
		t.Errorf("mounts %#v: want each GPU's activity dir, read-write, at the same path", res.Mounts)
	}
	for _, f := range files {
		info, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm() != 0o622 {
			t.Errorf("%s mode %v, want writable by any task user, readable only by the plugin's", f, info.Mode().Perm())
		}
	}

	stats := mustStats(t, p)
	util := func(id string) int64 {
		s := nextStats(t, stats)
		return statInt(t, s.Groups[0].InstanceStats[id], StatGPUUtilization)
	}
	if got := util(ids[0]); got != 0 {
		t.Errorf("after Reserve utilisation = %d, want 0", got)
	}

	// The task writes what a shell script would.
	write := func(f, content string) {
		t.Helper()
		if err := os.WriteFile(f, []byte(content), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	write(files[0], "80\n")
	waitUtil(t, util, ids[0], 80)
	s := nextStats(t, stats)
	ds := s.Groups[0].InstanceStats[ids[0]]
	if ds.Summary.IntNumeratorVal == nil || *ds.Summary.IntNumeratorVal != 80 {
		t.Errorf("summary %#v, want 80", ds.Summary)
	}
	if statInt(t, ds, StatPowerUsage) <= 60 || statInt(t, ds, StatTemperature) <= 30 {
		t.Errorf("busy GPU should draw more power and run warmer: %s", formatStats(ds))
	}

	// Utilisation plus memory used.
	write(files[0], "5 12000")
	waitUtil(t, util, ids[0], 5)
	s = nextStats(t, stats)
	if got := statInt(t, s.Groups[0].InstanceStats[ids[0]], StatMemoryState); got != 12000 {
		t.Errorf("memory used %d, want 12000", got)
	}

	// Half-written or garbage content keeps the last value.
	write(files[0], "")
	if got := util(ids[0]); got != 5 {
		t.Errorf("empty file: utilisation %d, want the last value 5", got)
	}
	write(files[0], "busy")
	if got := util(ids[0]); got != 5 {
		t.Errorf("invalid content: utilisation %d, want the last value 5", got)
	}
	// Out of range is clamped; decimals are rounded.
	write(files[0], "250")
	waitUtil(t, util, ids[0], 100)
	write(files[0], "42.6")
	waitUtil(t, util, ids[0], 43)
	// A removed file reads as idle.
	if err := os.Remove(files[0]); err != nil {
		t.Fatal(err)
	}
	waitUtil(t, util, ids[0], 0)

	// Only this GPU changed.
	if got := util(SimUUID(dir, 1)); got != 0 {
		t.Errorf("untouched GPU utilisation %d", got)
	}
}

func waitUtil(t *testing.T, util func(string) int64, id string, want int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	var got int64
	for time.Now().Before(deadline) {
		if got = util(id); got == want {
			return
		}
	}
	t.Fatalf("utilisation of %s = %d, want %d", id, got, want)
}

func TestSimReserveUnknown(t *testing.T) {
	p, _ := simPlugin(t, nil)
	if _, err := p.Reserve([]string{"SIM-GPU-nope-9"}); err == nil || !strings.Contains(err.Error(), "unknown GPU IDs") {
		t.Errorf("err = %v", err)
	}
	res, err := p.Reserve(nil)
	if err != nil || len(res.Envs) != 0 {
		t.Errorf("empty reservation: %#v %v", res, err)
	}
}

func TestSimUUIDStable(t *testing.T) {
	if first, again := SimUUID("/a", 0), SimUUID("/a", 0); first != again {
		t.Error("UUID not stable")
	}
	if SimUUID("/a", 0) == SimUUID("/b", 0) {
		t.Error("agents with different state dirs share UUIDs")
	}
}

func TestDisabled(t *testing.T) {
	p, logs := newTestPlugin(t, nil, map[string]interface{}{"enabled": false, "backend": "sim"})
	ch, err := p.Fingerprint(testContext(t))
	if err != nil {
		t.Fatalf("Fingerprint: %v", err)
	}
	if f, ok := nextFingerprint(t, ch); ok {
		t.Errorf("disabled plugin fingerprinted %#v", f)
	}
	sch, err := p.Stats(testContext(t), time.Second)
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	if _, ok := <-sch; ok {
		t.Error("disabled plugin sent stats")
	}
	if _, err := p.Reserve([]string{"x"}); err == nil || !strings.Contains(err.Error(), "plugin disabled (enabled = false)") {
		t.Errorf("Reserve err = %v", err)
	}
	if n := len(logs.lines("plugin disabled by its configuration")); n != 1 {
		t.Errorf("want one log line saying the plugin is disabled, got %d:\n%s", n, logs)
	}
}

func TestParseActivity(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want simActivity
		ok   bool
	}{
		{"80", simActivity{util: 80}, true},
		{" 80\n", simActivity{util: 80}, true},
		{"80 1024", simActivity{util: 80, memUsed: 1024}, true},
		{"-3", simActivity{util: 0}, true},
		{"101", simActivity{util: 100}, true},
		{"0.4", simActivity{util: 0}, true},
		{"", simActivity{}, false},
		{"NaN", simActivity{}, false},
		{"x", simActivity{}, false},
		{"80 lots", simActivity{}, false},
	} {
		got, ok := parseActivity([]byte(tc.in))
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("parseActivity(%q) = %+v, %t; want %+v, %t", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// TestSimMIG: sim_mig_profile splits each simulated GPU into MIG-shaped
// devices, as a GPU in MIG mode shows only its instances: one group
// "<model> MIG <profile>" with mig = true and the profile's memory, each
// instance with its own activity dir (the simulator reports utilisation
// per instance, which NVML does not for real MIG devices).
func TestSimMIG(t *testing.T) {
	p, dir := simPlugin(t, map[string]interface{}{"sim_count": 2, "sim_mig_profile": "1g.10gb", "sim_mig_count": 7})
	ch, err := p.Fingerprint(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	f, _ := nextFingerprint(t, ch)
	if len(f.Devices) != 1 {
		t.Fatalf("want 1 group (the MIG instances), got %d", len(f.Devices))
	}
	g := f.Devices[0]
	if g.Name != "Simulated A100 MIG 1g.10gb" || len(g.Devices) != 14 {
		t.Fatalf("group %q with %d devices, want Simulated A100 MIG 1g.10gb with 14", g.Name, len(g.Devices))
	}
	for k, want := range map[string]string{AttrMIG: "true", AttrMemory: "10240MiB", AttrSimulated: "true"} {
		if got := g.Attributes[k].GoString(); got != want {
			t.Errorf("attribute %s = %s, want %s", k, got, want)
		}
	}
	for _, d := range g.Devices {
		if !strings.HasPrefix(d.ID, "MIG-") {
			t.Errorf("instance ID %q, want MIG-…", d.ID)
		}
		if info, err := os.Lstat(filepath.Join(dir, d.ID)); err != nil || !info.IsDir() {
			t.Errorf("no activity dir for %s: %v", d.ID, err)
		}
	}
}

// sim_task_mounts = false: reservations carry the activity files'
// variables but no mounts (a container keeping its host volumes: Nomad
// replaces a task's volume mounts with a device plugin's mounts).
func TestSimReserveWithoutTaskMounts(t *testing.T) {
	for _, mounts := range []bool{true, false} {
		t.Run(fmt.Sprint(mounts), func(t *testing.T) {
			dir := t.TempDir()
			p, _ := newTestPlugin(t, nil, map[string]interface{}{"backend": "sim", "sim_state_dir": dir, "sim_count": 1, "sim_task_mounts": mounts})
			ch, _ := p.Fingerprint(testContext(t))
			nextFingerprint(t, ch)
			res, err := p.Reserve([]string{SimUUID(dir, 0)})
			if err != nil {
				t.Fatal(err)
			}
			if got := len(res.Mounts) > 0; got != mounts {
				t.Errorf("mounts %v, want %v", res.Mounts, mounts)
			}
			if res.Envs[EnvSimActivityFiles] == "" {
				t.Error("no activity files")
			}
		})
	}
}
