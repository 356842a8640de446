// Command steward-exec is Steward's preemption-aware task driver for
// Nomad clients, built on its own: it links the driver (driver/) and
// Nomad's driver plugin SDK, and none of the controller, the simulator or
// the plots. (Nomad's driver SDK itself links nomad/structs, which
// imports the Consul API package; Steward's own Consul client, the
// controller's leader election, is not in it.) Copy it into the client's
// plugin_dir and add a plugin "steward-exec" block to the agent
// configuration (docs/reference/driver.md). The agent starts it with no arguments;
// "steward-exec -version" prints its version.
package main

import (
	hclog "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/plugins/drivers"

	"github.com/gpu-steward/steward/driver"
	"github.com/gpu-steward/steward/internal/plugincmd"
)

func main() {
	plugincmd.Main(driver.PluginName, func(logger hclog.Logger) { drivers.Serve(driver.New(logger), logger) })
}
