package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// event is one batch of the event stream as Nomad sends it (JSON).
func event(t *testing.T, index int, topic, typ, payloadKey, payload string) *api.Events {
	t.Helper()
	raw := fmt.Sprintf(`{"Index":%d,"Events":[{"Topic":%q,"Type":%q,"Key":"k","Index":%d,"Payload":{%q:%s}}]}`,
		index, topic, typ, index, payloadKey, payload)
	var es api.Events
	if err := json.Unmarshal([]byte(raw), &es); err != nil {
		t.Fatalf("event %s: %v", raw, err)
	}
	return &es
}

const (
	allocJSON = `{"ID":"a1-0000-0000","Namespace":"ml","JobID":"train","TaskGroup":"work","NodeID":"n1","ClientStatus":%q,"DesiredStatus":%q,
		"CreateTime":1,"AllocatedResources":{"Tasks":{"work":{"Devices":[{"Type":"gpu","DeviceIDs":["g0","g1"]}]}}},
		"TaskStates":{"work":{"State":"running","StartedAt":"2026-11-22T11:00:00Z"}}}`
	jobJSON = `{"ID":"train","Namespace":"ml","Type":"batch","Priority":40,"JobModifyIndex":%d,"Meta":{"steward.tier":"training"},
		"TaskGroups":[{"Name":"work","Count":%d,"Tasks":[{"Name":"work","Driver":"raw_exec","Resources":{"Devices":[{"Name":"gpu","Count":2}]}}]}]}`
	nodeJSON = `{"ID":"n2","Name":"gpu-2","NodePool":"default","Status":%q,"SchedulingEligibility":"eligible",
		"Drivers":{"raw_exec":{"Detected":true,"Healthy":true}},
		"NodeResources":{"Devices":[{"Vendor":"nvidia","Type":"gpu","Name":"sim","Instances":[{"ID":"n2-g0","Healthy":true},{"ID":"n2-g1","Healthy":true}]}]}}`
	evalJSON = `{"ID":"ev1","Namespace":"ml","JobID":"train","Status":%q,"CreateTime":1,"ModifyTime":2}`
)

// The cache follows events: each event carries the whole object as of its
// index, so applying one twice, or one older than what the cache holds
// (a full read after it), changes nothing; terminal allocations, purged
// jobs, deregistered nodes and evaluations no longer blocked leave it.
func TestCacheFollowsEvents(t *testing.T) {
	type step struct {
		events *api.Events
		want   string // the cache after it: allocs/jobs/usable nodes/blocked
	}
	var steps []step
	add := func(es *api.Events, want string) { steps = append(steps, step{es, want}) }
	add(event(t, 110, "Job", "JobRegistered", "Job", fmt.Sprintf(jobJSON, 110, 1)), "allocs[] jobs[ml/train@110x1] nodes[n1] blocked[]")
	add(event(t, 111, "Evaluation", "EvaluationUpdated", "Evaluation", fmt.Sprintf(evalJSON, "blocked")), "allocs[] jobs[ml/train@110x1] nodes[n1] blocked[ev1]")
	add(event(t, 112, "Allocation", "AllocationUpdated", "Allocation", fmt.Sprintf(allocJSON, "running", "run")), "allocs[a1-0000-0000:running] jobs[ml/train@110x1] nodes[n1] blocked[ev1]")
	add(event(t, 113, "Evaluation", "EvaluationUpdated", "Evaluation", fmt.Sprintf(evalJSON, "complete")), "allocs[a1-0000-0000:running] jobs[ml/train@110x1] nodes[n1] blocked[]")
	// A replay of an older event (the stream resumed from an earlier
	// index) takes nothing back.
	add(event(t, 111, "Evaluation", "EvaluationUpdated", "Evaluation", fmt.Sprintf(evalJSON, "blocked")), "allocs[a1-0000-0000:running] jobs[ml/train@110x1] nodes[n1] blocked[]")
	add(event(t, 114, "Node", "NodeRegistration", "Node", fmt.Sprintf(nodeJSON, "ready")), "allocs[a1-0000-0000:running] jobs[ml/train@110x1] nodes[n1 n2] blocked[]")
	add(event(t, 115, "Node", "NodeEvent", "Node", fmt.Sprintf(nodeJSON, "down")), "allocs[a1-0000-0000:running] jobs[ml/train@110x1] nodes[n1] blocked[]")
	add(event(t, 116, "Allocation", "AllocationUpdateDesiredStatus", "Allocation", fmt.Sprintf(allocJSON, "running", "stop")), "allocs[] jobs[ml/train@110x1] nodes[n1] blocked[]")
	add(event(t, 117, "Job", "JobRegistered", "Job", fmt.Sprintf(jobJSON, 117, 1)), "allocs[] jobs[ml/train@117x1] nodes[n1] blocked[]")
	running := strings.Replace(fmt.Sprintf(allocJSON, "running", "run"), "a1-0000-0000", "a2-0000-0000", 1)
	add(event(t, 118, "Allocation", "PlanResult", "Allocation", running), "allocs[a2-0000-0000:running] jobs[ml/train@117x1] nodes[n1] blocked[]")
	// A purge (nomad job stop -purge) deletes the job's allocations with
	// it, in one transaction: Nomad sends no event for a deleted
	// allocation, only the job's deregistration. Its GPUs are free.
	purge := event(t, 119, "Job", "JobDeregistered", "Job", fmt.Sprintf(jobJSON, 117, 1))
	purge.Events[0].Payload["Deleted"] = true
	add(purge, "allocs[] jobs[] nodes[n1] blocked[]")

	c := newClusterCache("steward")
	c.replace(&clusterRead{index: 100, nodes: map[string]cachedNode{"n1": {node: ObservedNode{ID: "n1", GPUs: 4}, usable: true}},
		jobs: map[jobKey]*ObservedJob{}, allocs: map[string]ObservedAlloc{}, blocked: map[string]blockedEval{}, seen: map[string]uint64{"n/n1": 90}})
	for i, s := range steps {
		c.apply(s.events)
		if got := c.describe(); got != s.want {
			t.Fatalf("after event %d (%s %s): %s, want %s", i+1, s.events.Events[0].Topic, s.events.Events[0].Type, got, s.want)
		}
	}
}

