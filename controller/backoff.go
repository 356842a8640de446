package controller

import (
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	ibackoff "github.com/gpu-steward/steward/internal/backoff"
	"github.com/gpu-steward/steward/policy/engine"
)

// Writes Nomad refuses (issue 29, item 5). A write Nomad answers with a 4xx
// (a 403 for a right the controller's token lacks, a 400 for a job Nomad
// will not take back as it is) fails the same way every round: retried
// every round, it made each round fail, kept /healthz at 503, flooded
// Nomad, and overwrote the job's record and the status's recent decisions
// with the refusal. Now such a write is backed off per job and per write
// (exponential, capped), Nomad's own error goes into the job's record
// under a key of its own (steward_write_error), and the round goes on for
// every other job. Errors without a status (a connection refused, a
// timeout) and 5xx stay failures: an outage is retried soon and shows in
// /healthz.

// Backoff of a refused write: refusedFirst after the first refusal,
// doubling to refusedMax.
const (
	refusedFirst = 10 * time.Second
	refusedMax   = 10 * time.Minute
)

// writeBackoff backs off writes Nomad refused (a 4xx): per job and write,
// exponentially, each refusal's text kept for the job's record. The
// rounds ask it before each write (nomadWrite, backedOff) and the records
// quote it (writeError).
type writeBackoff struct {
	log     hclog.Logger
	refused map[writeKey]*refusedWrite
}

func newWriteBackoff(log hclog.Logger) *writeBackoff {
	return &writeBackoff{log: log, refused: map[writeKey]*refusedWrite{}}
}

// writeKey is one kind of write to one job: "priority", "move",
// "scale <group>", "stop", "signal".
type writeKey struct {
	job   jobKey
	write string
}

// refusedWrite is a write Nomad refused, and until when it is not tried
// again.
type refusedWrite struct {
	times int
	until time.Time
	at    time.Time
	// text is what the job's record says: what was refused, Nomad's own
	// error, the right that is missing, when it is tried again.
	text string
}

// errWriteRefused: Nomad refused a write with a 4xx; errBackedOff: the
// write was not tried, Nomad refused it recently. Neither fails the round.
var (
	errWriteRefused = errors.New("refused by Nomad")
	errBackedOff    = errors.New("backed off: Nomad refused this write recently")
)

// errJobGone: Nomad answered a write with a 404, the job purged since the
// round read it (a race with its owner's `nomad job stop -purge`). Nothing
// is backed off: backed off, the write waited 10 s on the job its owner
// registered again under the same ID (a preemption of it, issue 36's
// 10-second outlier). The next round sees the job gone, or the new one.
var errJobGone = fmt.Errorf("the job is gone (purged since it was read): %w", errRerun)

// refusedOrBackedOff reports whether err is a refusal handled here (in the
// job's record, retried after its backoff), or a write to a job that is
// gone, rather than a failure.
func refusedOrBackedOff(err error) bool {
	return errors.Is(err, errWriteRefused) || errors.Is(err, errBackedOff) || errors.Is(err, errJobGone)
}

// statusError is an error that carries Nomad's HTTP status
// (api.UnexpectedResponseError).
type statusError interface {
	error
	StatusCode() int
}

// nomadRefusal returns Nomad's own error when err is a 4xx answer to a write.
// A write refused because the job changed since it was read is not one:
// the next round decides again on the job as it is.
func nomadRefusal(err error) (statusError, bool) {
	var se statusError
	if err == nil || errors.Is(err, errJobChanged) || errors.Is(err, errConflict) || !errors.As(err, &se) {
		return nil, false
	}
	code := se.StatusCode()
	return se, code >= 400 && code < 500
}

// writeOf is the write an action makes to its job.
func writeOf(a engine.Action) string {
	switch a.Kind {
	case engine.SetPriority, engine.Promote:
		return "priority"
	case engine.Move:
		return "move"
	}
	return "scale " + a.Group
}

// backedOff reports whether a write to job k waits out the backoff of a
// refusal.
func (b *writeBackoff) backedOff(now time.Time, k jobKey, write string) bool {
	rw := b.refused[writeKey{k, write}]
	return rw != nil && now.Before(rw.until)
}

// nomadWrite makes one write to a tenant's job through write, unless Nomad
// refused the same write to the job within its backoff. A 4xx is recorded
// (refused) and returned wrapped in errWriteRefused.
func (b *writeBackoff) nomadWrite(r *round, k jobKey, write string, do func() (uint64, error)) (uint64, error) {
	if b.backedOff(r.now, k, write) {
		return 0, fmt.Errorf("%s %s: %w", write, k, errBackedOff)
	}
	index, err := do()
	if err == nil {
		b.writeAccepted(k, write)
		return index, nil
	}
	return 0, b.writeRefused(r, k, write, err)
}

// writeAccepted forgets a refusal of the write once Nomad takes it.
func (b *writeBackoff) writeAccepted(k jobKey, write string) {
	wk := writeKey{k, write}
	if rw := b.refused[wk]; rw != nil {
		b.log.Info("Nomad accepts a write it refused before", "job", k, "write", write, "refused", rw.times)
		delete(b.refused, wk)
	}
}

