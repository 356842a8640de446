package controller

import (
	"time"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

// An allocation's samples are kept for the store's window (and at most
// maxSamplesPerAlloc); what falls out of it is not simply dropped. An idle
// stretch is timed from the first sample of the run under the rule's
// threshold (engine.IdleSince), so dropping the stretch's first samples
// would move its start forward at every sweep once it outlasts the window:
// the idle timer and the record's steward_idle_since would be rewritten at
// every round for as long as the GPUs idle (a write per idle job per round,
// as time passes), the status would say the job idles for the window at
// most, and a rule whose after is longer than the window would never act.
//
// So the samples that fall out are folded into a few that answer the same:
// for every threshold, the run under it that reaches into the old samples
// starts where it started. That is the first old sample, each old sample
// busier than every later old one (the last sample at or over a
// threshold is always one of them), and the sample after each of those
// (where the run under that threshold begins). Busy time (busyStretch) and
// means over the folded part are approximate; they read recentSamples.

// maxFoldedSamples bounds what folding keeps: a GPU whose activity fell
// step by step for hours keeps its last steps, and with the oldest steps
// goes the first old sample, so that a threshold over them finds its run
// starting at the oldest sample kept — later than it did, never earlier
// (an idle rule acts late rather than early).
const maxFoldedSamples = 64

// foldSamples returns old (in time order) folded as above.
func foldSamples(old []engine.Sample) []engine.Sample {
	if len(old) <= 2 {
		return old
	}
	// keep marks each sample busier than every later one, the sample
	// after it, and the first.
	keep := make([]bool, len(old))
	keep[0] = true
	top := old[len(old)-1].Util
	keep[len(old)-1] = true
	for i := len(old) - 2; i >= 0; i-- {
		if old[i].Util > top {
			top = old[i].Util
			keep[i], keep[i+1] = true, true
		}
	}
	var out []engine.Sample
	for i, k := range keep {
		if k {
			out = append(out, old[i])
		}
	}
	if len(out) > maxFoldedSamples {
		out = out[len(out)-maxFoldedSamples:]
	}
	return out
}

// recentSamples is the part of samples within window of the newest: what
// the store held before anything was folded, for measures that read every
// sample of a stretch (busyStretch).
func recentSamples(samples []engine.Sample, window time.Duration) []engine.Sample {
	if len(samples) == 0 {
		return samples
	}
	newest := samples[len(samples)-1].At
	cut := 0
	for cut < len(samples) && newest.Sub(samples[cut].At) > window {
		cut++
	}
	return samples[cut:]
}

// Every reader of a plan's samples asks one thing of them: since when an
// allocation's GPUs have been under an idle rule's threshold
// (engine.IdleSince), their mean since (for reasons), and the newest
// sample. That is answered by the samples from the newest one at or over
// the threshold on, and for every threshold up to the policy's highest by
// the samples from the newest one at or over that: so a plan is given
// those (idleTail), not the whole history. A busy allocation's is one
// sample, where the whole was up to the window's 720 (32 bytes each, for
// every allocation in every round's copy, and the copy kept for the job
// check between rounds).

// idleTail is the part of samples that answers IdleSince and the mean
// since for every threshold up to top: from the newest sample at or over
// top on (all of them if none is).
func idleTail(samples []engine.Sample, top float64) []engine.Sample {
	for i := len(samples) - 1; i >= 0; i-- {
		if samples[i].Util >= top {
			return samples[i:]
		}
	}
	return samples
}

// maxIdleThreshold is the highest threshold of pol's idle rules; none:
// -1, so that idleTail keeps only the newest sample.
func maxIdleThreshold(pol *policy.Policy) float64 {
	top := -1.0
	if pol == nil {
		return top
	}
	for _, r := range pol.Idle {
		top = max(top, r.Threshold)
	}
	return top
}

// sampleReads is, per allocation of obs, the highest idle threshold its
// samples are read for, for the store to keep no more than that
// (usageStore.reads): its job's idle rule's threshold, -1 when no rule
// covers it (the newest sample is all anyone reads: the status, the
// sample age). Allocations of a job whose snooze measures busy time
// (busyStretch reads every sample since the snooze's run began) are left
// out, and keep everything. A policy reloaded with a higher threshold
// finds less history than it would have: its idle stretches start at the
// newest sample kept, later than they did, never earlier.
func sampleReads(pol *policy.Policy, obs *Observation, states map[jobKey]*JobState) map[string]float64 {
	out := make(map[string]float64, len(obs.Allocs))
	top := map[jobKey]float64{}
	for _, a := range obs.Allocs {
		k := jobKey{a.Namespace, a.JobID}
		if st := states[k]; st != nil && st.Snooze != nil {
			continue
		}
		t, ok := top[k]
		if !ok {
			t = -1
			if job := obs.Jobs[k]; job != nil {
				if rule := pol.ResolveJob(job.Namespace, job.Meta).IdleRule; rule != nil {
					t = rule.Threshold
				}
			}
			top[k] = t
		}
		out[a.ID] = t
	}
	return out
}
