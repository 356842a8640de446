package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

// Each job Steward decides about gets a readable record in the variable
// nomad/jobs/<job-id> of its namespace: the Nomad UI shows that variable on
// the job's page (Variables tab), and the job's own tasks may read it.
// Steward writes only its own keys (steward_*) and keeps any others, since
// jobs often keep their own secrets in that variable.
const recordKeyPrefix = "steward_"

// preemptionsItem counts the job's preemptions of the last 24 hours, as of
// the record's last write (onlyAged).
const preemptionsItem = "steward_preemptions"

// recordItems is the job's record as shown to people.
func recordItems(pol *policy.Policy, st *JobState, job *ObservedJob, idleSince time.Time, now time.Time) map[string]string {
	set := pol.ResolveJob(job.Namespace, job.Meta)
	tier := set.Tier
	if set.Requested == "" {
		tier += " (default)"
	}
	status := st.Status
	if status == "" {
		status = StatusRunning
	}
	if st.Paused {
		status = StatusPaused
	}
	st.trimPreemptions(now)
	items := map[string]string{
		"steward_tier":     tier,
		"steward_tenant":   set.Tenant.Name,
		"steward_state":    status,
		"steward_priority": strconv.Itoa(job.Priority),
		preemptionsItem:    strconv.Itoa(len(st.Preemptions)),
		recordSchemaItem:   strconv.Itoa(stateSchema),
	}
	if total := max(st.PreemptedTotal, len(st.Preemptions)); total > 0 {
		items["steward_preemptions_total"] = strconv.Itoa(total)
		if most := pol.Preemption.MaxPerJob; most > 0 && total >= most {
			items["steward_protected"] = fmt.Sprintf("preempted %d times, the most over its life (preemption.max_per_job = %d): "+
				"protected until it ends (but for its tenant's limit, and a reserve reclaim or a higher tier that nothing else satisfies)", total, most)
		}
	}
	maps.Copy(items, resumeItems(st.Resumes))
	if !idleSince.IsZero() {
		// A time, not minutes: minutes would rewrite the record every
		// minute the job idles.
		items["steward_idle_since"] = idleSince.UTC().Format(time.RFC3339)
	}
	if s := snoozeRecord(pol, st, job, now); s != "" {
		items[snoozeItem] = s
	}
	if st.QueueMove != nil {
		items[queueMoveItem] = st.QueueMove.Reason
	}
	if st.Reason != "" {
		items["steward_reason"] = st.Reason
		items["steward_rule"] = st.Rule
		items["steward_updated"] = st.Updated.UTC().Format(time.RFC3339)
	}
	if n := st.heldCount(); n > 0 {
		items["steward_held"] = plural(n, "allocation")
	}
	idleWarningItems(st, items)
	if notes := st.scalingNotes(); notes != "" {
		// What Steward did to the group's Autoscaler policy (scaling.go).
		items["steward_scaling"] = notes
	}
	if len(set.Problems) > 0 {
		// What the job's meta asked for and Steward refused, and what it
		// uses instead.
		items["steward_warning"] = strings.Join(set.Problems, "; ")
	}
	for _, d := range st.Draining {
		if !d.Finished && d.Grace > 0 {
			// For the task: how long it has to checkpoint (rendered by a
			// template into the file the steward-exec driver reads).
			items["steward_grace"] = shortDuration(d.Grace)
		}
	}
	return items
}

// The resume contract for every driver: a job's tasks render these keys of
// its record into their environment with a template (docs/reference/driver.md, "The
// checkpoint contract"), so a task restarted after a preemption learns it
// whatever its driver: STEWARD_RESUMED, STEWARD_RESUME_COUNT.
const (
	resumedItem     = "steward_resumed"      // "1" once Steward asked the job to checkpoint
	resumeCountItem = "steward_resume_count" // how many times it did
)

// resumeItems are the record's resume keys for a job asked to checkpoint n
// times; none before the first (the template renders 0 then).
func resumeItems(n int) map[string]string {
	if n <= 0 {
		return nil
	}
	return map[string]string{resumedItem: "1", resumeCountItem: strconv.Itoa(n)}
}

