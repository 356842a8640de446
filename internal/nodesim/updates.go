package nodesim

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/nomad/nomad/structs"
)

const (
	// batchInterval is how long updates collect before they are sent.
	batchInterval = 200 * time.Millisecond
	// batchMax is the most allocation updates sent in one RPC.
	batchMax = 1000
	// batchRetry is the wait after a failed Node.UpdateAlloc.
	batchRetry = time.Second
)

// updater batches allocation updates across the fleet and sends them with
// Node.UpdateAlloc: at most one RPC per batchInterval (and per batchMax
// updates), no timer while nothing is pending. The server takes updates
// of several nodes in one request (it checks only that the first
// allocation's node is up); each batch goes over the connection of its
// first allocation's node, with that node's token. A later update of an
// allocation replaces a pending one.
type updater struct {
	f   *Fleet
	seq atomic.Uint64

	mu      sync.Mutex
	pending map[string]pendingUpdate
	timer   *time.Timer
	sending bool
	stopped bool
}

type pendingUpdate struct {
	n     *node
	alloc *structs.Allocation
	seq   uint64
}

func newUpdater(f *Fleet) *updater {
	return &updater{f: f, pending: map[string]pendingUpdate{}}
}

// add queues an update.
func (u *updater) add(n *node, a *structs.Allocation) {
	seq := u.seq.Add(1)

	u.mu.Lock()
	defer u.mu.Unlock()
	if u.stopped {
		return
	}
	u.pending[a.ID] = pendingUpdate{n: n, alloc: a, seq: seq}
	u.armLocked(batchInterval)
}

func (u *updater) armLocked(d time.Duration) {
	if u.timer == nil && !u.sending && !u.stopped {
		u.timer = time.AfterFunc(d, u.flush)
	}
}

// flush sends what is pending.
func (u *updater) flush() {
	u.mu.Lock()
	u.timer = nil
	if u.sending || len(u.pending) == 0 {
		u.mu.Unlock()
		return
	}
	u.sending = true
	batch := make([]pendingUpdate, 0, len(u.pending))
	for _, p := range u.pending {
		batch = append(batch, p)
	}
	clear(u.pending)
	u.mu.Unlock()

	failed := false
	for len(batch) > 0 {
		chunk := batch[:min(batchMax, len(batch))]
		batch = batch[len(chunk):]
		if err := u.send(chunk); err != nil {
			failed = true
			u.f.logger.Warn("reporting allocation updates failed; retrying", "updates", len(chunk), "error", err)
			u.restore(chunk)
		}
	}

	u.mu.Lock()
	u.sending = false
	if len(u.pending) > 0 {
		d := batchInterval
		if failed {
			d = jitter(batchRetry)
		}
		u.armLocked(d)
	}
	u.mu.Unlock()
}

func (u *updater) send(chunk []pendingUpdate) error {
	allocs := make([]*structs.Allocation, len(chunk))
	for i, p := range chunk {
		allocs[i] = p.alloc
	}
	n := chunk[0].n
	req := structs.AllocUpdateRequest{Alloc: allocs, WriteRequest: n.writeRequest()}
	var resp structs.GenericResponse
	if err := n.link.call("Node.UpdateAlloc", &req, &resp); err != nil {
		return err
	}
	u.f.stats.batches.Add(1)
	u.f.stats.allocUpdates.Add(int64(len(chunk)))
	return nil
}

// restore puts back updates that failed, unless newer ones came since.
func (u *updater) restore(chunk []pendingUpdate) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.stopped {
		return
	}
	for _, p := range chunk {
		if cur, ok := u.pending[p.alloc.ID]; !ok || cur.seq < p.seq {
			u.pending[p.alloc.ID] = p
		}
	}
}

// flushNow sends what is pending, waiting at most timeout.
func (u *updater) flushNow(timeout time.Duration) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		u.mu.Lock()
		if u.timer != nil {
			u.timer.Stop()
			u.timer = nil
		}
		u.mu.Unlock()
		u.flush()
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// stop drops what is pending and sends nothing more.
func (u *updater) stop() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.stopped = true
	if u.timer != nil {
		u.timer.Stop()
		u.timer = nil
	}
	clear(u.pending)
}