// A full read merges entity by entity: what an event newer than the read
// brought stays; what the events missed is corrected and counted.
func TestCacheResync(t *testing.T) {
	c := newClusterCache("steward")
	empty := func(index uint64) *clusterRead {
		return &clusterRead{index: index, nodes: map[string]cachedNode{}, jobs: map[jobKey]*ObservedJob{}, allocs: map[string]ObservedAlloc{},
			blocked: map[string]blockedEval{}, seen: map[string]uint64{}}
	}
	c.replace(empty(100))
	c.apply(event(t, 120, "Allocation", "AllocationUpdated", "Allocation", fmt.Sprintf(allocJSON, "running", "run")))

	// A stale read at index 110 lacks the allocation the event at 120
	// brought: it stays, and nothing drifted.
	if drift := c.replace(empty(110)); drift != 0 || c.describe() != "allocs[a1-0000-0000:running] jobs[] nodes[] blocked[]" {
		t.Errorf("stale read: drift %d, cache %s", drift, c.describe())
	}
	// A read at 130 lacks it (it ended, and the event was missed): gone,
	// and counted; a job the events missed is added, and counted.
	rd := empty(130)
	rd.jobs[jobKey{"ml", "nb"}] = &ObservedJob{Namespace: "ml", ID: "nb", ModifyIndex: 125}
	rd.seen["j/ml/nb"] = 125
	if drift := c.replace(rd); drift != 2 || c.describe() != "allocs[] jobs[ml/nb@125x0] nodes[] blocked[]" {
		t.Errorf("read after missed events: drift %d, cache %s", drift, c.describe())
	}
}

// describe is the cache's content, sorted, for tests.
func (c *clusterCache) describe() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var allocs, jobs, nodes, blocked []string
	for id, a := range c.allocs {
		allocs = append(allocs, id+":"+a.ClientStatus)
	}
	for k, j := range c.jobs {
		count := 0
		for _, g := range j.Groups {
			count += g.Count
		}
		jobs = append(jobs, fmt.Sprintf("%s@%dx%d", k, j.ModifyIndex, count))
	}
	for id, n := range c.nodes {
		if n.usable {
			nodes = append(nodes, id)
		}
	}
	for id := range c.blocked {
		blocked = append(blocked, id)
	}
	for _, l := range [][]string{allocs, jobs, nodes, blocked} {
		sort.Strings(l)
	}
	return fmt.Sprintf("allocs%v jobs%v nodes%v blocked%v", allocs, jobs, nodes, blocked)
}

// Events apply while rounds read the cluster and build from the cache
// (run with -race).
func TestCacheConcurrentEvents(t *testing.T) {
	f := newFakeNomad()
	preemptionCluster(f)
	o := newObserver(f, "steward")
	ctx := context.Background()
	if _, err := o.observe(ctx, t0, true); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			o.cache.apply(event(t, 1000+2*i, "Job", "JobRegistered", "Job", fmt.Sprintf(jobJSON, 1000+2*i, i%3)))
			o.cache.apply(event(t, 1001+2*i, "Allocation", "AllocationUpdated", "Allocation", fmt.Sprintf(allocJSON, "running", "run")))
		}
	}()
	for i := range 50 {
		if _, err := o.observe(ctx, t0, i%2 == 0); err != nil {
			t.Fatal(err)
		}
	}
	<-done
}

