package controller

import (
	"context"
	"sync"

	"github.com/hashicorp/nomad/api"
)

// The act phase carries out different jobs' actions at once (actplan.go).
// They share the round, the states, the store's indexes, the notices and
// the backoff of refused writes: rather than a lock on each, one lock (the
// act lock) is held by whichever action runs, and let go only while it
// waits on Nomad. An action's own bookkeeping then runs as if it were
// alone, between two Nomad calls, and the round trips, which are what
// held a round for seconds (issue 33), overlap.
//
// The lock travels in the action's context, so that the Nomad client
// (ioUnlocked, below the fence) lets it go only for calls made on behalf
// of an action: every other caller holds none.

type actLockKey struct{}

// actLock is held by the action that runs; nil outside the act phase.
type actLock struct{ mu sync.Mutex }

func withActLock(ctx context.Context, l *actLock) context.Context {
	return context.WithValue(ctx, actLockKey{}, l)
}

// unlockedFor runs f (a wait on Nomad, or on another action) without the
// act lock ctx carries, if any, and takes it back after.
func unlockedFor(ctx context.Context, f func()) {
	l, _ := ctx.Value(actLockKey{}).(*actLock)
	if l == nil {
		f()
		return
	}
	l.mu.Unlock()
	defer l.mu.Lock()
	f()
}

// ioUnlocked lets the act lock go during the calls an action makes. Its
// arguments (an index, the items to write) are read before, under the
// lock; the calls not listed here keep it, which is correct, only slower.
type ioUnlocked struct{ Nomad }

func (n ioUnlocked) Signal(ctx context.Context, namespace, allocID, task, signal string) (err error) {
	unlockedFor(ctx, func() { err = n.Nomad.Signal(ctx, namespace, allocID, task, signal) })
	return err
}

func (n ioUnlocked) StopAlloc(ctx context.Context, namespace, allocID string) (index uint64, err error) {
	unlockedFor(ctx, func() { index, err = n.Nomad.StopAlloc(ctx, namespace, allocID) })
	return index, err
}

func (n ioUnlocked) Scale(ctx context.Context, namespace, jobID, group string, count int, message string, meta map[string]any, index uint64) (out uint64, err error) {
	unlockedFor(ctx, func() { out, err = n.Nomad.Scale(ctx, namespace, jobID, group, count, message, meta, index) })
	return out, err
}

func (n ioUnlocked) ScaleAhead(ctx context.Context, namespace, jobID, group string, count int, index uint64) (out uint64, err error) {
	unlockedFor(ctx, func() { out, err = n.Nomad.ScaleAhead(ctx, namespace, jobID, group, count, index) })
	return out, err
}

func (n ioUnlocked) ScaleWithPolicy(ctx context.Context, namespace, jobID, group string, count int, p ScalingPolicy, message string,
	meta map[string]any, index uint64, evalPriority int) (out uint64, err error) {
	unlockedFor(ctx, func() {
		out, err = n.Nomad.ScaleWithPolicy(ctx, namespace, jobID, group, count, p, message, meta, index, evalPriority)
	})
	return out, err
}

func (n ioUnlocked) SetPriority(ctx context.Context, namespace, jobID string, priority int, reason string, index uint64) (out uint64, err error) {
	unlockedFor(ctx, func() { out, err = n.Nomad.SetPriority(ctx, namespace, jobID, priority, reason, index) })
	return out, err
}

func (n ioUnlocked) MoveJob(ctx context.Context, namespace, jobID, nodePool, reason string, index uint64) (out uint64, err error) {
	unlockedFor(ctx, func() { out, err = n.Nomad.MoveJob(ctx, namespace, jobID, nodePool, reason, index) })
	return out, err
}

func (n ioUnlocked) GetVar(ctx context.Context, namespace, path string) (items map[string]string, index uint64, err error) {
	unlockedFor(ctx, func() { items, index, err = n.Nomad.GetVar(ctx, namespace, path) })
	return items, index, err
}

func (n ioUnlocked) PutVar(ctx context.Context, namespace, path string, items map[string]string, cas bool, index uint64) (out uint64, err error) {
	unlockedFor(ctx, func() { out, err = n.Nomad.PutVar(ctx, namespace, path, items, cas, index) })
	return out, err
}

func (n ioUnlocked) DeleteVar(ctx context.Context, namespace, path string, index uint64) (err error) {
	unlockedFor(ctx, func() { err = n.Nomad.DeleteVar(ctx, namespace, path, index) })
	return err
}

func (n ioUnlocked) ReadJob(ctx context.Context, namespace, jobID string, fresh bool) (job *api.Job, err error) {
	unlockedFor(ctx, func() { job, err = n.Nomad.ReadJob(ctx, namespace, jobID, fresh) })
	return job, err
}
