package controller

import (
	"context"
	"time"

	"github.com/hashicorp/nomad/api"
)

// deadlineNomad gives every Nomad call a deadline (Config.CallTimeout): a
// request that hangs (a server that accepts the connection and never
// answers, a proxy that stalls) ends with an error by then, so a round
// cannot wait on Nomad forever while the leader lock is renewed on its own
// schedule. The event stream is the exception: it is meant to stay open,
// and its subscription ends with the term or the controller.
type deadlineNomad struct {
	Nomad
	timeout time.Duration
}

// withDeadline wraps n unless timeout is 0 (no deadline).
func withDeadline(n Nomad, timeout time.Duration) Nomad {
	if timeout <= 0 {
		return n
	}
	return deadlineNomad{Nomad: n, timeout: timeout}
}

func (d deadlineNomad) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d.timeout)
}

func (d deadlineNomad) Signal(ctx context.Context, ns, allocID, task, signal string) error {
	ctx, cancel := d.ctx(ctx)
	defer cancel()
	return d.Nomad.Signal(ctx, ns, allocID, task, signal)
}

func (d deadlineNomad) JobExists(ctx context.Context, ns, jobID string) (bool, error) {
	ctx, cancel := d.ctx(ctx)
	defer cancel()
	return d.Nomad.JobExists(ctx, ns, jobID)
}

func (d deadlineNomad) StopAlloc(ctx context.Context, ns, allocID string) (uint64, error) {
	ctx, cancel := d.ctx(ctx)
	defer cancel()
	return d.Nomad.StopAlloc(ctx, ns, allocID)
}

func (d deadlineNomad) Scale(ctx context.Context, ns, jobID, group string, count int, message string, meta map[string]any, index uint64) (uint64, error) {
	ctx, cancel := d.ctx(ctx)
	defer cancel()
	return d.Nomad.Scale(ctx, ns, jobID, group, count, message, meta, index)
}

func (d deadlineNomad) ScaleAhead(ctx context.Context, ns, jobID, group string, count int, index uint64) (uint64, error) {
	ctx, cancel := d.ctx(ctx)
	defer cancel()
	return d.Nomad.ScaleAhead(ctx, ns, jobID, group, count, index)
}

func (d deadlineNomad) ScaleWithPolicy(ctx context.Context, ns, jobID, group string, count int, p ScalingPolicy, message string, meta map[string]any, index uint64, evalPriority int) (uint64, error) {
	ctx, cancel := d.ctx(ctx)
	defer cancel()
	return d.Nomad.ScaleWithPolicy(ctx, ns, jobID, group, count, p, message, meta, index, evalPriority)
}

func (d deadlineNomad) SetPriority(ctx context.Context, ns, jobID string, priority int, reason string, index uint64) (uint64, error) {
	ctx, cancel := d.ctx(ctx)
	defer cancel()
	return d.Nomad.SetPriority(ctx, ns, jobID, priority, reason, index)
}

func (d deadlineNomad) MoveJob(ctx context.Context, ns, jobID, nodePool, reason string, index uint64) (uint64, error) {
	ctx, cancel := d.ctx(ctx)
	defer cancel()
	return d.Nomad.MoveJob(ctx, ns, jobID, nodePool, reason, index)
}

func (d deadlineNomad) GetVar(ctx context.Context, ns, path string) (map[string]string, uint64, error) {
	ctx, cancel := d.ctx(ctx)
	defer cancel()
	return d.Nomad.GetVar(ctx, ns, path)
}

func (d deadlineNomad) PutVar(ctx context.Context, ns, path string, items map[string]string, cas bool, index uint64) (uint64, error) {
	ctx, cancel := d.ctx(ctx)
	defer cancel()
	return d.Nomad.PutVar(ctx, ns, path, items, cas, index)
}

func (d deadlineNomad) DeleteVar(ctx context.Context, ns, path string, index uint64) error {
	ctx, cancel := d.ctx(ctx)
	defer cancel()
	return d.Nomad.DeleteVar(ctx, ns, path, index)
}

func (d deadlineNomad) ListVars(ctx context.Context, ns, prefix string) ([]VarRef, error) {
	ctx, cancel := d.ctx(ctx)
	defer cancel()
	return d.Nomad.ListVars(ctx, ns, prefix)
}

func (d deadlineNomad) RegisterJob(ctx context.Context, job *api.Job) error {
	ctx, cancel := d.ctx(ctx)
	defer cancel()
	return d.Nomad.RegisterJob(ctx, job)
}

func (d deadlineNomad) PurgeJob(ctx context.Context, ns, jobID string) error {
	ctx, cancel := d.ctx(ctx)
	defer cancel()
	return d.Nomad.PurgeJob(ctx, ns, jobID)
}

func (d deadlineNomad) ListNodes(ctx context.Context, fresh bool) ([]*api.NodeListStub, uint64, error) {
	ctx, cancel := d.ctx(ctx)
	defer cancel()
	return d.Nomad.ListNodes(ctx, fresh)
}

func (d deadlineNomad) ListJobs(ctx context.Context, fresh bool) ([]*api.JobListStub, uint64, error) {
	ctx, cancel := d.ctx(ctx)
	defer cancel()
	return d.Nomad.ListJobs(ctx, fresh)
}

func (d deadlineNomad) ReadJob(ctx context.Context, ns, jobID string, fresh bool) (*api.Job, error) {
	ctx, cancel := d.ctx(ctx)
	defer cancel()
	return d.Nomad.ReadJob(ctx, ns, jobID, fresh)
}

func (d deadlineNomad) ListAllocs(ctx context.Context, fresh bool) ([]*api.AllocationListStub, uint64, error) {
	ctx, cancel := d.ctx(ctx)
	defer cancel()
	return d.Nomad.ListAllocs(ctx, fresh)
}

func (d deadlineNomad) ListBlockedEvals(ctx context.Context, fresh bool) ([]*api.Evaluation, uint64, error) {
	ctx, cancel := d.ctx(ctx)
	defer cancel()
	return d.Nomad.ListBlockedEvals(ctx, fresh)
}

func (d deadlineNomad) JobSummary(ctx context.Context, ns, jobID string, fresh bool) (*api.JobSummary, error) {
	ctx, cancel := d.ctx(ctx)
	defer cancel()
	return d.Nomad.JobSummary(ctx, ns, jobID, fresh)
}

func (d deadlineNomad) NodeStats(ctx context.Context, nodeID string) (*api.HostStats, error) {
	ctx, cancel := d.ctx(ctx)
	defer cancel()
	return d.Nomad.NodeStats(ctx, nodeID)
}

func (d deadlineNomad) AllocsByPrefix(ctx context.Context, ns, prefix string) ([]*api.AllocationListStub, error) {
	ctx, cancel := d.ctx(ctx)
	defer cancel()
	return d.Nomad.AllocsByPrefix(ctx, ns, prefix)
}

func (d deadlineNomad) StatAllocFile(ctx context.Context, ns, allocID, path string) (*api.AllocFileInfo, error) {
	ctx, cancel := d.ctx(ctx)
	defer cancel()
	return d.Nomad.StatAllocFile(ctx, ns, allocID, path)
}