// Nomad sends one index's changes in several batches when they were
// several transactions: a job registered, then its evaluation, both at
// the job's index. The second batch is as new as the first.
func TestCacheSameIndexBatches(t *testing.T) {
	c := newClusterCache("steward")
	c.replace(&clusterRead{index: 100, nodes: map[string]cachedNode{}, jobs: map[jobKey]*ObservedJob{}, allocs: map[string]ObservedAlloc{},
		blocked: map[string]blockedEval{}, seen: map[string]uint64{}})
	c.apply(event(t, 110, "Job", "JobRegistered", "Job", fmt.Sprintf(jobJSON, 110, 1)))
	c.apply(event(t, 110, "Evaluation", "JobRegistered", "Evaluation", fmt.Sprintf(evalJSON, "blocked")))
	if got := c.describe(); got != "allocs[] jobs[ml/train@110x1] nodes[] blocked[ev1]" {
		t.Errorf("the evaluation registered with the job at its index was dropped: %s", got)
	}
	// An event no newer than the last full read is in that read.
	c.apply(event(t, 100, "Evaluation", "EvaluationUpdated", "Evaluation",
		`{"ID":"ev9","Namespace":"ml","JobID":"train","Status":"blocked","CreateTime":1,"ModifyTime":2}`))
	if got := c.describe(); got != "allocs[] jobs[ml/train@110x1] nodes[] blocked[ev1]" {
		t.Errorf("an event at the full read's index changed the cache: %s", got)
	}
}

// settle returns once the cache holds the controller's writes (the index
// each returned), and not before.
func TestCacheSettle(t *testing.T) {
	cases := []struct {
		name  string
		at    int    // the index events brought the cache to
		index uint64 // the newest the writes returned
		want  bool
	}{
		{"no writes, or none that returned an index", 110, 0, true},
		{"the write is back", 112, 112, true},
		{"the write is not back from the stream", 111, 112, false},
		{"the newest of two writes is not back", 115, 116, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newClusterCache("steward")
			c.replace(&clusterRead{index: 110, nodes: map[string]cachedNode{}, jobs: map[jobKey]*ObservedJob{}, allocs: map[string]ObservedAlloc{},
				blocked: map[string]blockedEval{}, seen: map[string]uint64{}})
			if tc.at > 110 {
				c.apply(event(t, tc.at, "Job", "JobRegistered", "Job", fmt.Sprintf(jobJSON, tc.at, 1)))
			}
			if got := c.settle(context.Background(), tc.index, 20*time.Millisecond); got != tc.want {
				t.Errorf("settle = %v, want %v", got, tc.want)
			}
		})
	}

	// It waits for the event that brings the write back.
	c := newClusterCache("steward")
	c.replace(&clusterRead{index: 110, nodes: map[string]cachedNode{}, jobs: map[jobKey]*ObservedJob{}, allocs: map[string]ObservedAlloc{},
		blocked: map[string]blockedEval{}, seen: map[string]uint64{}})
	go func() {
		time.Sleep(20 * time.Millisecond)
		c.apply(event(t, 112, "Job", "JobRegistered", "Job", fmt.Sprintf(jobJSON, 112, 1)))
	}()
	if !c.settle(context.Background(), 112, 10*time.Second) {
		t.Errorf("settle did not see the write come back")
	}
}

// Pressure is an evaluation Nomad newly blocked: one already blocked,
// sent again with its old times when Nomad unblocks and places it, is not
// (counted from its old time, it read as a decision 10 s late).
func TestCacheNewlyBlocked(t *testing.T) {
	c := newClusterCache("steward")
	c.replace(&clusterRead{index: 100, nodes: map[string]cachedNode{}, jobs: map[jobKey]*ObservedJob{}, allocs: map[string]ObservedAlloc{},
		blocked: map[string]blockedEval{}, seen: map[string]uint64{}})
	blocked := func(id, ns, job string, modified int64) string {
		return fmt.Sprintf(`{"ID":%q,"Namespace":%q,"JobID":%q,"Status":"blocked","CreateTime":1,"ModifyTime":%d}`, id, ns, job, modified)
	}
	cases := []struct {
		name    string
		index   int
		payload string
		want    int64 // the batch's pressure, as ModifyTime (0: none)
	}{
		{"newly blocked", 110, blocked("ev1", "ml", "train", 5000), 5000},
		{"the same evaluation sent again (Nomad placing it)", 111, blocked("ev1", "ml", "train", 5000), 0},
		{"a placeholder's evaluation", 112, blocked("ev2", "steward", placeholderPrefix+"x", 6000), 0},
		{"another job newly blocked", 113, blocked("ev3", "ml", "nb", 7000), 7000},
	}
	for _, tc := range cases {
		_, at := c.apply(event(t, tc.index, "Evaluation", "EvaluationUpdated", "Evaluation", tc.payload))
		var got int64
		if !at.IsZero() {
			got = at.UnixNano()
		}
		if got != tc.want {
			t.Errorf("%s: pressure at %d, want %d", tc.name, got, tc.want)
		}
	}
}

