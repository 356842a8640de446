package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"testing"

	"github.com/hashicorp/nomad/api"
)

// listServer is Nomad answering one list (path) over HTTP, paginated as
// Nomad pages it (per_page, next_token, X-Nomad-NextToken), each entry
// in full: what the api package and the narrow decodes (joblist.go,
// alloclist.go) both read.
func listServer[T any](t testing.TB, path string, items []T) *api.Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != path {
			http.NotFound(w, r)
			return
		}
		from, _ := strconv.Atoi(r.URL.Query().Get("next_token"))
		per, _ := strconv.Atoi(r.URL.Query().Get("per_page"))
		to := len(items)
		if per > 0 && from+per < to {
			to = from + per
			w.Header().Set("X-Nomad-NextToken", strconv.Itoa(to))
		}
		w.Header().Set("X-Nomad-Index", "42")
		w.Header().Set("X-Nomad-LastContact", "0")
		w.Header().Set("X-Nomad-KnownLeader", "true")
		_ = json.NewEncoder(w).Encode(items[from:to])
	}))
	t.Cleanup(srv.Close)
	c, err := api.NewClient(&api.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// listedStub is a job list entry as Nomad sends it: its summary with
// every group's counts, and the fields the controller does not read.
func listedStub(ns, id string, queued map[string]int) *api.JobListStub {
	sum := &api.JobSummary{JobID: id, Namespace: ns, Summary: map[string]api.TaskGroupSummary{},
		Children: &api.JobChildrenSummary{Running: 1}, CreateIndex: 7, ModifyIndex: 9}
	for g, q := range queued {
		sum.Summary[g] = api.TaskGroupSummary{Queued: q, Running: 3, Complete: 2, Failed: 1, Starting: 1, Lost: 1}
	}
	return &api.JobListStub{ID: id, Namespace: ns, Name: id, Datacenters: []string{"dc1", "dc2"}, Type: "batch", Priority: 50,
		Status: "running", StatusDescription: "a long description of what it is doing", JobSummary: sum,
		CreateIndex: 5, ModifyIndex: 11, JobModifyIndex: 10, SubmitTime: 1_700_000_000, Meta: map[string]string{"steward.tier": "training"}}
}

// TestJobListNarrow: the job list of a full read is decoded into only
// what the observer reads (joblist.go), each summary reduced to its
// groups with queued allocations: the same answers for every field
// readJobs and readSkipped use, and for observer.queued, with nothing
// else kept. Decoded whole, the list was most of a resync's memory at
// 1,000 nodes (issue 33).
func TestJobListNarrow(t *testing.T) {
	stopped := listedStub("ml", "stopped", map[string]int{"work": 0})
	stopped.Stop = true
	child := listedStub("ml", "cron/periodic-1", map[string]int{"work": 0})
	child.ParentID, child.Periodic = "cron", true
	bare := listedStub("ml", "bare", nil)
	bare.JobSummary = nil
	cases := []struct {
		name string
		job  *api.JobListStub
		// want: the summary's groups as kept (nil: no summary at all)
		want map[string]int
	}{
		{"a job with a group queued keeps that group's count only", listedStub("ml", "queued", map[string]int{"work": 4, "side": 0}), map[string]int{"work": 4}},
		{"a job with nothing queued keeps an empty summary", listedStub("ml", "running", map[string]int{"work": 0, "side": 0}), map[string]int{}},
		{"a stopped job", stopped, map[string]int{}},
		{"a periodic child", child, map[string]int{}},
		{"an entry without a summary keeps none", bare, nil},
	}
	var jobs []*api.JobListStub
	for _, tc := range cases {
		jobs = append(jobs, tc.job)
	}
	for i := range 2 * listPage { // more than a page
		jobs = append(jobs, listedStub("ml", fmt.Sprintf("z-%05d", i), map[string]int{"work": i % 3}))
	}
	n := &nomadClient{c: listServer(t, "/v1/jobs", jobs)}
	got, index, err := n.ListJobs(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	if index != 42 || len(got) != len(jobs) {
		t.Fatalf("%d jobs at index %d, want %d at 42", len(got), index, len(jobs))
	}
	byID := map[string]*api.JobListStub{}
	for _, s := range got {
		byID[s.ID] = s
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, w := byID[tc.job.ID], tc.job
			if s == nil {
				t.Fatalf("%s not listed", w.ID)
			}
			if s.Namespace != w.Namespace || s.Type != w.Type || s.ParentID != w.ParentID || s.Periodic != w.Periodic ||
				s.Stop != w.Stop || s.ModifyIndex != w.ModifyIndex || s.JobModifyIndex != w.JobModifyIndex {
				t.Errorf("listed %+v, want the fields of %+v", s, w)
			}
			if s.Name != "" || s.Datacenters != nil || s.Meta != nil || s.StatusDescription != "" {
				t.Errorf("fields the controller does not read were kept: %+v", s)
			}
			if (s.JobSummary == nil) != (tc.want == nil) {
				t.Fatalf("summary %+v, want groups %v", s.JobSummary, tc.want)
			}
			if s.JobSummary == nil {
				return
			}
			if s.JobSummary.Children != nil || len(s.JobSummary.Summary) != len(tc.want) {
				t.Errorf("summary %+v, want only the queued groups %v", s.JobSummary, tc.want)
			}
			for g, q := range tc.want {
				if s.JobSummary.Summary[g].Queued != q {
					t.Errorf("group %s: %d queued, want %d", g, s.JobSummary.Summary[g].Queued, q)
				}
			}
		})
	}
}

// BenchmarkResyncJobList is a full read's job list at 1,000 nodes of the
// scale harness (10,000 jobs: its 8,000 GPUs' work, finished batch work
// not yet collected, and what waits), decoded as the api package does
// and narrow (joblist.go), and its summaries kept as the cache keeps
// them until the next resync (takeListed): the bytes allocated, and the
// live heap kept, per read.
//
//	go test -run '^$' -bench ResyncJobList -benchtime 5x -count 3 ./controller
func BenchmarkResyncJobList(b *testing.B) {
	var jobs []*api.JobListStub
	for i := range 10_000 {
		jobs = append(jobs, listedStub([]string{"ml", "research", "web"}[i%3], fmt.Sprintf("job-%05d", i), map[string]int{"work": i % 50 / 49, "side": 0}))
	}
	c := listServer(b, "/v1/jobs", jobs)
	n := &nomadClient{c: c}
	for _, v := range []struct {
		name string
		list func(*api.QueryOptions) ([]*api.JobListStub, *api.QueryMeta, error)
	}{
		{"api", c.Jobs().List},
		{"narrow", n.listJobs},
	} {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			var kept float64
			for range b.N {
				base := liveHeap()
				stubs, _, err := paginate(readOpts(context.Background(), api.AllNamespacesNamespace, false), v.list)
				if err != nil {
					b.Fatal(err)
				}
				summaries := make(map[jobKey]*api.JobSummary, len(stubs))
				for _, s := range stubs {
					summaries[jobKey{s.Namespace, s.ID}] = s.JobSummary
				}
				stubs = nil
				kept += liveHeap() - base
				runtime.KeepAlive(summaries)
			}
			b.ReportMetric(kept/float64(b.N)/(1<<20), "MiB-kept")
		})
	}
}
