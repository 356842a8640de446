// Command steward-gpu is Steward's GPU device plugin for Nomad clients,
// built on its own: it links the device plugin (devices/) and Nomad's
// device plugin SDK, and none of the controller, the simulator, the plots
// or a Consul client. Copy it into the client's plugin_dir and add a
// plugin "steward-gpu" block to the agent configuration (docs/reference/devices.md).
// The agent starts it with no arguments; "steward-gpu -version" prints its
// version.
package main

import (
	hclog "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/plugins/device"

	"github.com/gpu-steward/steward/devices"
	"github.com/gpu-steward/steward/internal/plugincmd"
)

func main() {
	plugincmd.Main(devices.PluginName, func(logger hclog.Logger) { device.Serve(devices.New(logger), logger) })
}
