package controller

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/nomad/api"
)

// errDryRun is a write refused because the controller only plans.
var errDryRun = errors.New("dry run: Steward changes nothing in Nomad")

// dryNomad is Nomad for a dry run (steward plan, -dry-run): reads go
// through, every write is refused. A dry run's round has no phase that
// writes (dryPhases); this is the boundary that keeps it so whatever
// path a write takes, as fencedNomad keeps a leader without its lease
// from writing.
type dryNomad struct{ Nomad }

func (dryNomad) refuse(what string) error { return fmt.Errorf("%s: %w", what, errDryRun) }

func (n dryNomad) Signal(_ context.Context, _, allocID, _, _ string) error {
	return n.refuse("signal allocation " + allocID)
}

func (n dryNomad) RegisterJob(_ context.Context, job *api.Job) error {
	return n.refuse("register job " + deref(job.ID))
}

func (n dryNomad) PurgeJob(_ context.Context, _, jobID string) error {
	return n.refuse("purge job " + jobID)
}

func (n dryNomad) StopAlloc(_ context.Context, _, allocID string) (uint64, error) {
	return 0, n.refuse("stop allocation " + allocID)
}

func (n dryNomad) Scale(_ context.Context, ns, jobID, _ string, _ int, _ string, _ map[string]any, _ uint64) (uint64, error) {
	return 0, n.refuse(fmt.Sprintf("scale %s/%s", ns, jobID))
}

func (n dryNomad) ScaleAhead(_ context.Context, ns, jobID, _ string, _ int, _ uint64) (uint64, error) {
	return 0, n.refuse(fmt.Sprintf("scale %s/%s", ns, jobID))
}

func (n dryNomad) ScaleWithPolicy(_ context.Context, ns, jobID, _ string, _ int, _ ScalingPolicy, _ string, _ map[string]any, _ uint64, _ int) (uint64, error) {
	return 0, n.refuse(fmt.Sprintf("scale %s/%s", ns, jobID))
}

func (n dryNomad) SetPriority(_ context.Context, ns, jobID string, _ int, _ string, _ uint64) (uint64, error) {
	return 0, n.refuse(fmt.Sprintf("set priority of %s/%s", ns, jobID))
}

func (n dryNomad) MoveJob(_ context.Context, ns, jobID, _, _ string, _ uint64) (uint64, error) {
	return 0, n.refuse(fmt.Sprintf("move %s/%s", ns, jobID))
}

func (n dryNomad) PutVar(_ context.Context, ns, path string, _ map[string]string, _ bool, _ uint64) (uint64, error) {
	return 0, n.refuse(fmt.Sprintf("write variable %s@%s", path, ns))
}

func (n dryNomad) DeleteVar(_ context.Context, ns, path string, _ uint64) error {
	return n.refuse(fmt.Sprintf("delete variable %s@%s", path, ns))
}