// A stop Nomad was asked for and has not carried out yet (the victim's
// desired transition is to migrate; Nomad's evaluation of it waits in a
// backlog) is known from events alone: the list a full read makes does
// not say so. Every kind of full read keeps it while the allocation is
// still meant to run there; before, a resync forgot it, and the victim
// was stopped again as a straggler (issue 33).
func TestCacheResyncKeepsStopRequests(t *testing.T) {
	const id = "a1-0000-0000"
	requested := strings.Replace(fmt.Sprintf(allocJSON, "pending", "run"), `"ClientStatus"`, `"DesiredTransition":{"Migrate":true},"ClientStatus"`, 1)
	read := func(index uint64, client string, present bool) *clusterRead {
		rd := &clusterRead{index: index, nodes: map[string]cachedNode{}, jobs: map[jobKey]*ObservedJob{}, allocs: map[string]ObservedAlloc{},
			blocked: map[string]blockedEval{}, seen: map[string]uint64{}}
		if present {
			rd.allocs[id] = ObservedAlloc{ID: id, Namespace: "ml", JobID: "train", Group: "work", NodeID: "n1", GPUIDs: []string{"g0", "g1"},
				ClientStatus: client, DesiredStatus: "run"}
			rd.seen["a/"+id] = index - 1
		}
		return rd
	}
	cases := []struct {
		name    string
		event   string // the allocation's event before the read
		read    *clusterRead
		rebuild bool // the rebuild after a resubscription, not a resync
		want    string
	}{
		{name: "a resync keeps a stop Nomad has not carried out", event: requested,
			read: read(130, "pending", true), want: "stop requested"},
		{name: "a resync that shows the victim running since keeps its stop request", event: requested,
			read: read(130, "running", true), want: "stop requested"},
		{name: "the rebuild after a resubscription keeps it", event: requested,
			read: read(130, "pending", true), rebuild: true, want: "stop requested"},
		{name: "a victim Nomad stopped since leaves with its request", event: requested,
			read: read(130, "", false), want: "gone"},
		{name: "an allocation never asked to stop is not made one", event: fmt.Sprintf(allocJSON, "pending", "run"),
			read: read(130, "running", true), want: "meant to run"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newClusterCache("steward")
			c.replace(read(100, "", false))
			c.apply(event(t, 120, "Allocation", "AllocationUpdateDesiredTransition", "Allocation", tc.event))
			if tc.rebuild {
				c.rebuild(tc.read)
			} else {
				c.replace(tc.read)
			}
			c.mu.Lock()
			a, ok := c.allocs[id]
			c.mu.Unlock()
			got := "gone"
			switch {
			case ok && a.StopRequested:
				got = "stop requested"
			case ok:
				got = "meant to run"
			}
			if got != tc.want {
				t.Errorf("after the read the victim is %s, want %s", got, tc.want)
			}
		})
	}
}

// TestListedSummaries: a full read takes each job's summary from the job
// list, unless an event about the job newer than the list came (the list
// may be older than what the events said): that job's summary stays
// stale, read on its own when a round needs it.
func TestListedSummaries(t *testing.T) {
	k := jobKey{"ml", "nb"}
	cases := []struct {
		name      string
		touchedAt uint64 // an event about ml/nb at this index; 0: none
		wantTaken bool
	}{
		{name: "no event about the job: taken", wantTaken: true},
		{name: "an event older than the list: taken", touchedAt: 90, wantTaken: true},
		{name: "an event newer than the list: not taken", touchedAt: 150},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newClusterCache("steward")
			if tc.touchedAt > 0 {
				c.mu.Lock()
				c.touch(k, tc.touchedAt)
				c.mu.Unlock()
			}
			sum := &api.JobSummary{JobID: "nb", Namespace: "ml", Summary: map[string]api.TaskGroupSummary{"work": {Queued: 2}}}
			c.replace(&clusterRead{index: 100, jobsIndex: 100, nodes: map[string]cachedNode{}, skipped: map[jobKey]*ObservedJob{},
				jobs: map[jobKey]*ObservedJob{k: {Namespace: "ml", ID: "nb"}}, allocs: map[string]ObservedAlloc{},
				blocked: map[string]blockedEval{}, seen: map[string]uint64{}, summaries: map[jobKey]*api.JobSummary{k: sum}})
			s := c.summaries[k]
			if taken := s != nil && !s.stale && s.sum == sum; taken != tc.wantTaken {
				t.Fatalf("the listed summary taken: %v, want %v", taken, tc.wantTaken)
			}
		})
	}
}
