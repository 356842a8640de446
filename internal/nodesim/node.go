package nodesim

import (
	"fmt"
	"hash/fnv"
	"io"
	"sync"
	"time"

	"github.com/hashicorp/nomad/helper/uuid"
	"github.com/hashicorp/nomad/nomad/structs"
)

// node is one simulated client node.
type node struct {
	f      *Fleet
	tmpl   *nodeTemplate
	id     string
	name   string
	secret string
	gpus   []string
	link   *link

	mu sync.Mutex
	// token authenticates the node's RPCs: its signed identity once the
	// server handed one out, else (registered) its secret ID. The first
	// registration goes without a token, as a real client's without an
	// introduction token does: the server refuses an unknown secret.
	token string
	// allocs are the allocations the server placed here that the node has
	// seen, by ID.
	allocs map[string]*simAlloc
	// held maps the GPUs of running allocations to the allocation.
	held map[string]string
	// reregister is set when the server forgot the node.
	reregister bool
}

func newNode(f *Fleet, i int, tmpl *nodeTemplate, l *link, gpuIDs map[string]struct{}) *node {
	n := &node{
		f:      f,
		tmpl:   tmpl,
		id:     uuid.Generate(),
		name:   fmt.Sprintf("%s-%04d", f.cfg.NamePrefix, i),
		secret: uuid.Generate(),
		link:   l,
		allocs: map[string]*simAlloc{},
		held:   map[string]string{},
	}
	n.gpus = make([]string, f.cfg.GPUsPerNode)
	// IDs look like the device plugin's simulated ones,
	// SIM-GPU-<8 hex digits>-<i>, with a hash of the node ID (salted on
	// the rare collision) so that they are unique across the fleet.
	for salt := 0; ; salt++ {
		h := fnv.New32a()
		_, _ = io.WriteString(h, fmt.Sprintf("%s\x00%d", n.id, salt))
		prefix := fmt.Sprintf("SIM-GPU-%08x", h.Sum32())
		if _, taken := gpuIDs[prefix]; taken {
			continue
		}
		gpuIDs[prefix] = struct{}{}
		for g := range n.gpus {
			n.gpus[g] = fmt.Sprintf("%s-%d", prefix, g)
		}
		break
	}
	return n
}

// authToken is the token for the node's RPCs.
func (n *node) authToken() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.token
}

// setIdentity stores a signed identity the server handed out.
func (n *node) setIdentity(id *string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case id != nil && *id != "":
		n.token = *id
	case n.token == "":
		n.token = n.secret
	}
}

func (n *node) writeRequest() structs.WriteRequest {
	return structs.WriteRequest{Region: n.f.cfg.Region, AuthToken: n.authToken()}
}

// running is the number of allocations running on the node.
func (n *node) running() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := 0
	for _, a := range n.allocs {
		if a.clientStatus == structs.AllocClientStatusRunning {
			c++
		}
	}
	return c
}

// stopTimers stops pending start and health timers, on Close.
func (n *node) stopTimers() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, a := range n.allocs {
		a.stopTimers()
	}
}

// sleep waits d, or returns false when the fleet is closing.
func (n *node) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-n.f.ctx.Done():
		return false
	}
}
