package controller

import (
	"slices"
	"time"

	"github.com/hashicorp/nomad/api"
)

// The checkpoint-written contract for every driver. A task that took a
// checkpoint signal says that the checkpoint it asked for is written by
// touching a file in its own task dir, ${NOMAD_TASK_DIR}/<WrittenFile>
// (/local/steward-checkpoint-written in a container), which the controller
// reads through Nomad's allocation filesystem API (read-fs): no token in
// the task, no driver of Steward's, and a task can speak only for itself
// (another task of the allocation does not see that dir in a container).
// steward-exec tasks may also say it through their driver's events
// (STEWARD_CHECKPOINT_DONE, checkpoint.go); either answer counts.
//
// This file is the functional core: which files to read (writtenTargets),
// what a read answers (writtenAnswer), and the store between the poll and
// the rounds. written_poll.go is the shell that reads them.

// WrittenFile is the file's name in the task dir (Nomad's local/).
const WrittenFile = "steward-checkpoint-written"

// writtenPath is the file of a task, as the allocation filesystem API
// names it (relative to the allocation dir).
func writtenPath(task string) string { return task + "/local/" + WrittenFile }

// writtenTarget is one task whose answer a drain waits for.
type writtenTarget struct {
	Namespace, AllocID, Task string
	// Since is the drain's signal less doneSkew: a file older than that
	// answers an earlier request, or none.
	Since time.Time
}

// writtenMaxTargets bounds the files one poll reads: drains in flight at
// once are few (one per preemption, for its grace); beyond this the rest
// wait for the next poll, in the order of the states.
const writtenMaxTargets = 128

// writtenTargets are the tasks whose files the poll reads: those that took
// the checkpoint signal of a drain whose signal reached Nomad and that is
// not finished, in allocations Nomad still runs. Nothing else is read, so
// the read-fs right is used on victims in their grace only.
func writtenTargets(states []*JobState, obs *Observation) []writtenTarget {
	if obs == nil {
		return nil
	}
	var out []writtenTarget
	for _, st := range states {
		job := obs.Jobs[st.key()]
		if job == nil {
			continue
		}
		for _, d := range st.Draining {
			if d.Finished || d.Signal == "" || !d.Sent || d.Signaled.IsZero() {
				continue
			}
			for i := range obs.Allocs {
				a := &obs.Allocs[i]
				if !d.has(a.ID) || !ownedBy(a, st.key()) {
					continue
				}
				for _, task := range job.Groups[a.Group].SignalTasks {
					if len(out) == writtenMaxTargets {
						return out
					}
					if slices.Contains(a.RunningTasks, task) {
						out = append(out, writtenTarget{Namespace: a.Namespace, AllocID: a.ID, Task: task, Since: d.Signaled.Add(-doneSkew)})
					}
				}
			}
		}
	}
	return out
}

// writtenAnswer is what a read of a task's file says: when the checkpoint
// was written, and whether it answers a signal sent at since. A missing
// file, a directory or anything but a plain file, and a file from before
// the signal answer nothing; a time in the future (a client clock ahead)
// is taken as now.
func writtenAnswer(info *api.AllocFileInfo, since, now time.Time) (time.Time, bool) {
	if info == nil || info.IsDir || (info.FileMode != "" && info.FileMode[0] != '-') {
		return time.Time{}, false
	}
	at := info.ModTime
	if at.Before(since) {
		return time.Time{}, false
	}
	if at.After(now) {
		at = now
	}
	return at, true
}