// writeRefused records a 4xx answer to a write and backs the write off; any
// other error is returned as it is. A 404 is not a refusal: the job was
// purged since the round read it (errJobGone).
func (b *writeBackoff) writeRefused(r *round, k jobKey, write string, err error) error {
	se, ok := nomadRefusal(err)
	if !ok {
		return err
	}
	if se.StatusCode() == http.StatusNotFound {
		return fmt.Errorf("%s %s: %w: %v", write, k, errJobGone, err)
	}
	if b.refused == nil {
		b.refused = map[writeKey]*refusedWrite{}
	}
	wk := writeKey{k, write}
	rw := b.refused[wk]
	if rw == nil {
		rw = &refusedWrite{}
		b.refused[wk] = rw
	}
	rw.times++
	wait := ibackoff.Exponential(refusedFirst, refusedMax, rw.times-1)
	rw.at, rw.until = r.now, r.now.Add(wait)
	nomadErr := strings.TrimSpace(se.Error())
	missing := missingRight(r.obs.Jobs[k], write, se.StatusCode())
	rw.text = fmt.Sprintf("Nomad refused Steward's %s (%d times): %s", describeWrite(write), rw.times, nomadErr)
	if missing != "" {
		rw.text += "; the controller's ACL token lacks " + missing
	}
	rw.text += fmt.Sprintf("; tried again after %s (%s)", shortDuration(wait), rw.until.UTC().Format(time.RFC3339))
	fields := []any{"job", k, "write", write, "refusal", rw.text}
	if missing != "" {
		fields = append(fields, "missing", missing)
	}
	b.log.Warn("Nomad refused a write: backing it off for this job; the round goes on", fields...)
	return fmt.Errorf("%w: %s", errWriteRefused, rw.text)
}

func describeWrite(write string) string {
	switch {
	case write == "priority":
		return "priority reset (a re-registration of the job)"
	case write == "move":
		return "move to another node pool (a re-registration of the job)"
	case strings.HasPrefix(write, "scale "):
		return "count of group " + strings.TrimPrefix(write, "scale ")
	case write == "stop":
		return "stop of a victim allocation"
	}
	return write
}

// missingRight names the ACL right a 403 answer to a write points to. A
// re-registration (priority, move; a scale Nomad turns into one while a
// deployment runs, or one with the group's scaling policy) of a job that
// mounts volumes needs the volume rights of whoever submits it
// (nomad/job_endpoint.go, Job.Register): host_volume mount-readwrite (or
// mount-readonly for read-only volumes) on each host volume, and
// csi-mount-volume in the namespace plus plugin read for CSI volumes.
// Nomad's own 403 says only "Permission denied".
func missingRight(job *ObservedJob, write string, code int) string {
	if code != http.StatusForbidden {
		return ""
	}
	base := map[string]string{"priority": `"submit-job"`, "move": `"submit-job"`, "stop": `"alloc-lifecycle"`, "signal": `"alloc-lifecycle"`}[write]
	if strings.HasPrefix(write, "scale ") {
		base = `"scale-job"`
	}
	if job == nil || write == "stop" || write == "signal" {
		return base
	}
	var host []string
	csi := false
	seen := map[string]bool{}
	for _, g := range job.Groups {
		for _, v := range g.Volumes {
			switch {
			case v.Type == "csi":
				csi = true
			case !seen[v.Source]:
				seen[v.Source] = true
				capability := "mount-readwrite"
				if v.ReadOnly {
					capability = "mount-readonly"
				}
				host = append(host, fmt.Sprintf(`host_volume %q %q`, v.Source, capability))
			}
		}
	}
	sort.Strings(host)
	var vols []string
	vols = append(vols, host...)
	if csi {
		vols = append(vols, `"csi-mount-volume" in namespace `+job.Namespace+` and plugin "read"`)
	}
	if len(vols) == 0 {
		return base
	}
	right := strings.Join(vols, ", ") + " (re-registering a job with volumes needs its submitter's volume rights)"
	if strings.HasPrefix(write, "scale ") {
		right = base + ", or " + right
	}
	return right
}

// writeErrorItem adds the refusals of writes to job k to its record.
func (b *writeBackoff) writeErrorItem(k jobKey, items map[string]string) {
	if s := b.writeError(k); s != "" {
		items["steward_write_error"] = s
	}
}

// writeError is what the record says of the refused writes to job k.
func (b *writeBackoff) writeError(k jobKey) string {
	var out []string
	for wk, rw := range b.refused {
		if wk.job == k {
			out = append(out, rw.text)
		}
	}
	sort.Strings(out)
	return strings.Join(out, " | ")
}

// refusedJobs are the jobs with a refused write, sorted.
func (b *writeBackoff) refusedJobs() []jobKey {
	seen := map[jobKey]bool{}
	var out []jobKey
	for wk := range b.refused {
		if !seen[wk.job] {
			seen[wk.job] = true
			out = append(out, wk.job)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// pruneRefusedWrites forgets refusals of jobs that are gone, and of writes
// not tried again long after their backoff ended (the engine no longer
// wants them).
func (b *writeBackoff) pruneRefusedWrites(r *round) {
	for wk, rw := range b.refused {
		if r.obs.Jobs[wk.job] == nil || r.now.Sub(rw.until) > refusedMax {
			delete(b.refused, wk)
		}
	}
}