// shortDuration writes 2m rather than 2m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// idleSince is since when the job's GPUs have been under its idle rule's
// threshold (the longest-idle allocation, to the second), zero when busy
// or not covered.
func (p *publisher) idleSince(pol *policy.Policy, r *round, job *ObservedJob, usage map[string][]engine.Sample) time.Time {
	rule := pol.ResolveJob(job.Namespace, job.Meta).IdleRule
	if rule == nil {
		return time.Time{}
	}
	var first time.Time
	for _, a := range r.obs.Allocs {
		if a.Namespace != job.Namespace || a.JobID != job.ID {
			continue
		}
		if since, ok := engine.IdleSince(usage[a.ID], rule.Threshold); ok && (first.IsZero() || since.Before(first)) {
			first = since
		}
	}
	return first.Truncate(time.Second)
}

// writeRecords updates the record of every job Steward has state for, and
// of every job whose meta Steward refused in part (its owner must learn
// why the job does not run as it asked); the records that changed are
// merged recordMerges at a time (mergeRecords).
func (p *publisher) writeRecords(ctx context.Context, r *round, pol *policy.Policy) {
	p.pruneRecords(r)
	usage := p.usage().samples(pol)
	var due []recordWrite
	add := func(st *JobState) {
		if w, ok := p.recordDue(r, pol, st, usage); ok && !p.holdForPlace(r, st) {
			due = append(due, w)
		}
	}
	for _, st := range p.store.sortedStates() {
		add(st)
	}
	for _, k := range sortedKeys(p.meta.refused) {
		if p.store.states()[k] == nil {
			add(&JobState{Namespace: k.Namespace, ID: k.ID})
		}
	}
	for _, k := range p.store.writes.refusedJobs() {
		if p.store.states()[k] == nil && p.meta.refused[k] == nil {
			add(&JobState{Namespace: k.Namespace, ID: k.ID})
		}
	}
	due, left := p.spreadInherited(due)
	if left > 0 {
		// The rest in the rounds that follow, at once.
		r.wake(r.now.Add(inheritedRecordsWake))
	}
	p.mergeRecords(ctx, due)
}

// inheritedRecordsPerRound is how many records this term has not written
// yet a round merges. A new leader (or a leader that read every state
// again) inherits every record: each merge reads the variable first, and
// at 250 nodes a few hundred of them were most of a new leader's first
// round (issue 33), the round its failover counts to. What they say was
// current when the dead leader wrote them; the rounds that follow
// (inheritedRecordsWake apart) merge the rest. A record that this term
// wrote before, and one written before an action (writeRecord), is never
// held back.
const inheritedRecordsPerRound = 4 * recordMerges

// inheritedRecordsWake is when the next round comes while inherited
// records are left to merge.
const inheritedRecordsWake = time.Second

// spreadInherited is due with the records this term has not written yet
// beyond inheritedRecordsPerRound left out (the first in due's order
// kept), and how many it left out.
func (p *publisher) spreadInherited(due []recordWrite) ([]recordWrite, int) {
	kept, fresh := make([]recordWrite, 0, len(due)), 0
	for _, w := range due {
		if p.records[w.k] == "" {
			if fresh++; fresh > inheritedRecordsPerRound {
				continue
			}
		}
		kept = append(kept, w)
	}
	return kept, len(due) - len(kept)
}

// pruneRecords forgets what was written to, or failed for, the records of
// jobs Nomad no longer shows: job IDs come and go with tenants' work, and
// each entry is as large as its job's record.
func (p *publisher) pruneRecords(r *round) {
	for k := range p.records {
		if r.obs.Jobs[k] == nil {
			delete(p.records, k)
		}
	}
	for k := range p.recordErr {
		if r.obs.Jobs[k] == nil {
			delete(p.recordErr, k)
		}
	}
	for k := range p.placeHeld {
		if r.obs.Jobs[k] == nil {
			delete(p.placeHeld, k)
		}
	}
	for k := range p.store.stateErr {
		if r.obs.Jobs[k] == nil {
			delete(p.store.stateErr, k)
		}
	}
}

// writeRecord updates one job's record now (before an action that the
// job's tasks should learn about).
func (p *publisher) writeRecord(ctx context.Context, r *round, pol *policy.Policy, st *JobState) {
	if w, ok := p.recordDue(r, pol, st, p.usage().samples(pol)); ok {
		p.recordMerged(w, p.mergeRecordWrite(ctx, w))
	}
}

