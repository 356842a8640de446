package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	ibackoff "github.com/gpu-steward/steward/internal/backoff"
)

// Nomad is every write the controller makes, and the reads of its own
// variables: small enough to fake in unit tests of the acting logic.
type Nomad interface {
	// Signal sends a signal to one task of an allocation.
	Signal(ctx context.Context, namespace, allocID, task, signal string) error
	// JobExists reports whether Nomad knows the job (false once purged).
	JobExists(ctx context.Context, namespace, jobID string) (bool, error)
	// StopAlloc asks Nomad to stop an allocation and returns the index of
	// that write (its evaluation is created at it).
	StopAlloc(ctx context.Context, namespace, allocID string) (uint64, error)
	// Scale sets a group's count, only if the job's modify index is still
	// index (the one the decision was made on; 0: any), and returns the
	// job's new modify index.
	Scale(ctx context.Context, namespace, jobID, group string, count int, message string, meta map[string]any, index uint64) (uint64, error)
	// ScaleAhead sets a group's count as Scale does, by re-registering the
	// job with an evaluation that Nomad takes ahead of the rest of its
	// queue (eval priority evalPriorityAhead; the job's own priority is
	// unchanged). For work that GPUs were set aside for
	// (engine.Action.Ahead): Nomad places by priority, so queued work of a
	// higher priority would otherwise take them first.
	ScaleAhead(ctx context.Context, namespace, jobID, group string, count int, index uint64) (uint64, error)
	// ScaleWithPolicy sets a group's count and its scaling policy's
	// enabled, min and max in one re-registration of the job (Nomad
	// refuses a scale outside the policy's min and max), only if the
	// job's modify index is still index (0: any), then records message as
	// a scaling event; evalPriority, when not 0, is the priority of the
	// evaluation (as ScaleAhead's). It returns the job's new modify index.
	ScaleWithPolicy(ctx context.Context, namespace, jobID, group string, count int, p ScalingPolicy, message string, meta map[string]any, index uint64, evalPriority int) (uint64, error)
	// SetPriority re-registers the job with a priority, only if its modify
	// index is still index (0: any), and returns its new modify index.
	SetPriority(ctx context.Context, namespace, jobID string, priority int, reason string, index uint64) (uint64, error)
	// MoveJob re-registers the job in another node pool, only if its
	// modify index is still index (0: any), keeping its groups' counts;
	// it returns the new index.
	MoveJob(ctx context.Context, namespace, jobID, nodePool, reason string, index uint64) (uint64, error)
	// GetVar returns the items and modify index of a variable (nil when
	// it does not exist).
	GetVar(ctx context.Context, namespace, path string) (map[string]string, uint64, error)
	// PutVar writes a variable and returns its new modify index; with cas
	// it fails (errConflict) unless the variable's modify index is still
	// index (0: must not exist).
	PutVar(ctx context.Context, namespace, path string, items map[string]string, cas bool, index uint64) (uint64, error)
	// DeleteVar deletes a variable, only if its modify index is still index
	// (0: whatever it is).
	DeleteVar(ctx context.Context, namespace, path string, index uint64) error
	// ListVars lists variable paths under a prefix in a namespace ("*":
	// every namespace the token may read).
	ListVars(ctx context.Context, namespace, prefix string) ([]VarRef, error)
	// RegisterJob registers (or updates) one of Steward's own jobs: a
	// placeholder (placeholder.go).
	RegisterJob(ctx context.Context, job *api.Job) error
	// PurgeJob stops and purges one of Steward's own jobs.
	PurgeJob(ctx context.Context, namespace, jobID string) error

	// Cluster reads (reads.go). fresh asks the leader; otherwise any
	// server answers from its copy. Lists also return the Nomad index
	// they reflect. A job gone between a list and its read is nil, not an
	// error.

	// ListNodes lists client nodes with their resources.
	ListNodes(ctx context.Context, fresh bool) ([]*api.NodeListStub, uint64, error)
	// ListJobs lists jobs in every namespace.
	ListJobs(ctx context.Context, fresh bool) ([]*api.JobListStub, uint64, error)
	// ReadJob reads a job's spec; nil when it is gone.
	ReadJob(ctx context.Context, namespace, jobID string, fresh bool) (*api.Job, error)
	// ListAllocs lists the allocations that are placed or running and
	// meant to run, and those that finished by themselves (a batch job's
	// completed work: Observation.Done), with their resources, in every
	// namespace.
	ListAllocs(ctx context.Context, fresh bool) ([]*api.AllocationListStub, uint64, error)
	// AllocsByPrefix lists a namespace's allocations whose IDs begin with
	// prefix, whatever their status (with their task states): how a
	// preemption's victim ended, once Nomad no longer lists it as meant to
	// run (keepCompletedOut).
	AllocsByPrefix(ctx context.Context, namespace, prefix string) ([]*api.AllocationListStub, error)
	// ListBlockedEvals lists blocked evaluations in every namespace.
	ListBlockedEvals(ctx context.Context, fresh bool) ([]*api.Evaluation, uint64, error)
	// JobSummary reads a job's summary; nil when it is gone.
	JobSummary(ctx context.Context, namespace, jobID string, fresh bool) (*api.JobSummary, error)
	// NodeStats reads a client's host stats (its devices' included),
	// through the servers.
	NodeStats(ctx context.Context, nodeID string) (*api.HostStats, error)
	// Events follows the event stream from index (watchTopics).
	Events(ctx context.Context, index uint64) (<-chan *api.Events, error)
	// StatAllocFile reads a file's metadata in an allocation's dir (the
	// allocation filesystem API, through the servers); nil when there is
	// no such file. Only the checkpoint-written poll calls it
	// (written_poll.go).
	StatAllocFile(ctx context.Context, namespace, allocID, path string) (*api.AllocFileInfo, error)
}

