package nodesim

import (
	"context"
	"errors"
	"fmt"
	"net/rpc"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/yamux"
)

// Defaults of Config.
const (
	DefaultGPUsPerNode = 8
	DefaultNamePrefix  = "sim"
	DefaultDatacenter  = "dc1"
	DefaultNodePool    = "default"
	DefaultRegion      = "global"

	// registerConcurrency bounds the registrations Start runs at once.
	registerConcurrency = 16
)

// Config configures a Fleet.
type Config struct {
	// Servers are the server RPC addresses, e.g. "127.0.0.1:4647". Nodes
	// are spread over them and move to the next one when a connection
	// breaks.
	Servers []string
	// Nodes is the number of simulated nodes.
	Nodes int
	// GPUsPerNode is the number of GPUs each node reports; default 8.
	GPUsPerNode int
	// NamePrefix makes node names <prefix>-0000, <prefix>-0001, ...;
	// default "sim".
	NamePrefix string
	// Datacenter, NodePool and Region of the nodes; defaults dc1, default,
	// global.
	Datacenter, NodePool, Region string
	// Meta is node meta added to every node (a harness sets, say,
	// steward.sim = "true" to constrain jobs to simulated nodes).
	Meta map[string]string
	// Activity gives a GPU's utilisation in percent for its device stats.
	// ok false falls back to the default: 90 for a GPU a running
	// allocation holds, 0 otherwise. It is called from the RPC handlers
	// and must be safe for concurrent use.
	Activity func(nodeID, gpuID string) (utilPercent int, ok bool)
	// OnSignal, when set, is called for every Allocations.Signal the
	// server forwards to a node (nothing runs, so nothing is signalled;
	// the signal is counted in FleetStats.Signals).
	OnSignal func(nodeID, allocID, task, signal string)
	// MaxConns, when > 0 and less than Nodes, makes nodes share MaxConns
	// connections. A server accepts only limits.rpc_max_conns_per_client
	// (default 100) connections from one address, and all simulated nodes
	// connect from 127.0.0.1. The server sends forwarded RPCs (stats,
	// signals) only to the first node that used a connection, so the
	// other nodes on a shared connection are not reachable for them.
	// Zero: one connection per node, like real clients.
	MaxConns int
	// Logger; default a null logger.
	Logger hclog.Logger
}

// NodeInfo describes a simulated node.
type NodeInfo struct {
	ID   string
	Name string
	// GPUs are the IDs of its GPU instances, unique across the fleet.
	GPUs []string
}

// FleetStats are counters since Start.
type FleetStats struct {
	Nodes int
	// RPCs made to the servers, and how many of them failed.
	RPCs, RPCErrors int64
	// Dials is the number of connections opened to servers.
	Dials int64
	// Registrations (Node.Register) and heartbeats (Node.UpdateStatus)
	// that succeeded.
	Registrations, Heartbeats int64
	// StatsServed counts forwarded ClientStats.Stats and Allocations.Stats
	// requests answered.
	StatsServed int64
	// Signals counts forwarded Allocations.Signal requests.
	Signals int64
	// Refused counts forwarded requests refused (streaming RPCs, unknown
	// nodes or allocations).
	Refused int64
	// AllocUpdates is the number of allocation updates sent with
	// Node.UpdateAlloc, in UpdateBatches RPCs.
	AllocUpdates, UpdateBatches int64
	// AllocsRunning is the number of allocations the nodes run now.
	AllocsRunning int
}

type counters struct {
	rpcs, rpcErrors, dials, registrations, heartbeats    atomic.Int64
	statsServed, signals, refused, allocUpdates, batches atomic.Int64
}