// recordWrite is a job's record as the round has it, to merge into its
// variable: items, and as JSON (what publisher.records keeps).
type recordWrite struct {
	k     jobKey
	path  string
	items map[string]string
	json  string
	// queue is what the queue says of a waiting job this round, and now
	// the round's time, when this term has written nothing to the job's
	// record yet: the record may keep the places it shows (adoptQueue).
	queue *queueSeen
}

// recordDue is the job's record when it must be written: Steward has
// something to say of the job, and said something else last (or nothing
// yet in this term).
func (p *publisher) recordDue(r *round, pol *policy.Policy, st *JobState, usage map[string][]engine.Sample) (recordWrite, bool) {
	if !p.cfg().JobRecords { // a dry run writes none either: no phase of its round does (dryPhases)
		return recordWrite{}, false
	}
	k := st.key()
	job := r.obs.Jobs[k]
	path := recordPath(k.ID)
	if job == nil || path == "" || (st.Reason == "" && !st.Paused && p.meta.refused[k] == nil && st.Snooze == nil && st.QueueMove == nil && st.IdleWarning == nil && len(st.Warned) == 0 && p.records[k] == "" && p.store.writes.writeError(k) == "" && p.store.stateErr[k] == "") {
		// Nothing to say: Steward neither decided about the job, nor
		// refused any of its meta, nor snoozed its idle rule, nor warned
		// of an idle release (and wrote no record that a snooze's end
		// must update).
		return recordWrite{}, false
	}
	if p, ok := r.priorities[k]; ok && p != job.Priority {
		// Set by this round: the record says it now, not a round later.
		jp := *job
		jp.Priority = p
		job = &jp
	}
	items := recordItems(pol, st, job, p.idleSince(pol, r, job, usage), r.now)
	p.queue.addQueueItems(k, items)
	p.store.writes.writeErrorItem(k, items)
	// The record lives in the job's namespace, read by its tenant.
	namespaces := p.roundNamespaces(r, pol)
	for key, v := range items {
		items[key] = redactJobs(v, k.Namespace, namespaces)
	}
	p.store.boundRecord(k, items)
	b, _ := json.Marshal(items)
	if p.records[k] == string(b) || onlyAged(p.records[k], items) {
		return recordWrite{}, false
	}
	return recordWrite{k: k, path: path, items: items, json: string(b), queue: p.queueSeen(k, r.now)}, true
}

// recordMerges is how many records are merged at once. A new leader (or a
// leader that read every state again) knows none of the records it
// inherits, and reads each (a record is its owner's variable too: it is
// merged, check-and-set): one at a time, a few hundred records were
// seconds of its first round at 250 nodes (issue 33), as the states were
// before they were read stateReads at a time.
const recordMerges = 16

// mergeRecords merges the records due, recordMerges at a time, and notes
// each outcome once all are done (the publisher's maps are the loop's
// alone).
func (p *publisher) mergeRecords(ctx context.Context, due []recordWrite) {
	merged := make([]recordMerge, len(due))
	inParallel(len(due), recordMerges, func(i int) {
		merged[i] = p.mergeRecordWrite(ctx, due[i])
	})
	for i, w := range due {
		p.recordMerged(w, merged[i])
	}
}

// recordMerge is how a record's merge went: the places it kept
// (adoptQueue), or why it could not be written.
type recordMerge struct {
	adopted *adoptedQueue
	err     error
}

// recordMerged notes a record's merge: what it now says, or why it could
// not be written.
func (p *publisher) recordMerged(w recordWrite, m recordMerge) {
	if err := m.err; err != nil {
		// The record lives in a variable its owner controls (it may lock
		// or fill it): a failure is logged once per job and cause, and
		// retried with later rounds, but never makes the round fail —
		// nothing Steward decides depends on it.
		if p.recordErr[w.k] != err.Error() {
			p.log().Warn("cannot write the job's record; decisions go on without it", "job", w.k, "error", err)
			p.recordErr[w.k] = err.Error()
		}
		return
	}
	delete(p.recordErr, w.k)
	p.records[w.k] = w.json
	if a := m.adopted; a != nil {
		p.queue.fc.shown[w.k] = a.shown
		p.records[w.k] = a.json
	}
}