// VarRef names a variable; Index is its modify index as listed (0 where
// not known), which changes with every write to it.
type VarRef struct {
	Namespace, Path string
	Index           uint64
}

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

func (n *nomadClient) Signal(ctx context.Context, ns, allocID, task, signal string) error {
	err := n.c.Allocations().Signal(&api.Allocation{ID: allocID, Namespace: ns}, rq(ctx, ns), task, signal)
	return needs(err, "alloc-lifecycle", "signal task %s of allocation %s", task, allocID)
}

func (n *nomadClient) JobExists(ctx context.Context, ns, jobID string) (bool, error) {
	_, _, err := n.c.Jobs().Info(jobID, rq(ctx, ns))
	if isNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, needs(err, "read-job", "read job %s/%s", ns, jobID)
	}
	return true, nil
}

func (n *nomadClient) StatAllocFile(ctx context.Context, ns, allocID, path string) (*api.AllocFileInfo, error) {
	info, _, err := n.c.AllocFS().Stat(&api.Allocation{ID: allocID, Namespace: ns}, path, rq(ctx, ns))
	if err != nil && isNoSuchFile(err) {
		return nil, nil
	}
	return info, needs(err, "read-fs", "stat %s in allocation %s", path, allocID)
}

// isNoSuchFile is the client's answer for a missing file: its os.Stat
// error, passed on in the message (a 500, or a 404 on some versions).
func isNoSuchFile(err error) bool {
	var ue api.UnexpectedResponseError
	return errors.As(err, &ue) && ue.StatusCode() == http.StatusNotFound ||
		strings.Contains(err.Error(), "no such file or directory")
}

func isNotFound(err error) bool {
	var ue api.UnexpectedResponseError
	return errors.As(err, &ue) && ue.StatusCode() == http.StatusNotFound ||
		err != nil && strings.Contains(err.Error(), "job not found")
}

func (n *nomadClient) StopAlloc(ctx context.Context, ns, allocID string) (uint64, error) {
	resp, err := n.c.Allocations().Stop(&api.Allocation{ID: allocID, Namespace: ns}, rq(ctx, ns))
	if err != nil {
		return 0, needs(err, "alloc-lifecycle", "stop allocation %s", allocID)
	}
	return resp.LastIndex, nil
}

func (n *nomadClient) Scale(ctx context.Context, ns, jobID, group string, count int, message string, meta map[string]any, index uint64) (uint64, error) {
	c64 := int64(count)
	resp, _, err := n.c.Jobs().ScaleWithRequest(jobID, &api.ScalingRequest{
		Count: &c64, Target: map[string]string{"Job": jobID, "Group": group}, Message: message, Meta: meta,
		JobModifyIndex: index,
	}, wq(ctx, ns))
	var newIndex uint64
	if err == nil {
		newIndex = resp.JobModifyIndex
	}
	if err != nil && strings.Contains(err.Error(), "active deployment") {
		// Nomad refuses to scale a service job while its deployment runs
		// (and a deployment whose allocations wait for GPUs runs until its
		// progress deadline). Registering the job with the new count is
		// allowed: it starts a new version, and the message stays in
		// Steward's record instead of a scaling event.
		newIndex, err = n.registerCount(ctx, ns, jobID, group, count, index, 0)
	}
	if err != nil && strings.Contains(err.Error(), "Enforcing job modify index") {
		err = fmt.Errorf("%w: %v", errJobChanged, err)
	}
	return newIndex, needs(err, "scale-job", "scale %s/%s group %s to %d", ns, jobID, group, count)
}

