package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Tenants read the status in their own namespace. The cluster's status
// (StatusPath in the state namespace) names every team's jobs and reasons,
// so only operators may read it; the leader also publishes, at StatusPath
// in each namespace that has work, a view with that namespace's entries
// only: its tenant's figures, its held groups, idle allocations, queue,
// decisions and warnings. `steward status` and `steward queue` read it
// with -namespace. Steward never reads a view back (a tenant may be able
// to write its own namespace's), except for the index its check-and-set
// needs, and to skip rewriting an unchanged one after a restart.

// ControllerPath is the variable (in the state namespace) where the
// leader publishes where it answers `steward job check`: tenants may read
// it, and only the controller write it. A tenant namespace's view carries
// no address: whoever may write variables there could point teammates'
// checks, and their tokens, elsewhere.
const ControllerPath = "steward/controller"

// statusViews is what the leader last published in each namespace, and
// at ControllerPath, with the indexes its check-and-set writes need.
type statusViews struct {
	out   map[string]string // namespace → the view's JSON without its time
	index map[string]uint64 // known modify indexes
	// failed is the last error writing each namespace's view, logged
	// once.
	failed   map[string]string
	ctlOut   string
	ctlIndex uint64
	ctlKnown bool
}

// namespaceView is the part of the cluster's status about namespace ns,
// whose tenant is tenant. Its reasons name no job of the other namespaces
// (redactJobs; namespaces are those known).
func namespaceView(s *Status, ns, tenant string, namespaces map[string]bool) Status {
	v := Status{Updated: s.Updated, Leader: s.Leader, DryRun: s.DryRun, Policy: s.Policy}
	mine := func(job string) bool { return strings.HasPrefix(job, ns+"/") }
	redact := func(text string) string { return redactJobs(text, ns, namespaces) }
	for _, t := range s.Tenants {
		if t.Tenant == tenant {
			t.Note = redact(t.Note)
			v.Tenants = append(v.Tenants, t)
		}
	}
	for _, d := range s.Departments {
		// Its department binds it: the team sees its figures, and which
		// teams share them.
		if slices.Contains(d.Tenants, tenant) {
			v.Departments = append(v.Departments, d)
		}
	}
	for _, h := range s.Held {
		if mine(h.Job) {
			h.Reason = redact(h.Reason)
			v.Held = append(v.Held, h)
		}
	}
	for _, i := range s.Idle {
		if mine(i.Job) {
			i.Snoozed = redact(i.Snoozed)
			v.Idle = append(v.Idle, i)
			v.IdleGPUs += i.GPUs
		}
	}
	for _, d := range s.Decisions {
		if mine(d.Job) {
			d.Reason, d.Error = redact(d.Reason), redact(d.Error)
			v.Decisions = append(v.Decisions, d)
		}
	}
	for _, q := range s.Queue {
		if q.Namespace == ns {
			q.Reason, q.ForecastNote = redact(q.Reason), redact(q.ForecastNote)
			if q.Unblock != nil {
				unblock := make([]string, len(q.Unblock))
				for i, u := range q.Unblock {
					unblock[i] = redact(u)
				}
				q.Unblock = unblock
			}
			v.Queue = append(v.Queue, q)
		}
	}
	for _, w := range s.Warnings {
		if mine(w.Job) {
			w.Problem = redact(w.Problem)
			v.Warnings = append(v.Warnings, w)
		}
	}
	return v
}

// viewNamespaces are the namespaces that get a view: those with jobs, or
// entries in the status, and those that had one (to empty it), never the
// state namespace, where StatusPath is the cluster's status.
func (p *publisher) viewNamespaces(r *round, s *Status) []string {
	set := map[string]bool{}
	for k := range r.obs.Jobs {
		set[k.Namespace] = true
	}
	add := func(job string) {
		if ns, _, ok := strings.Cut(job, "/"); ok {
			set[ns] = true
		}
	}
	for _, h := range s.Held {
		add(h.Job)
	}
	for _, i := range s.Idle {
		add(i.Job)
	}
	for _, d := range s.Decisions {
		add(d.Job)
	}
	for _, w := range s.Warnings {
		add(w.Job)
	}
	for _, q := range s.Queue {
		set[q.Namespace] = true
	}
	for ns := range p.views.out {
		set[ns] = true
	}
	delete(set, p.cfg().StateNamespace)
	delete(set, "")
	out := make([]string, 0, len(set))
	for ns := range set {
		out = append(out, ns)
	}
	sort.Strings(out)
	return out
}