// onlyAged reports whether items differ from the record last written
// (its JSON) only in counts that fall as time passes: steward_preemptions
// counts the last 24 hours, and a preemption turning a day old must not
// rewrite the record of every job ever preempted. The lower count is
// written with the record's next change (its preemption times are in the
// job's state).
func onlyAged(written string, items map[string]string) bool {
	if written == "" {
		return false
	}
	var old map[string]string
	if err := json.Unmarshal([]byte(written), &old); err != nil {
		return false
	}
	was, err1 := strconv.Atoi(old[preemptionsItem])
	now, err2 := strconv.Atoi(items[preemptionsItem])
	if err1 != nil || err2 != nil || now >= was {
		return false
	}
	old[preemptionsItem] = items[preemptionsItem]
	return maps.Equal(old, items)
}

// mergeRecord writes Steward's keys into the variable, keeping the
// others, with check-and-set so that a concurrent write by the job's owner
// is never lost; a variable that says all of it already is not written.
// Safe to run for several jobs at once (mergeRecords): it touches no
// state of the publisher's.
func (p *publisher) mergeRecord(ctx context.Context, k jobKey, path string, items map[string]string) error {
	return p.mergeRecordWrite(ctx, recordWrite{k: k, path: path, items: items}).err
}

// mergeRecordWrite is mergeRecord of a record due, keeping the places in
// the queue that its variable shows where they have not moved materially
// (adoptQueue).
func (p *publisher) mergeRecordWrite(ctx context.Context, w recordWrite) recordMerge {
	m := recordMerge{}
	m.err = p.mergeRecordTries(ctx, w.k, w.path, func(old map[string]string) map[string]string {
		m.adopted = adoptQueue(old, w)
		if m.adopted != nil {
			return m.adopted.items
		}
		return w.items
	})
	if m.err != nil {
		m.adopted = nil
	}
	return m
}

// mergeRecordTries merges the items that itemsFor gives for the variable
// as it is, check-and-set, up to three times.
func (p *publisher) mergeRecordTries(ctx context.Context, k jobKey, path string, itemsFor func(old map[string]string) map[string]string) error {
	for attempt := 0; attempt < 3; attempt++ {
		old, index, err := p.nomad().GetVar(ctx, k.Namespace, path)
		if err != nil {
			return err
		}
		if newerRecord(old) {
			// A newer controller's record: left as it is (schema.go).
			p.metrics.schemaRefusals.WithLabelValues("record").Inc()
			return fmt.Errorf("%w: the record's %s is %q, this controller writes %d: left as it is",
				errNewerState, recordSchemaItem, clip(old[recordSchemaItem], quoteMax), stateSchema)
		}
		merged := mergeRecordItems(old, itemsFor(old))
		if len(old) > 0 && maps.Equal(merged, old) {
			// It says so already (the leader before wrote it): a new
			// leader's first round rewrote every record it inherited.
			return nil
		}
		_, err = p.nomad().PutVar(ctx, k.Namespace, path, merged, true, index)
		if err == nil || !isConflict(err) {
			return err
		}
	}
	return fmt.Errorf("write %s@%s: refused 3 times: the variable is locked by its owner, or keeps changing", path, k.Namespace)
}

// mergeRecordItems is the variable Steward writes: its owner's keys kept,
// Steward's replaced by items, except that the resume count never goes
// down: a state forgotten (or lost) since the last preemption starts
// counting again, and a task that resumed once must not read that it
// starts afresh.
func mergeRecordItems(old, items map[string]string) map[string]string {
	merged := map[string]string{}
	for key, v := range old {
		if !strings.HasPrefix(key, recordKeyPrefix) {
			merged[key] = v
		}
	}
	maps.Copy(merged, items)
	was, _ := strconv.Atoi(old[resumeCountItem])
	now, _ := strconv.Atoi(items[resumeCountItem])
	if was > now {
		maps.Copy(merged, resumeItems(was))
	}
	return merged
}

func isConflict(err error) bool {
	for e := err; e != nil; {
		if e == errConflict {
			return true
		}
		u, ok := e.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		e = u.Unwrap()
	}
	return false
}