// Fleet is a set of simulated nodes connected to a Nomad cluster.
type Fleet struct {
	cfg       Config
	logger    hclog.Logger
	yamuxCfg  *yamux.Config
	rpcServer *rpc.Server
	nodes     []*node
	byID      map[string]*node
	links     []*link
	updates   *updater
	stats     counters

	// owners maps allocation IDs to the node that runs them.
	ownersMu sync.Mutex
	owners   map[string]*node

	started   time.Time
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// Start registers cfg.Nodes simulated nodes (a bounded number at a time),
// then starts their heartbeats and allocation watches. It returns when all
// are registered and ready, or the first error; ctx bounds the
// registration only: the fleet runs until Close.
func Start(ctx context.Context, cfg Config) (*Fleet, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	f := &Fleet{
		cfg:       cfg,
		logger:    cfg.Logger,
		yamuxCfg:  yamuxConfig(cfg.Logger.Named("yamux")),
		rpcServer: rpc.NewServer(),
		byID:      make(map[string]*node, cfg.Nodes),
		owners:    map[string]*node{},
		started:   time.Now(),
		ctx:       runCtx,
		cancel:    cancel,
	}
	f.updates = newUpdater(f)
	if err := f.registerEndpoints(); err != nil {
		cancel()
		return nil, err
	}

	nLinks := cfg.Nodes
	if cfg.MaxConns > 0 && cfg.MaxConns < cfg.Nodes {
		nLinks = cfg.MaxConns
	}
	f.links = make([]*link, nLinks)
	for i := range f.links {
		f.links[i] = newLink(f, i)
	}
	tmpl := newNodeTemplate(cfg)
	ids := map[string]struct{}{}
	for i := 0; i < cfg.Nodes; i++ {
		n := newNode(f, i, tmpl, f.links[i%nLinks], ids)
		f.nodes = append(f.nodes, n)
		f.byID[n.id] = n
	}

	start := time.Now()
	if err := f.registerAll(ctx); err != nil {
		f.Close()
		return nil, err
	}
	f.logger.Info("simulated nodes registered", "nodes", cfg.Nodes, "connections", nLinks, "duration", time.Since(start))

	for _, n := range f.nodes {
		n := n
		f.wg.Add(2)
		go func() { defer f.wg.Done(); n.heartbeatLoop(runCtx) }()
		go func() { defer f.wg.Done(); n.watchAllocs(runCtx) }()
	}
	return f, nil
}

func (c *Config) setDefaults() error {
	if len(c.Servers) == 0 {
		return errors.New("nodesim: no servers")
	}
	if c.Nodes <= 0 {
		return fmt.Errorf("nodesim: Nodes must be positive, not %d", c.Nodes)
	}
	if c.GPUsPerNode == 0 {
		c.GPUsPerNode = DefaultGPUsPerNode
	}
	if c.GPUsPerNode < 0 {
		return fmt.Errorf("nodesim: GPUsPerNode must not be negative, not %d", c.GPUsPerNode)
	}
	if c.NamePrefix == "" {
		c.NamePrefix = DefaultNamePrefix
	}
	if c.Datacenter == "" {
		c.Datacenter = DefaultDatacenter
	}
	if c.NodePool == "" {
		c.NodePool = DefaultNodePool
	}
	if c.Region == "" {
		c.Region = DefaultRegion
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return nil
}

// registerAll registers every node, registerConcurrency at a time.
func (f *Fleet) registerAll(ctx context.Context) error {
	work := make(chan *node)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	workers := min(registerConcurrency, len(f.nodes))
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range work {
				if err := n.registerRetry(ctx); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	var err error
feed:
	for _, n := range f.nodes {
		select {
		case work <- n:
		case err = <-errs:
			break feed
		case <-ctx.Done():
			err = fmt.Errorf("nodesim: registering nodes: %w", ctx.Err())
			break feed
		}
	}
	close(work)
	wg.Wait()
	if err == nil {
		select {
		case err = <-errs:
		default:
		}
	}
	return err
}

// Nodes describes the simulated nodes, in name order.
func (f *Fleet) Nodes() []NodeInfo {
	out := make([]NodeInfo, len(f.nodes))
	for i, n := range f.nodes {
		out[i] = NodeInfo{ID: n.id, Name: n.name, GPUs: append([]string(nil), n.gpus...)}
	}
	return out
}

// Finish ends a running allocation, as if all its tasks exited: it is
// reported complete (exit code 0), or failed (exit code 1) when failed is
// true. It returns an error for an allocation no node runs.
func (f *Fleet) Finish(allocID string, failed bool) error {
	f.ownersMu.Lock()
	n := f.owners[allocID]
	f.ownersMu.Unlock()
	if n == nil {
		return fmt.Errorf("nodesim: finish allocation %s: not on a simulated node", allocID)
	}
	return n.finish(allocID, failed)
}

// Stats returns the fleet's counters.
func (f *Fleet) Stats() FleetStats {
	s := FleetStats{
		Nodes:         len(f.nodes),
		RPCs:          f.stats.rpcs.Load(),
		RPCErrors:     f.stats.rpcErrors.Load(),
		Dials:         f.stats.dials.Load(),
		Registrations: f.stats.registrations.Load(),
		Heartbeats:    f.stats.heartbeats.Load(),
		StatsServed:   f.stats.statsServed.Load(),
		Signals:       f.stats.signals.Load(),
		Refused:       f.stats.refused.Load(),
		AllocUpdates:  f.stats.allocUpdates.Load(),
		UpdateBatches: f.stats.batches.Load(),
	}
	for _, n := range f.nodes {
		s.AllocsRunning += n.running()
	}
	return s
}

// Close stops the nodes' loops and closes their connections. It sends
// pending allocation updates first (briefly), but does not deregister the
// nodes: the servers mark them down when their heartbeats stop.
func (f *Fleet) Close() error {
	f.closeOnce.Do(func() {
		f.updates.flushNow(2 * time.Second)
		f.cancel()
		f.updates.stop()
		for _, n := range f.nodes {
			n.stopTimers()
		}
		for _, l := range f.links {
			l.close()
		}
		f.wg.Wait()
	})
	return nil
}

// owner records (n non-nil) or forgets the node running an allocation.
func (f *Fleet) setOwner(allocID string, n *node) {
	f.ownersMu.Lock()
	if n == nil {
		delete(f.owners, allocID)
	} else {
		f.owners[allocID] = n
	}
	f.ownersMu.Unlock()
}

func (f *Fleet) ownerOf(allocID string) *node {
	f.ownersMu.Lock()
	defer f.ownersMu.Unlock()
	return f.owners[allocID]
}
