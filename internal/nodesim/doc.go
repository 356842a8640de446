// Package nodesim simulates many Nomad client nodes in one process, for
// scale tests of Steward against a real Nomad server.
//
//	f, err := nodesim.Start(ctx, nodesim.Config{
//		Servers: []string{"127.0.0.1:4647"},
//		Nodes:   500,
//		Meta:    map[string]string{"steward.sim": "true"},
//	})
//	defer f.Close()
//
// Each simulated node talks to the server over Nomad's server RPC port the
// way the real client (github.com/hashicorp/nomad/client, which this
// package does not import) does: msgpack RPC over a yamux session opened
// with the multiplex-v2 byte (rpc.go). It
//
//   - registers (Node.Register, register.go) a node that is ready at once
//     and looks to the scheduler like a Linux node running Steward's
//     device plugin with its simulated backend: one device group of vendor
//     "nvidia", type "gpu", model "Simulated A100" with the sim backend's
//     attributes, GPUsPerNode healthy instances with IDs unique across the
//     fleet (SIM-GPU-<hash of the node ID>-<i>), and the raw_exec and
//     steward-exec drivers detected and healthy. The first registration
//     carries no token (the server refuses a secret it does not know);
//     later RPCs use the signed node identity the server hands out;
//   - heartbeats (Node.UpdateStatus, heartbeat.go) at a random point
//     between half and three quarters of the TTL the server hands out, and
//     registers again when the server has forgotten it (purged, garbage
//     collected);
//   - watches its allocations (allocs.go) with blocking
//     Node.GetClientAllocs queries and pulls new and changed ones with
//     Alloc.GetAllocs: a new allocation runs after a start delay of
//     100-500ms (tasks running, "Started" event; its GPUs, from
//     AllocatedResources, held), one the server stops completes (tasks
//     "Killed"), Fleet.Finish ends a running one complete or failed
//     ("Terminated", exit code 0 or 1), and an allocation in a deployment
//     is reported healthy after its group's min_healthy_time;
//   - reports allocation states with Node.UpdateAlloc, batched every 200ms
//     across the whole fleet (updates.go): the server takes updates of
//     several nodes in one request;
//   - serves the RPCs the server forwards to a client over the node's own
//     connection (stats.go): ClientStats.Stats (host stats with the GPUs'
//     device stats as Steward's device plugin reports them, "GPU
//     utilization" as the summary, from Config.Activity or 90% for GPUs a
//     running allocation holds), Allocations.Stats (the device stats of
//     the allocation's GPUs) and Allocations.Signal (counted, and passed
//     to Config.OnSignal). Streaming RPCs (logs, exec, file system) are
//     refused.
//
// It models none of the rest of a client: no task runs, nothing is
// fingerprinted (every node reports the same fixed resources: 64 cores of
// 2000 MHz, 512 GiB of memory, 1 TiB of disk), there are no restarts or
// restart policies, no logs or file system, no CSI or host volumes, no
// service registration or health checks, no networking beyond a loopback
// host network, no local state (a new Fleet registers new nodes), no TLS,
// and no node introduction tokens (the server logs a warning for each
// registration at its default enforcement level).
//
// Cost, measured on a 2-core machine against a dev agent: 500 nodes x 8
// GPUs register in about 0.7s and take about 30 KiB of heap and 6
// goroutines per node (a yamux session's loops, the stream accept loop,
// the heartbeat and allocation watch loops); idle, the fleet uses about 3%
// of one core.
//
// Connections. The server records a client's connection for forwarded
// RPCs per TCP connection (the first node to register or heartbeat on it),
// so every node needs a connection of its own to be reachable, as real
// clients have. All simulated nodes connect from 127.0.0.1, and a Nomad
// server accepts only limits.rpc_max_conns_per_client (default 100)
// connections from one address: a fleet of more than about 90 nodes needs
// a server configured with rpc_max_conns_per_client = 0 (in the same
// limits block as any other limit: the agent refuses a second limits
// block), or Config.MaxConns, which makes nodes share connections and
// leaves all but one node per connection unreachable for forwarded RPCs.
package nodesim
