// Package plugincmd is the main function of Steward's plugin binaries
// (cmd/steward-gpu, cmd/steward-exec): serve the plugin to the Nomad agent
// that started it, or print the version when asked.
//
// It imports none of Nomad's plugin packages itself: each binary serves
// through the one SDK package its plugin needs (plugins/device or
// plugins/drivers). Nomad's plugins.Serve imports both, and
// plugins/drivers links nomad/structs and with it the Consul API client,
// which the device plugin has no use for.
package plugincmd

import (
	"fmt"
	"io"
	"os"
	"runtime"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/gpu-steward/steward/devices"
	"github.com/gpu-steward/steward/internal/version"
)

// Main serves the plugin with serve, as Nomad's plugins.Serve would, with
// the logger it would use. Nomad starts a plugin with no arguments (its
// handshake is in the environment); "-version" prints the plugin's
// version instead.
func Main(name string, serve func(hclog.Logger)) {
	if len(os.Args) > 1 {
		os.Exit(run(os.Stdout, os.Stderr, name, os.Args[1:]))
	}
	serve(hclog.New(&hclog.LoggerOptions{Level: hclog.Trace, JSONFormat: true}))
}

func run(stdout, stderr io.Writer, name string, args []string) int {
	switch args[0] {
	case "-version", "--version", "-v", "version":
		nvml := "built in"
		if !devices.NVMLBuiltIn {
			nvml = "not in this build (built without cgo): real GPUs cannot be seen, simulated ones work"
		}
		fmt.Fprintf(stdout, "%s %s (Steward %s)\nBuilt against Nomad %s\nNVML: %s\nGo %s %s/%s\n", name, version.Plugin(), version.String(),
			version.Nomad(), nvml, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return 0
	}
	fmt.Fprintf(stderr, "%s is a Nomad plugin: put it in a Nomad client's plugin_dir and add a plugin %q block to the agent's configuration; the agent starts it. Arguments: -version\n", name, name)
	return 1
}
