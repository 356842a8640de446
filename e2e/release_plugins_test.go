package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// TestReleasePluginsLoad: the plugins as a user gets them. `make dist`'s
// script builds this platform's release (signed sums, the archive,
// install-plugins.sh), install-plugins.sh verifies it and installs the
// plugins into an empty plugin_dir, and a real Nomad agent started with
// that plugin_dir loads both: steward-exec detected and healthy and
// reporting the repository's VERSION, steward-gpu's simulated GPUs healthy
// on the node.
func TestReleasePluginsLoad(t *testing.T) {
	root := testnomad.RepoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		t.Fatalf("reading VERSION: %v", err)
	}
	version := strings.TrimSpace(string(b))
	rel := t.TempDir()
	dist := exec.Command(filepath.Join(root, "tools/dist/dist.sh"), version, rel, runtime.GOOS+"/"+runtime.GOARCH)
	dist.Dir = root
	// From the build cache that `make plugins` filled (no -trimpath), with
	// a key made for the build (no DIST_GPG_KEY from the environment).
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DIST_GPG_KEY=") && !strings.HasPrefix(kv, "GNUPGHOME=") {
			env = append(env, kv)
		}
	}
	dist.Env = append(env, "DIST_BUILD_FLAGS=")
	if out, err := dist.CombinedOutput(); err != nil {
		t.Fatalf("dist.sh: %v\n%s", err, out)
	}

	pluginDir := filepath.Join(t.TempDir(), "plugins")
	if out, err := exec.Command(filepath.Join(rel, "install-plugins.sh"), "-dir", pluginDir).CombinedOutput(); err != nil {
		t.Fatalf("install-plugins.sh -dir %s: %v\n%s", pluginDir, err, out)
	}
	// The agent takes its plugin_dir from STEWARD_PLUGIN_DIR: the
	// installed one, not bin/plugins.
	t.Setenv(testnomad.EnvPluginDir, pluginDir)
	a := testnomad.Start(t, testnomad.Options{
		Plugins: []testnomad.Plugin{
			{Name: "steward-gpu", Config: fmt.Sprintf(`    backend       = "sim"
    sim_count     = 2
    sim_state_dir = %q`, t.TempDir())},
			{Name: "steward-exec", Config: fmt.Sprintf(`    state_dir = %q`, t.TempDir())},
		},
	})
	if a.PluginDir != pluginDir {
		t.Fatalf("the agent's plugin_dir is %s, want the installed %s", a.PluginDir, pluginDir)
	}
	testnomad.WaitFor(t, 60*time.Second, "steward-exec healthy at version "+version+" and 2 healthy simulated GPUs", func() (bool, string) {
		node, _, err := a.Client.Nodes().Info(a.NodeID, nil)
		if err != nil {
			return false, err.Error()
		}
		d := node.Drivers["steward-exec"]
		if d == nil || !d.Detected || !d.Healthy {
			return false, fmt.Sprintf("steward-exec driver: %+v", d)
		}
		if v := node.Attributes["driver.steward-exec.version"]; v != version {
			return false, fmt.Sprintf("driver.steward-exec.version = %q", v)
		}
		if node.NodeResources == nil {
			return false, "no node resources yet"
		}
		for _, dev := range node.NodeResources.Devices {
			healthy := 0
			for _, inst := range dev.Instances {
				if inst.Healthy {
					healthy++
				}
			}
			if dev.Vendor == "nvidia" && dev.Type == "gpu" && healthy == 2 {
				return true, ""
			}
		}
		return false, fmt.Sprintf("devices: %d groups, none with 2 healthy nvidia/gpu", len(node.NodeResources.Devices))
	})
}
