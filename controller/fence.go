package controller

import (
	"context"
	"fmt"

	"github.com/hashicorp/nomad/api"
)

// fencedNomad refuses every write once the leader's lease has expired
// (leader.go): a controller that was paused past its deadline, or whose
// lock renewals fail, changes nothing in Nomad, even in the middle of a
// round, before another controller can lead. Reads go through.
type fencedNomad struct {
	Nomad
	lease *lease
}

func (f fencedNomad) fence(what string) error {
	if f.lease.valid() {
		return nil
	}
	return fmt.Errorf("%s: %w", what, errLostLease)
}

func (f fencedNomad) Signal(ctx context.Context, ns, allocID, task, signal string) error {
	if err := f.fence("signal allocation " + allocID); err != nil {
		return err
	}
	return f.Nomad.Signal(ctx, ns, allocID, task, signal)
}

func (f fencedNomad) RegisterJob(ctx context.Context, job *api.Job) error {
	if err := f.fence("register job " + deref(job.ID)); err != nil {
		return err
	}
	return f.Nomad.RegisterJob(ctx, job)
}

func (f fencedNomad) PurgeJob(ctx context.Context, ns, jobID string) error {
	if err := f.fence("purge job " + jobID); err != nil {
		return err
	}
	return f.Nomad.PurgeJob(ctx, ns, jobID)
}

func (f fencedNomad) StopAlloc(ctx context.Context, ns, allocID string) (uint64, error) {
	if err := f.fence("stop allocation " + allocID); err != nil {
		return 0, err
	}
	return f.Nomad.StopAlloc(ctx, ns, allocID)
}

func (f fencedNomad) Scale(ctx context.Context, ns, jobID, group string, count int, message string, meta map[string]any, index uint64) (uint64, error) {
	if err := f.fence(fmt.Sprintf("scale %s/%s", ns, jobID)); err != nil {
		return 0, err
	}
	return f.Nomad.Scale(ctx, ns, jobID, group, count, message, meta, index)
}

func (f fencedNomad) ScaleAhead(ctx context.Context, ns, jobID, group string, count int, index uint64) (uint64, error) {
	if err := f.fence(fmt.Sprintf("scale %s/%s", ns, jobID)); err != nil {
		return 0, err
	}
	return f.Nomad.ScaleAhead(ctx, ns, jobID, group, count, index)
}

func (f fencedNomad) ScaleWithPolicy(ctx context.Context, ns, jobID, group string, count int, p ScalingPolicy, message string, meta map[string]any, index uint64, evalPriority int) (uint64, error) {
	if err := f.fence(fmt.Sprintf("scale %s/%s", ns, jobID)); err != nil {
		return 0, err
	}
	return f.Nomad.ScaleWithPolicy(ctx, ns, jobID, group, count, p, message, meta, index, evalPriority)
}

func (f fencedNomad) SetPriority(ctx context.Context, ns, jobID string, priority int, reason string, index uint64) (uint64, error) {
	if err := f.fence(fmt.Sprintf("set priority of %s/%s", ns, jobID)); err != nil {
		return 0, err
	}
	return f.Nomad.SetPriority(ctx, ns, jobID, priority, reason, index)
}

func (f fencedNomad) MoveJob(ctx context.Context, ns, jobID, nodePool, reason string, index uint64) (uint64, error) {
	if err := f.fence(fmt.Sprintf("move %s/%s", ns, jobID)); err != nil {
		return 0, err
	}
	return f.Nomad.MoveJob(ctx, ns, jobID, nodePool, reason, index)
}

func (f fencedNomad) PutVar(ctx context.Context, ns, path string, items map[string]string, cas bool, index uint64) (uint64, error) {
	if err := f.fence(fmt.Sprintf("write variable %s@%s", path, ns)); err != nil {
		return 0, err
	}
	return f.Nomad.PutVar(ctx, ns, path, items, cas, index)
}

func (f fencedNomad) DeleteVar(ctx context.Context, ns, path string, index uint64) error {
	if err := f.fence(fmt.Sprintf("delete variable %s@%s", path, ns)); err != nil {
		return err
	}
	return f.Nomad.DeleteVar(ctx, ns, path, index)
}
