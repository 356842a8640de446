package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"
)

// Nomad is every write the controller makes, and the reads of its own
// variables: small enough to fake in unit tests of the acting logic.
type Nomad interface {
	Signal(ctx context.Context, namespace, allocID, signal string) error
	StopAlloc(ctx context.Context, namespace, allocID string) error
	Scale(ctx context.Context, namespace, jobID, group string, count int, message string, meta map[string]any) error
	SetPriority(ctx context.Context, namespace, jobID string, priority int, reason string) error
	// GetVar returns the items and modify index of a variable (nil when
	// it does not exist).
	GetVar(ctx context.Context, namespace, path string) (map[string]string, uint64, error)
	// PutVar writes a variable; with cas it fails unless the variable's
	// modify index is still index (0: must not exist).
	PutVar(ctx context.Context, namespace, path string, items map[string]string, cas bool, index uint64) error
	DeleteVar(ctx context.Context, namespace, path string) error
	// ListVars lists variable paths under a prefix in every namespace.
	ListVars(ctx context.Context, prefix string) ([]VarRef, error)
}

// VarRef names a variable.
type VarRef struct{ Namespace, Path string }

// errConflict is a failed check-and-set write.
var errConflict = errors.New("variable changed since it was read")

// nomadClient is Nomad through its official API client.
type nomadClient struct{ c *api.Client }

// NewNomad wraps an API client.
func NewNomad(c *api.Client) Nomad { return &nomadClient{c: c} }

func wq(ctx context.Context, ns string) *api.WriteOptions {
	return (&api.WriteOptions{Namespace: ns}).WithContext(ctx)
}

func rq(ctx context.Context, ns string) *api.QueryOptions {
	return (&api.QueryOptions{Namespace: ns}).WithContext(ctx)
}

func (n *nomadClient) Signal(ctx context.Context, ns, allocID, signal string) error {
	// An empty task name signals every task of the allocation.
	err := n.c.Allocations().Signal(&api.Allocation{ID: allocID, Namespace: ns}, rq(ctx, ns), "", signal)
	return needs(err, "alloc-lifecycle", "signal allocation %s", allocID)
}

func (n *nomadClient) StopAlloc(ctx context.Context, ns, allocID string) error {
	_, err := n.c.Allocations().Stop(&api.Allocation{ID: allocID, Namespace: ns}, rq(ctx, ns))
	return needs(err, "alloc-lifecycle", "stop allocation %s", allocID)
}

func (n *nomadClient) Scale(ctx context.Context, ns, jobID, group string, count int, message string, meta map[string]any) error {
	_, _, err := n.c.Jobs().Scale(jobID, group, &count, message, false, meta, wq(ctx, ns))
	if err != nil && strings.Contains(err.Error(), "active deployment") {
		// Nomad refuses to scale a service job while its deployment runs
		// (and a deployment whose allocations wait for GPUs runs until its
		// progress deadline). Registering the job with the new count is
		// allowed: it starts a new version, and the message stays in
		// Steward's record instead of a scaling event.
		err = n.registerCount(ctx, ns, jobID, group, count)
	}
	return needs(err, "scale-job", "scale %s/%s group %s to %d", ns, jobID, group, count)
}

func (n *nomadClient) registerCount(ctx context.Context, ns, jobID, group string, count int) error {
	job, _, err := n.c.Jobs().Info(jobID, rq(ctx, ns))
	if err != nil {
		return fmt.Errorf("read job: %w", err)
	}
	found := false
	for _, tg := range job.TaskGroups {
		if tg.Name != nil && *tg.Name == group {
			tg.Count = &count
			found = true
		}
	}
	if !found {
		return fmt.Errorf("job has no group %q", group)
	}
	_, _, err = n.c.Jobs().RegisterOpts(job, &api.RegisterOptions{EnforceIndex: true, ModifyIndex: derefU64(job.JobModifyIndex)}, wq(ctx, ns))
	if err != nil {
		return fmt.Errorf("register with count %d: %w", count, err)
	}
	return nil
}

