package nodesim

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/nomad/structs"
	psstructs "github.com/hashicorp/nomad/plugins/shared/structs"

	"github.com/gpu-steward/steward/internal/backoff"
	"github.com/gpu-steward/steward/internal/version"
)

// stewardDriverVersion is the steward-exec version a simulated node
// reports: the one the real driver of this build reports.
var stewardDriverVersion = version.Plugin()

// What a node reports: a Linux host running Steward's device plugin with
// its simulated backend and the steward-exec and raw_exec drivers. The
// device values mirror devices/ (Vendor, DeviceType, the sim backend's
// defaults and attributes; nodesim_test checks them against it) without
// importing it.
const (
	NomadVersion = "1.11.3"

	GPUVendor = "nvidia"
	GPUType   = "gpu"
	GPUModel  = "Simulated A100"

	gpuMemoryMiB         = 40960
	gpuPowerLimitW       = 400
	gpuComputeCapability = "8.0"
	gpuDriverVersion     = "simulated"

	stewardDriver = "steward-exec"

	nodeCores    = 64
	nodeCoreMHz  = 2000
	nodeMemoryMB = 512 * 1024
	nodeDiskMB   = 1024 * 1024
)

// nodeTemplate holds what all nodes share. Nothing in it is modified after
// newNodeTemplate, so nodes may point into it.
type nodeTemplate struct {
	attrs   map[string]string
	drivers map[string]*structs.DriverInfo
	// resources, without Devices.
	resources   structs.NodeResources
	reserved    *structs.NodeReservedResources
	deviceAttrs map[string]*psstructs.Attribute
}

func newNodeTemplate(cfg Config) *nodeTemplate {
	now := time.Now()
	t := &nodeTemplate{
		attrs: map[string]string{
			"kernel.name":                       "linux",
			"kernel.arch":                       "x86_64",
			"kernel.version":                    "6.8.0-sim",
			"cpu.arch":                          runtime.GOARCH,
			"cpu.numcores":                      strconv.Itoa(nodeCores),
			"cpu.frequency":                     strconv.Itoa(nodeCoreMHz),
			"cpu.totalcompute":                  strconv.Itoa(nodeCores * nodeCoreMHz),
			"cpu.modelname":                     "Simulated CPU",
			"memory.totalbytes":                 strconv.FormatInt(int64(nodeMemoryMB)<<20, 10),
			"os.name":                           "ubuntu",
			"os.version":                        "22.04",
			"os.signals":                        "SIGHUP,SIGINT,SIGKILL,SIGTERM,SIGUSR1,SIGUSR2",
			"nomad.version":                     NomadVersion,
			"nomad.service_discovery":           "true",
			"unique.network.ip-address":         "127.0.0.1",
			"driver.raw_exec":                   "1",
			"driver." + stewardDriver:           "1",
			"numa.node.count":                   "1",
			"numa.node0.cores":                  fmt.Sprintf("0-%d", nodeCores-1),
			"unique.storage.volume":             "/dev/simulated",
			"unique.storage.bytestotal":         strconv.FormatInt(int64(nodeDiskMB)<<20, 10),
			"unique.storage.bytesfree":          strconv.FormatInt(int64(nodeDiskMB)<<20, 10),
			"nomad.advertise.address":           "127.0.0.1",
			"plugins.host_volume.mkdir.version": "0.0.1",
		},
		drivers: map[string]*structs.DriverInfo{
			"raw_exec": {
				Attributes:        map[string]string{"driver.raw_exec": "true"},
				Detected:          true,
				Healthy:           true,
				HealthDescription: "Healthy",
				UpdateTime:        now,
			},
			stewardDriver: {
				Attributes: map[string]string{
					"driver." + stewardDriver:                            "true",
					"driver." + stewardDriver + ".version":               stewardDriverVersion,
					"driver." + stewardDriver + ".checkpoint_persistent": "false",
				},
				Detected:          true,
				Healthy:           true,
				HealthDescription: "Healthy",
				UpdateTime:        now,
			},
		},
		reserved: &structs.NodeReservedResources{},
		deviceAttrs: map[string]*psstructs.Attribute{
			"memory":             psstructs.NewIntAttribute(gpuMemoryMiB, psstructs.UnitMiB),
			"power":              psstructs.NewIntAttribute(gpuPowerLimitW, psstructs.UnitW),
			"driver_version":     psstructs.NewStringAttribute(gpuDriverVersion),
			"compute_capability": psstructs.NewStringAttribute(gpuComputeCapability),
			"mig":                psstructs.NewBoolAttribute(false),
			"simulated":          psstructs.NewBoolAttribute(true),
		},
	}
	cores := make([]uint16, nodeCores)
	for i := range cores {
		cores[i] = uint16(i)
	}
	t.resources = structs.NodeResources{
		Cpu: structs.LegacyNodeCpuResources{
			CpuShares:          nodeCores * nodeCoreMHz,
			TotalCpuCores:      nodeCores,
			ReservableCpuCores: cores,
		},
		Memory: structs.NodeMemoryResources{MemoryMB: nodeMemoryMB},
		Disk:   structs.NodeDiskResources{DiskMB: nodeDiskMB},
		Networks: structs.Networks{{
			Mode:   "host",
			Device: "lo",
			CIDR:   "127.0.0.1/32",
			IP:     "127.0.0.1",
			MBits:  1000,
		}},
		NodeNetworks: []*structs.NodeNetworkResource{{
			Mode:   "host",
			Device: "lo",
			Speed:  1000,
			Addresses: []structs.NodeNetworkAddress{{
				Family:  structs.NodeNetworkAF_IPv4,
				Alias:   "default",
				Address: "127.0.0.1",
			}},
		}},
		MinDynamicPort: 20000,
		MaxDynamicPort: 32000,
	}
	// The processor topology, derived from the legacy CPU figures the way
	// the server does for old clients.
	t.resources.Compatibility()
	return t
}

