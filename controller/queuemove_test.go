package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// TestQueueMoveRequest: a person moves one of their waiting jobs within
// their own namespace's queue with a request (steward queue move): the
// job's record says where, with the times, and its position follows in
// the same round's queue; a request that names a job of another
// namespace, a job that does not wait, or an ID over the bound changes
// nothing and says why.
func TestQueueMoveRequest(t *testing.T) {
	for _, tc := range []struct {
		name      string
		namespace string // where the request is left
		job       string
		req       Request
		moved     string // w3's steward_queue_move prefix; "" none
		position  string // w3's steward_position prefix
		refused   string // the decision's error, "" none
		then      *Request
		thenJob   string
		check     string // the job whose record is checked; "" w3
	}{
		{name: "top", namespace: "ml", job: "w3", req: Request{Action: "move"},
			moved:    "moved by a request in namespace ml to the top of namespace ml's waiting jobs: ranks among its tenant's waiting jobs of its tier and priority as if waiting since 2026-11-22T11:56:59Z; other tenants' places are unchanged",
			position: "2 of 4 in the cluster, 1 of 3 in tenant ml"},
		{name: "before w2", namespace: "ml", job: "w3", req: Request{Action: "move", Before: "w2"},
			moved:    "moved by a request in namespace ml before ml/w2 (which ranks as waiting since 2026-11-22T11:58:00Z): ranks among its tenant's waiting jobs of its tier and priority as if waiting since 2026-11-22T11:57:30Z",
			position: "3 of 4 in the cluster, 2 of 3 in tenant ml"},
		{name: "top, then w2 before w1: w2 goes between w3 and w1", namespace: "ml", job: "w3", req: Request{Action: "move"},
			then: &Request{Action: "move", Before: "w1"}, thenJob: "w2", check: "w2",
			moved:    "moved by a request in namespace ml before ml/w1 (which ranks as waiting since 2026-11-22T11:57:00Z): ranks among its tenant's waiting jobs of its tier and priority as if waiting since 2026-11-22T11:56:59.5Z",
			position: "3 of 4 in the cluster, 2 of 3 in tenant ml"},
		{name: "nobody moved", namespace: "", position: "4 of 4 in the cluster, 3 of 3 in tenant ml"},
		{name: "a job of another namespace cannot be named", namespace: "ml", job: "w3", req: Request{Action: "move", Before: "theirs"},
			position: "4 of 4 in the cluster, 3 of 3 in tenant ml", refused: "no job theirs runs in namespace ml (a move names a job of its own namespace)"},
		{name: "a request in another namespace moves nothing", namespace: "other", job: "w3", req: Request{Action: "move"},
			position: "4 of 4 in the cluster, 3 of 3 in tenant ml"},
		{name: "a running job does not move", namespace: "ml", job: "run", req: Request{Action: "move", Before: "w1"},
			position: "4 of 4 in the cluster, 3 of 3 in tenant ml", refused: "ml/run does not wait for GPUs: only a waiting job moves in the queue"},
		{name: "before itself", namespace: "ml", job: "w3", req: Request{Action: "move", Before: "w3"},
			position: "4 of 4 in the cluster, 3 of 3 in tenant ml", refused: "a job cannot move before itself"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			cl := f.cl()
			cl.nodes = []*api.NodeListStub{apiNode("n1", 2)}
			run := apiJob("ml", "run", "training", 40, 1, 2)
			cl.jobs["ml/run"] = run
			gpus := []string{"n1-gpu0", "n1-gpu1"}
			cl.allocs = []*api.AllocationListStub{apiAlloc("a-run", run, "n1", gpus, t0.Add(-time.Hour))}
			for i, id := range []string{"w1", "w2", "w3"} {
				j := apiJob("ml", id, "training", 40, 1, 2)
				cl.jobs["ml/"+id] = j
				ev, sum := apiBlockedEval(j, 1, t0.Add(time.Duration(i-3)*time.Minute))
				ev.ID = "eval-" + id
				cl.evals, cl.summary["ml/"+id] = append(cl.evals, ev), sum
			}
			other := apiJob("other", "theirs", "training", 40, 1, 2)
			cl.jobs["other/theirs"] = other
			if tc.namespace != "" {
				if err := SubmitRequest(context.Background(), f, tc.namespace, tc.job, tc.req); err != nil {
					t.Fatal(err)
				}
			}
			r := newRoundRunner(t, f)
			if _, err := r.round(0); err != nil {
				t.Fatal(err)
			}
			if _, err := r.round(time.Minute); err != nil {
				t.Fatal(err)
			}
			if tc.then != nil {
				if err := SubmitRequest(context.Background(), f, "ml", tc.thenJob, *tc.then); err != nil {
					t.Fatal(err)
				}
				for _, at := range []time.Duration{2 * time.Minute, 3 * time.Minute} {
					if _, err := r.round(at); err != nil {
						t.Fatal(err)
					}
				}
			}
			check := tc.check
			if check == "" {
				check = "w3"
			}
			rec := f.vars["ml:nomad/jobs/"+check]
			if got := rec[queueMoveItem]; !strings.HasPrefix(got, tc.moved) || (tc.moved == "") != (got == "") {
				t.Errorf("%s's steward_queue_move is %q, want %q", check, got, tc.moved)
			}
			if got := rec["steward_position"]; !strings.HasPrefix(got, tc.position) {
				t.Errorf("%s's steward_position is %q, want %q…", check, got, tc.position)
			}
			refused := ""
			for _, d := range r.c.decisions.list() {
				if d.Kind == "move" {
					refused = d.Error
				}
			}
			if refused != tc.refused {
				t.Errorf("the move's decision error is %q, want %q", refused, tc.refused)
			}
		})
	}
}