func (n *nomadClient) SetPriority(ctx context.Context, ns, jobID string, priority int, reason string) error {
	job, _, err := n.c.Jobs().Info(jobID, rq(ctx, ns))
	if err != nil {
		return needs(err, "read-job", "read job %s/%s", ns, jobID)
	}
	job.Priority = &priority
	_, _, err = n.c.Jobs().RegisterOpts(job, &api.RegisterOptions{
		EnforceIndex: true, ModifyIndex: derefU64(job.JobModifyIndex),
		// Keep counts Steward (or an autoscaler) set.
		PreserveCounts: true,
	}, wq(ctx, ns))
	return needs(err, "submit-job", "set priority of %s/%s to %d (%s)", ns, jobID, priority, reason)
}

func (n *nomadClient) GetVar(ctx context.Context, ns, path string) (map[string]string, uint64, error) {
	v, _, err := n.c.Variables().Read(path, rq(ctx, ns))
	if errors.Is(err, api.ErrVariablePathNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, needs(err, "variables read", "read variable %s@%s", path, ns)
	}
	return v.Items, v.ModifyIndex, nil
}

func (n *nomadClient) PutVar(ctx context.Context, ns, path string, items map[string]string, cas bool, index uint64) error {
	v := &api.Variable{Namespace: ns, Path: path, Items: items}
	var err error
	if cas {
		v.ModifyIndex = index
		_, _, err = n.c.Variables().CheckedUpdate(v, wq(ctx, ns))
		var conflict api.ErrCASConflict
		if errors.As(err, &conflict) {
			return fmt.Errorf("write variable %s@%s: %w", path, ns, errConflict)
		}
	} else {
		_, _, err = n.c.Variables().Update(v, wq(ctx, ns))
	}
	return needs(err, "variables write", "write variable %s@%s", path, ns)
}

func (n *nomadClient) DeleteVar(ctx context.Context, ns, path string) error {
	_, err := n.c.Variables().Delete(path, wq(ctx, ns))
	if errors.Is(err, api.ErrVariablePathNotFound) {
		return nil
	}
	return needs(err, "variables destroy", "delete variable %s@%s", path, ns)
}

func (n *nomadClient) ListVars(ctx context.Context, prefix string) ([]VarRef, error) {
	q := rq(ctx, api.AllNamespacesNamespace)
	var out []VarRef
	for {
		list, meta, err := n.c.Variables().PrefixList(prefix, q)
		if err != nil {
			return nil, needs(err, "variables list", "list variables under %s", prefix)
		}
		for _, v := range list {
			out = append(out, VarRef{Namespace: v.Namespace, Path: v.Path})
		}
		if meta == nil || meta.NextToken == "" {
			return out, nil
		}
		q.NextToken = meta.NextToken
	}
}

// needs wraps an error with what was being done and, when Nomad refused
// for lack of permission, the ACL capability the controller's token lacks
// (Nomad's own 403 does not say).
func needs(err error, capability, format string, args ...any) error {
	if err == nil {
		return nil
	}
	what := fmt.Sprintf(format, args...)
	if isForbidden(err) {
		return fmt.Errorf("%s: %w (the controller's ACL token lacks %q: see acl/steward-controller.policy.hcl)", what, err, capability)
	}
	return fmt.Errorf("%s: %w", what, err)
}

func isForbidden(err error) bool {
	var ue api.UnexpectedResponseError
	if errors.As(err, &ue) && ue.StatusCode() == http.StatusForbidden {
		return true
	}
	return err != nil && strings.Contains(err.Error(), "403")
}

// backoff is the wait before retry n (0-based) after Nomad errors: 1 s
// doubling to max, so a Nomad outage costs a request every max at most.
func backoff(n int, max time.Duration) time.Duration {
	d := time.Second
	for i := 0; i < n && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	return d
}
