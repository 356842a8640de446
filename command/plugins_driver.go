package command

import (
	"github.com/hashicorp/nomad/plugins"

	"github.com/gpu-steward/steward/driver"
)

// The preemption-aware task driver: copy the steward binary into the Nomad
// client's plugin_dir as "steward-exec" and add a plugin "steward-exec"
// block to the agent configuration (see docs/reference/driver.md).
func init() {
	Plugins[driver.PluginName] = func() { plugins.Serve(driver.Factory) }
}