// errJobChanged is a write refused because the job changed since the
// controller read it: the next round decides again on what it is now.
var errJobChanged = errors.New("the job changed since it was read")

// evalPriorityAhead is the evaluation priority of ScaleAhead: the highest
// Nomad accepts, above every tier's job priority.
const evalPriorityAhead = 100

func (n *nomadClient) ScaleAhead(ctx context.Context, ns, jobID, group string, count int, index uint64) (uint64, error) {
	newIndex, err := n.registerCount(ctx, ns, jobID, group, count, index, evalPriorityAhead)
	if err != nil && strings.Contains(err.Error(), "Enforcing job modify index") {
		err = fmt.Errorf("%w: %v", errJobChanged, err)
	}
	return newIndex, needs(err, "submit-job", "scale %s/%s group %s to %d ahead of the queue", ns, jobID, group, count)
}

func (n *nomadClient) ScaleWithPolicy(ctx context.Context, ns, jobID, group string, count int, p ScalingPolicy, message string, meta map[string]any, index uint64, evalPriority int) (uint64, error) {
	job, _, err := n.c.Jobs().Info(jobID, rq(ctx, ns))
	if err != nil {
		return 0, needs(err, "read-job", "read job %s/%s", ns, jobID)
	}
	if index != 0 && derefU64(job.JobModifyIndex) != index {
		return 0, fmt.Errorf("scale %s/%s group %s to %d: %w (modify index %d, decided on %d)", ns, jobID, group, count, errJobChanged, derefU64(job.JobModifyIndex), index)
	}
	var tg *api.TaskGroup
	for _, g := range job.TaskGroups {
		if g.Name != nil && *g.Name == group {
			tg = g
		}
	}
	if tg == nil || tg.Scaling == nil {
		return 0, fmt.Errorf("scale %s/%s group %s: the group has no scaling policy", ns, jobID, group)
	}
	tg.Count = &count
	tg.Scaling.Enabled, tg.Scaling.Min, tg.Scaling.Max = &p.Enabled, &p.Min, &p.Max
	resp, _, err := n.c.Jobs().RegisterOpts(job, &api.RegisterOptions{EnforceIndex: true, ModifyIndex: derefU64(job.JobModifyIndex),
		EvalPriority: evalPriority}, wq(ctx, ns))
	if err != nil {
		if strings.Contains(err.Error(), "Enforcing job modify index") {
			err = fmt.Errorf("%w: %v", errJobChanged, err)
		}
		return 0, needs(err, "submit-job", "scale %s/%s group %s to %d with scaling policy %s", ns, jobID, group, count, p)
	}
	// The message as a scaling event (a scale request without a count
	// changes nothing), shown on the job's page as Steward's other
	// scales are. Steward's record has it too: a failure only loses the
	// event.
	_, _, _ = n.c.Jobs().ScaleWithRequest(jobID, &api.ScalingRequest{
		Target: map[string]string{"Job": jobID, "Group": group}, Message: message, Meta: meta,
	}, wq(ctx, ns))
	return resp.JobModifyIndex, nil
}

// registerCount registers the job as it is with one group's count changed;
// evalPriority, when not 0, is the priority of the evaluation it creates.
func (n *nomadClient) registerCount(ctx context.Context, ns, jobID, group string, count int, index uint64, evalPriority int) (uint64, error) {
	job, _, err := n.c.Jobs().Info(jobID, rq(ctx, ns))
	if err != nil {
		return 0, fmt.Errorf("read job: %w", err)
	}
	if index != 0 && derefU64(job.JobModifyIndex) != index {
		return 0, fmt.Errorf("register with count %d: %w (modify index %d, decided on %d)", count, errJobChanged, derefU64(job.JobModifyIndex), index)
	}
	found := false
	for _, tg := range job.TaskGroups {
		if tg.Name != nil && *tg.Name == group {
			tg.Count = &count
			found = true
		}
	}
	if !found {
		return 0, fmt.Errorf("job has no group %q", group)
	}
	resp, _, err := n.c.Jobs().RegisterOpts(job, &api.RegisterOptions{EnforceIndex: true, ModifyIndex: derefU64(job.JobModifyIndex),
		EvalPriority: evalPriority}, wq(ctx, ns))
	if err != nil {
		return 0, fmt.Errorf("register with count %d: %w", count, err)
	}
	return resp.JobModifyIndex, nil
}