// buildViews cuts the status into each namespace's view. It runs before
// fitStatus trims the cluster's status, so that each view keeps what fits
// in its own variable.
func (p *publisher) buildViews(r *round, s *Status, tenantOf func(ns string) string) map[string]Status {
	views := map[string]Status{}
	pol, _ := p.engineNow()
	namespaces := knownNamespaces(pol, p.usage(), p.store)
	for _, ns := range p.viewNamespaces(r, s) {
		namespaces[ns] = true
	}
	for _, ns := range p.viewNamespaces(r, s) {
		views[ns] = namespaceView(s, ns, tenantOf(ns), namespaces)
	}
	return views
}

// publishViews writes each namespace's view that changed since it was
// last published, and the check address. They ride on the cluster's
// status write, so they are written at most as often as it is (at most
// every statusEvery, drift in idle figures at most every
// statusVolatileEvery), and only those that changed.
func (p *publisher) publishViews(ctx context.Context, views map[string]Status, leader, checkAddr string) {
	if p.views.out == nil {
		p.views.out, p.views.index, p.views.failed = map[string]string{}, map[string]uint64{}, map[string]string{}
	}
	names := make([]string, 0, len(views))
	for ns := range views {
		names = append(names, ns)
	}
	sort.Strings(names)
	for _, ns := range names {
		v := views[ns]
		full := fitStatus(&v, statusMaxBytes)
		key := viewKey(v)
		if p.views.out[ns] == key {
			continue
		}
		if err := p.putView(ctx, ns, full, key); err != nil {
			if p.views.failed[ns] != err.Error() {
				p.log().Error("publish the namespace's status view", "namespace", ns, "error", err)
			}
			p.views.failed[ns] = err.Error()
			// Forgotten: tried again only while the namespace has
			// work (a deleted namespace is not retried for ever).
			delete(p.views.out, ns)
			delete(p.views.index, ns)
			continue
		}
		delete(p.views.failed, ns)
		p.views.out[ns] = key
	}
	p.publishCheckAddress(ctx, leader, checkAddr)
}

// viewKey is a view's JSON without its time: what tells a change.
func viewKey(v Status) string {
	v.Updated = time.Time{}
	b, _ := json.Marshal(v)
	return string(b)
}

// putView writes one namespace's view with check-and-set, learning the
// variable's index first when it is not known (and then skipping the
// write if the variable already says the same, as after a restart).
func (p *publisher) putView(ctx context.Context, ns string, full []byte, key string) error {
	index, known := p.views.index[ns]
	if !known {
		items, idx, err := p.nomad().GetVar(ctx, ns, StatusPath)
		if err != nil {
			return fmt.Errorf("read %s@%s: %w", StatusPath, ns, err)
		}
		index = idx
		p.views.index[ns] = idx
		var old Status
		if items != nil && json.Unmarshal([]byte(items["status"]), &old) == nil && viewKey(old) == key {
			return nil
		}
	}
	idx, err := p.nomad().PutVar(ctx, ns, StatusPath, map[string]string{"status": string(full)}, true, index)
	if err != nil {
		return fmt.Errorf("write %s@%s: %w", StatusPath, ns, err)
	}
	p.views.index[ns] = idx
	return nil
}

// publishCheckAddress writes ControllerPath when the leader or its
// address changed.
func (p *publisher) publishCheckAddress(ctx context.Context, leader, addr string) {
	items := map[string]string{"leader": leader, "check_address": addr}
	b, _ := json.Marshal(items)
	if p.views.ctlOut == string(b) {
		return
	}
	if !p.views.ctlKnown {
		old, idx, err := p.nomad().GetVar(ctx, p.cfg().StateNamespace, ControllerPath)
		if err != nil {
			p.log().Error("read the published check address", "error", err)
			return
		}
		p.views.ctlIndex, p.views.ctlKnown = idx, true
		if ob, _ := json.Marshal(old); old != nil && string(ob) == string(b) {
			p.views.ctlOut = string(b)
			return
		}
	}
	idx, err := p.nomad().PutVar(ctx, p.cfg().StateNamespace, ControllerPath, items, true, p.views.ctlIndex)
	if err != nil {
		p.views.ctlKnown = false
		p.log().Error("publish the check address", "error", err)
		return
	}
	p.views.ctlOut, p.views.ctlIndex = string(b), idx
}

// ReadCheckAddress reads where the leader answers `steward job check`:
// ControllerPath in the state namespace, or, from a leader that does not
// publish it, the cluster's status (which only operators may read).
func ReadCheckAddress(ctx context.Context, n Nomad, stateNamespace string) (string, error) {
	items, _, err := n.GetVar(ctx, stateNamespace, ControllerPath)
	if err != nil {
		return "", fmt.Errorf("read %s@%s: %w", ControllerPath, stateNamespace, err)
	}
	if items != nil {
		return items["check_address"], nil
	}
	s, err := ReadStatus(ctx, n, stateNamespace)
	if err != nil {
		return "", fmt.Errorf("no %s@%s, and no status to read it from: %w", ControllerPath, stateNamespace, err)
	}
	return s.CheckAddress, nil
}
