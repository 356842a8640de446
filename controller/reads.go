package controller

import (
	"context"

	"github.com/hashicorp/nomad/api"
)

// Cluster reads go through the Nomad interface too (not the API client), so
// that a whole round runs against the fake in unit tests. Lists are
// paginated here (a page of listPage), ask only for what the controller
// reads, and are stale reads unless fresh is set: any server answers from
// its own copy, which trails the leader by a few milliseconds, and spares
// the leader (Nomad's own clients read this way). Writes are fenced by
// modify indexes (Scale, SetPriority, PutVar with check-and-set), so a
// decision made on a slightly old read is refused rather than misapplied;
// the re-read after a round's actions is fresh.

// listPage is how many items one list request asks for: large enough that
// a cluster of 10,000 nodes is a few requests, small enough that no single
// response holds the leader's attention for long.
const listPage = 1000

// readOpts are the query options of one cluster read.
func readOpts(ctx context.Context, ns string, fresh bool) *api.QueryOptions {
	return (&api.QueryOptions{Namespace: ns, AllowStale: !fresh, PerPage: listPage}).WithContext(ctx)
}

// paginate calls list with q until the server returns no next token, and
// returns the items and the index of the first page (what the list
// reflects at least: events after it are newer).
func paginate[T any](q *api.QueryOptions, list func(*api.QueryOptions) ([]T, *api.QueryMeta, error)) ([]T, uint64, error) {
	var out []T
	var index uint64
	for {
		page, meta, err := list(q)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, page...)
		if meta != nil && index == 0 {
			index = meta.LastIndex
		}
		if meta == nil || meta.NextToken == "" {
			return out, index, nil
		}
		q.NextToken = meta.NextToken
	}
}

func (n *nomadClient) ListNodes(ctx context.Context, fresh bool) ([]*api.NodeListStub, uint64, error) {
	q := readOpts(ctx, "", fresh)
	q.Params = map[string]string{"resources": "true"}
	nodes, index, err := paginate(q, n.c.Nodes().List)
	return nodes, index, needs(err, "node read", "list nodes")
}

func (n *nomadClient) ListJobs(ctx context.Context, fresh bool) ([]*api.JobListStub, uint64, error) {
	jobs, index, err := paginate(readOpts(ctx, api.AllNamespacesNamespace, fresh), n.listJobs) // narrow (joblist.go)
	return jobs, index, needs(err, "list-jobs", "list jobs")
}

func (n *nomadClient) ReadJob(ctx context.Context, ns, id string, fresh bool) (*api.Job, error) {
	q := readOpts(ctx, ns, fresh)
	q.PerPage = 0
	job, _, err := n.c.Jobs().Info(id, q)
	if isNotFound(err) {
		return nil, nil
	}
	return job, needs(err, "read-job", "read job %s/%s", ns, id)
}

// allocFilter keeps the allocations that hold or will hold resources, and
// those that finished by themselves (cacheAlloc): a batch job's completed
// work, which Steward's scales must leave out of its counts.
const allocFilter = `ClientStatus != "failed" and ClientStatus != "lost" and DesiredStatus == "run"`

func (n *nomadClient) ListAllocs(ctx context.Context, fresh bool) ([]*api.AllocationListStub, uint64, error) {
	q := readOpts(ctx, api.AllNamespacesNamespace, fresh)
	q.Params = map[string]string{"resources": "true"}
	q.Filter = allocFilter
	allocs, index, err := paginate(q, n.listAllocs) // narrow (alloclist.go)
	return allocs, index, needs(err, "read-job", "list allocations")
}

func (n *nomadClient) AllocsByPrefix(ctx context.Context, ns, prefix string) ([]*api.AllocationListStub, error) {
	q := readOpts(ctx, ns, false)
	q.Prefix = prefix
	allocs, _, err := n.c.Allocations().List(q)
	return allocs, needs(err, "read-job", "list allocations %s* in %s", prefix, ns)
}

func (n *nomadClient) ListBlockedEvals(ctx context.Context, fresh bool) ([]*api.Evaluation, uint64, error) {
	q := readOpts(ctx, api.AllNamespacesNamespace, fresh)
	q.Filter = `Status == "blocked"`
	evals, index, err := paginate(q, n.c.Evaluations().List)
	return evals, index, needs(err, "read-job", "list blocked evaluations")
}

func (n *nomadClient) JobSummary(ctx context.Context, ns, id string, fresh bool) (*api.JobSummary, error) {
	q := readOpts(ctx, ns, fresh)
	q.PerPage = 0
	sum, _, err := n.c.Jobs().Summary(id, q)
	if isNotFound(err) {
		return nil, nil
	}
	return sum, needs(err, "read-job", "read summary of job %s/%s", ns, id)
}

func (n *nomadClient) NodeStats(ctx context.Context, nodeID string) (*api.HostStats, error) {
	stats, err := n.c.Nodes().Stats(nodeID, rq(ctx, ""))
	return stats, needs(err, "node read", "read stats of node %s", nodeID)
}

func (n *nomadClient) Events(ctx context.Context, index uint64) (<-chan *api.Events, error) {
	q := (&api.QueryOptions{Namespace: api.AllNamespacesNamespace}).WithContext(ctx)
	events, err := n.c.EventStream().Stream(ctx, watchTopics, index, q)
	if err != nil {
		return nil, needs(err, "read-job and node read", "subscribe to events from index %d", index)
	}
	return events, nil
}
