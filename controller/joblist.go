package controller

import (
	"sort"

	"github.com/hashicorp/nomad/api"
)

// The job list, decoded narrow. A full read lists every job, and Nomad's
// list carries each job's summary: every group's seven counts, the job's
// datacenters, name, status and more. Decoded into api.JobListStub, the
// list of 9,000-10,000 jobs at 1,000 nodes was 22.5 MB of the leader's
// 83 MB live heap while a resync ran (reflect.mapassign into each
// summary's map: 16.5 MB), and the cache kept every summary until the
// next one (takeListed), whole, although a round reads only the queued
// counts of jobs with a blocked evaluation (observer.queued). The
// controller's RSS, about twice its live heap, was 280-325 MiB against
// the goal's 256 (issue 33, 2026-11-30).
//
// listedJob is the part of a list entry the controller reads
// (observer.readJobs, readSkipped); the JSON decoder skips the rest
// without keeping it. A summary keeps only its groups with queued
// allocations: one with none is an empty summary (nil map), which says
// as much to observer.queued as the whole one did.
type listedJob struct {
	ID, ParentID, Namespace, Type string
	Periodic, Stop                bool
	ModifyIndex, JobModifyIndex   uint64
	JobSummary                    *struct {
		Summary map[string]struct{ Queued int }
	}
}

// stub is the entry as the observer reads it.
func (j *listedJob) stub() *api.JobListStub {
	s := &api.JobListStub{ID: j.ID, ParentID: j.ParentID, Namespace: j.Namespace, Type: j.Type, Periodic: j.Periodic,
		Stop: j.Stop, ModifyIndex: j.ModifyIndex, JobModifyIndex: j.JobModifyIndex}
	if j.JobSummary != nil {
		s.JobSummary = &api.JobSummary{JobID: j.ID, Namespace: j.Namespace}
		for g, q := range j.JobSummary.Summary {
			if q.Queued == 0 {
				continue
			}
			if s.JobSummary.Summary == nil {
				s.JobSummary.Summary = map[string]api.TaskGroupSummary{}
			}
			s.JobSummary.Summary[g] = api.TaskGroupSummary{Queued: q.Queued}
		}
	}
	return s
}

// listJobs is one page of the job list, decoded narrow (in Nomad's order
// by ID, as api.Jobs.List sorts it).
func (n *nomadClient) listJobs(q *api.QueryOptions) ([]*api.JobListStub, *api.QueryMeta, error) {
	out, meta, err := listNarrow(n.c, "/v1/jobs", q, (*listedJob).stub)
	sort.Slice(out, func(i, k int) bool { return out[i].ID < out[k].ID })
	return out, meta, err
}

// listNarrow is one page of a list decoded into L, the fields the
// observer reads, each entry then made the api's S by stub.
func listNarrow[L, S any](c *api.Client, path string, q *api.QueryOptions, stub func(*L) *S) ([]*S, *api.QueryMeta, error) {
	var page []*L
	meta, err := c.Raw().Query(path, &page, q)
	if err != nil {
		return nil, meta, err
	}
	out := make([]*S, len(page))
	for i, e := range page {
		out[i] = stub(e)
	}
	return out, meta, nil
}
