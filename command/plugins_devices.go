package command

import (
	"github.com/hashicorp/nomad/plugins"

	"github.com/gpu-steward/steward/devices"
)

// The GPU device plugin: copy the steward binary into the Nomad client's
// plugin_dir as "steward-gpu" and add a plugin "steward-gpu" block to the
// agent configuration (see docs/reference/devices.md).
func init() {
	Plugins[devices.PluginName] = func() { plugins.Serve(devices.Factory) }
}