// buildNode is the node as registered. Its maps are fresh; what the
// template shares is read-only.
func (n *node) buildNode() *structs.Node {
	cfg := n.f.cfg
	t := n.tmpl
	attrs := maps.Clone(t.attrs)
	attrs["unique.hostname"] = n.name
	meta := maps.Clone(cfg.Meta)
	if meta == nil {
		meta = map[string]string{}
	}

	instances := make([]*structs.NodeDevice, len(n.gpus))
	for i, id := range n.gpus {
		instances[i] = &structs.NodeDevice{
			ID:      id,
			Healthy: true,
			Locality: &structs.NodeDeviceLocality{
				PciBusID: fmt.Sprintf("0000:%02x:00.0", 0x10+i),
			},
		}
	}
	res := t.resources // shallow copy: Networks, topology shared read-only
	if len(instances) > 0 {
		res.Devices = []*structs.NodeDeviceResource{{
			Vendor:     GPUVendor,
			Type:       GPUType,
			Name:       GPUModel,
			Instances:  instances,
			Attributes: t.deviceAttrs,
		}}
	}

	node := &structs.Node{
		ID:                    n.id,
		SecretID:              n.secret,
		Datacenter:            cfg.Datacenter,
		Name:                  n.name,
		NodePool:              cfg.NodePool,
		Attributes:            attrs,
		NodeResources:         &res,
		ReservedResources:     t.reserved,
		Links:                 map[string]string{},
		Meta:                  meta,
		Drivers:               t.drivers,
		HostVolumes:           map[string]*structs.ClientHostVolumeConfig{},
		Status:                structs.NodeStatusReady,
		SchedulingEligibility: structs.NodeSchedulingEligible,
	}
	// The server computes the class as well; done here so that the node
	// sent is complete.
	_ = node.ComputeClass()
	return node
}

// register sends Node.Register with the node ready. The server records the
// connection as the node's (for forwarded RPCs) if it is the first node to
// use it.
func (n *node) register() error {
	req := structs.NodeRegisterRequest{
		Node:         n.buildNode(),
		WriteRequest: n.writeRequest(),
	}
	var resp structs.NodeUpdateResponse
	if err := n.link.call("Node.Register", &req, &resp); err != nil {
		return fmt.Errorf("register node %s: %w", n.name, err)
	}
	n.setIdentity(resp.SignedIdentity)
	n.f.stats.registrations.Add(1)
	return nil
}

// registerRetry registers, retrying with jittered backoff until ctx ends
// or the error looks permanent.
func (n *node) registerRetry(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		err := n.register()
		if err == nil {
			return nil
		}
		if attempt >= 8 || permanent(err) {
			return err
		}
		n.f.logger.Debug("registration failed; retrying", "node", n.name, "attempt", attempt, "error", err)
		t := time.NewTimer(jitter(backoff.Exponential(250*time.Millisecond, 5*time.Second, attempt-1)))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("register node %s: %w (last error: %v)", n.name, ctx.Err(), err)
		case <-t.C:
		}
	}
}

// permanent reports errors that retrying does not fix.
func permanent(err error) bool {
	s := err.Error()
	return strings.Contains(s, "Permission denied") || strings.Contains(s, "invalid") ||
		strings.Contains(s, "missing") || strings.Contains(s, "does not match")
}

// jitter spreads a wait d within [d/2, d] (backoff.Jitter), so that the
// simulated nodes do not retry together.
func jitter(d time.Duration) time.Duration {
	return backoff.Jitter(d, rand.Float64())
}