func (n *nomadClient) RegisterJob(ctx context.Context, job *api.Job) error {
	_, _, err := n.c.Jobs().Register(job, wq(ctx, deref(job.Namespace)))
	return needs(err, "submit-job", "register job %s/%s", deref(job.Namespace), deref(job.ID))
}

func (n *nomadClient) PurgeJob(ctx context.Context, ns, jobID string) error {
	_, _, err := n.c.Jobs().Deregister(jobID, true, wq(ctx, ns))
	if isNotFound(err) {
		return nil // gone already
	}
	return needs(err, "submit-job", "purge job %s/%s", ns, jobID)
}

func (n *nomadClient) SetPriority(ctx context.Context, ns, jobID string, priority int, reason string, index uint64) (uint64, error) {
	job, _, err := n.c.Jobs().Info(jobID, rq(ctx, ns))
	if err != nil {
		return 0, needs(err, "read-job", "read job %s/%s", ns, jobID)
	}
	if index != 0 && derefU64(job.JobModifyIndex) != index {
		return 0, fmt.Errorf("set priority of %s/%s: %w", ns, jobID, errJobChanged)
	}
	job.Priority = &priority
	resp, _, err := n.c.Jobs().RegisterOpts(job, &api.RegisterOptions{
		EnforceIndex: true, ModifyIndex: derefU64(job.JobModifyIndex),
		// Keep counts Steward (or an autoscaler) set.
		PreserveCounts: true,
	}, wq(ctx, ns))
	if err != nil {
		return 0, needs(err, "submit-job", "set priority of %s/%s to %d (%s)", ns, jobID, priority, reason)
	}
	return resp.JobModifyIndex, nil
}

func (n *nomadClient) MoveJob(ctx context.Context, ns, jobID, nodePool, reason string, index uint64) (uint64, error) {
	job, _, err := n.c.Jobs().Info(jobID, rq(ctx, ns))
	if err != nil {
		return 0, needs(err, "read-job", "read job %s/%s", ns, jobID)
	}
	if index != 0 && derefU64(job.JobModifyIndex) != index {
		return 0, fmt.Errorf("move %s/%s: %w", ns, jobID, errJobChanged)
	}
	job.NodePool = &nodePool
	resp, _, err := n.c.Jobs().RegisterOpts(job, &api.RegisterOptions{
		EnforceIndex: true, ModifyIndex: derefU64(job.JobModifyIndex), PreserveCounts: true,
	}, wq(ctx, ns))
	if err != nil {
		return 0, needs(err, "submit-job", "move %s/%s to node pool %s (%s)", ns, jobID, nodePool, reason)
	}
	return resp.JobModifyIndex, nil
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

func (n *nomadClient) PutVar(ctx context.Context, ns, path string, items map[string]string, cas bool, index uint64) (uint64, error) {
	v := &api.Variable{Namespace: ns, Path: path, Items: items}
	var out *api.Variable
	var err error
	if cas {
		v.ModifyIndex = index
		out, _, err = n.c.Variables().CheckedUpdate(v, wq(ctx, ns))
		var conflict api.ErrCASConflict
		if errors.As(err, &conflict) {
			return 0, fmt.Errorf("write variable %s@%s: %w", path, ns, errConflict)
		}
	} else {
		out, _, err = n.c.Variables().Update(v, wq(ctx, ns))
	}
	if err != nil {
		return 0, needs(err, "variables write", "write variable %s@%s", path, ns)
	}
	return out.ModifyIndex, nil
}

func (n *nomadClient) DeleteVar(ctx context.Context, ns, path string, index uint64) error {
	var err error
	if index != 0 {
		_, err = n.c.Variables().CheckedDelete(path, index, wq(ctx, ns))
		var conflict api.ErrCASConflict
		if errors.As(err, &conflict) {
			return fmt.Errorf("delete variable %s@%s: %w", path, ns, errConflict)
		}
	} else {
		_, err = n.c.Variables().Delete(path, wq(ctx, ns))
	}
	if errors.Is(err, api.ErrVariablePathNotFound) {
		return nil
	}
	return needs(err, "variables destroy", "delete variable %s@%s", path, ns)
}

func (n *nomadClient) ListVars(ctx context.Context, ns, prefix string) ([]VarRef, error) {
	q := rq(ctx, ns)
	var out []VarRef
	for {
		list, meta, err := n.c.Variables().PrefixList(prefix, q)
		if err != nil {
			return nil, needs(err, "variables list", "list variables under %s", prefix)
		}
		for _, v := range list {
			out = append(out, VarRef{Namespace: v.Namespace, Path: v.Path, Index: v.ModifyIndex})
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
	return ibackoff.Exponential(time.Second, max, n)
}
