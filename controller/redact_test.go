package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

// TestRedactJobs (issue 29): what a tenant of a namespace reads of a
// reason the engine wrote for the operator: other namespaces' jobs become
// "another tenant's job", the numbers and its own jobs stay.
func TestRedactJobs(t *testing.T) {
	known := map[string]bool{"ml": true, "product": true, "research": true}
	for _, tc := range []struct {
		name, ns, text, want string
	}{
		{name: "reclaiming for another tenant's notebook", ns: "ml",
			text: "idle 20m: reclaiming 1 for product/notebook-a/work (tier interactive)",
			want: "idle 20m: reclaiming 1 for another tenant's job (tier interactive)"},
		{name: "its own jobs stay named", ns: "ml",
			text: "scale ml/nb work 0: 2 GPUs go to ml/train/work, which waits for 2",
			want: "scale ml/nb work 0: 2 GPUs go to ml/train/work, which waits for 2"},
		{name: "several, with punctuation", ns: "ml",
			text: "starts when research/train ends, or when product/a/work and research/sweep: end.",
			want: "starts when another tenant's job ends, or when another tenant's job and another tenant's job: end."},
		{name: "a dispatched job's ID with a slash", ns: "ml",
			text: "yields 4 GPUs to research/batch/dispatch-1700000000-abcd1234/work; held",
			want: "yields 4 GPUs to another tenant's job; held"},
		{name: "bracketed and quoted", ns: "ml", text: `for (research/train) and "product/nb"`,
			want: `for (another tenant's job) and "another tenant's job"`},
		{name: "slashes that name no namespace stay", ns: "ml",
			text: "1/2 GPUs of nvidia/gpu/H100 on pool gpu/a",
			want: "1/2 GPUs of nvidia/gpu/H100 on pool gpu/a"},
		{name: "a namespace inside a word is no reference", ns: "ml",
			text: "fast-research/train", want: "fast-research/train"},
		{name: "a namespace alone is no job", ns: "ml", text: "in research/ now", want: "in research/ now"},
		{name: "empty", ns: "ml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := redactJobs(tc.text, tc.ns, known); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestMessageScopedToTenants (issue 29): a webhook scoped to tenants gets
// no other namespace's job in its reason or text; an operator-wide one
// keeps the names.
func TestMessageScopedToTenants(t *testing.T) {
	c := &Controller{wiring: wiring{config: &Config{}}, pol: &policy.Policy{Tenants: map[string]*policy.Tenant{
		"ml": {Name: "ml", Namespace: "ml"}, "product": {Name: "product", Namespace: "product"}}}}
	c.notices = &outbox{wiring: c.wiring, engineNow: c.engineNow}
	nt := &Notice{ID: "d-1", Event: "preempted", Action: "preempt", At: t0, Group: "work", GPUs: 1, Tenant: "ml",
		Reason: "tier batch yields 1 GPU: reclaiming 1 for product/notebook-a/work"}
	for _, tc := range []struct {
		name    string
		tenants []string
		want    string
	}{
		{name: "operator-wide block keeps the names", want: "tier batch yields 1 GPU: reclaiming 1 for product/notebook-a/work"},
		{name: "tenant-scoped block names no other tenant's job", tenants: []string{"ml"},
			want: "tier batch yields 1 GPU: reclaiming 1 for another tenant's job"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nb := &policy.Notify{Name: "team", URL: "http://127.0.0.1/", Timeout: time.Second, Attempts: 3, Tenants: tc.tenants}
			m := c.notices.message(nb, jobKey{"ml", "train"}, nt)
			if m.Reason != tc.want {
				t.Errorf("reason %q, want %q", m.Reason, tc.want)
			}
			if want := "ml/train/work preempted: " + tc.want; len(m.Text) < len(want) || m.Text[:len(want)] != want {
				t.Errorf("text %q, want it to start %q", m.Text, want)
			}
		})
	}
}

// TestRecordNamesNoOtherTenantsJob (issue 29): a job preempted for another
// namespace's job reads, in its record and its scaling event, that its GPUs went to another
// tenant's job, with the numbers; its state (in the state namespace, read by
// operators) keeps the name.
func TestRecordNamesNoOtherTenantsJob(t *testing.T) {
	reason := engine.Reason{Rule: engine.RulePriority, Message: "tier training (priority 40) yields 1 GPU to product/notebook-a/work"}
	for _, tc := range []struct {
		name, forNS, want string
	}{
		{name: "for another namespace's job", forNS: "product",
			want: "tier training (priority 40) yields 1 GPU to another tenant's job"},
		{name: "for its own namespace's job", forNS: "ml",
			want: "tier training (priority 40) yields 1 GPU to product/notebook-a/work"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			c := testController(t, f)
			train := job("ml", "train", "training", 40, 1, 1)
			nb := job(tc.forNS, "notebook-a", "interactive", 60, 0, 1)
			r := roundWith([]*ObservedJob{train, nb}, []ObservedAlloc{alloc("a1", "train")})
			a := engine.Action{Kind: engine.Preempt, Job: engine.JobRef{Namespace: "ml", ID: "train"}, Group: "work",
				Allocs: []string{"a1"}, GPUs: 1, Requeue: true, For: &engine.JobRef{Namespace: tc.forNS, ID: "notebook-a"}, Reason: reason}
			if err := c.execute(context.Background(), r, a); err != nil {
				t.Fatal(err)
			}
			if calls := withoutPuts(f.callsMatching("scale")); len(calls) != 1 || !strings.HasSuffix(calls[0], tc.want) {
				t.Errorf("scaling event %q, want it to end %q", calls, tc.want)
			}
			pol, _ := c.engineNow()
			c.pub.writeRecords(context.Background(), r, pol)
			// Stopped after its round's plan, the job's record waits a
			// round for its place in the queue (recordplace.go).
			r.now = r.now.Add(time.Second)
			c.pub.writeRecords(context.Background(), r, pol)
			items, _, _ := f.GetVar(context.Background(), "ml", "nomad/jobs/train")
			if items["steward_reason"] != tc.want {
				t.Errorf("record says %q, want %q", items["steward_reason"], tc.want)
			}
			if st := c.states()[jobKey{"ml", "train"}]; st == nil || !strings.Contains(st.Reason, "product/notebook-a/work") {
				t.Errorf("the job's state (operators only) lost the name: %+v", st)
			}
		})
	}
}
