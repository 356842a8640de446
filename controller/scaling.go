package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Groups with a scaling block (the Nomad Autoscaler's policies) would
// fight Steward's holds: the Autoscaler scales a held group back up, and
// Nomad refuses to scale a group below its policy's min (Job.Scale and job
// validation, nomad v1.11.3), so a group with min 1 could not be held at
// all. While Steward holds allocations of such a group it pins the policy
// (pinnedScaling): disabled, which the Autoscaler honours, with max at the
// held count, so that Nomad itself refuses any scale up (by the Autoscaler
// or anyone calling the scale API), and min no higher than the held count.
// The owner's policy is recorded in the hold first (Held.Scaling) and
// restored when the group is resumed in full; a controller that dies in
// between finds it there (syncHolds), so a crash never leaves a policy
// pinned.

// ScalingPolicy is the part of a group's scaling block Steward changes.
type ScalingPolicy struct {
	Enabled bool  `json:"enabled"`
	Min     int64 `json:"min"`
	Max     int64 `json:"max"`
}

func (p ScalingPolicy) String() string {
	state := "enabled"
	if !p.Enabled {
		state = "disabled"
	}
	return fmt.Sprintf("%s, min %d, max %d", state, p.Min, p.Max)
}

// pinnedScaling is the policy of a group Steward holds at count whose
// owner's policy is orig: disabled, max count, min at most count.
func pinnedScaling(orig ScalingPolicy, count int) ScalingPolicy {
	return ScalingPolicy{Enabled: false, Min: min(orig.Min, int64(count)), Max: int64(count)}
}

// isPinned reports whether a group's policy is one Steward pins at count.
func isPinned(p ScalingPolicy, count int) bool {
	return !p.Enabled && p.Max == int64(count) && p.Min <= int64(count)
}

// scalingNote is what the status says of a held group's scaling policy
// ("" when Steward changed none).
func (h *Held) scalingNote() string {
	if h.Scaling == nil || h.Count == 0 {
		return ""
	}
	return fmt.Sprintf("scaling policy disabled while held (restored on resume: %s)", *h.Scaling)
}

// scalingNotes is what the job's record says of its held groups' scaling
// policies: one note per group, by group name.
func (s *JobState) scalingNotes() string {
	var notes []string
	for _, g := range slices.Sorted(maps.Keys(s.Held)) {
		if n := s.Held[g].scalingNote(); n != "" {
			if len(s.Held) > 1 {
				n = "group " + g + ": " + n
			}
			notes = append(notes, n)
		}
	}
	return strings.Join(notes, "; ")
}

// scalingFor is the scaling policy a group must have at count, and
// whether Steward must write it (false: the group has no scaling block, or
// it is already that policy). A group Steward holds part of keeps its
// policy pinned; one resumed in full gets its owner's back; one scaled
// down with no hold recorded (stopped for good by an idle rule) is pinned
// too, and stays so until its owner registers it again.
func scalingFor(job *ObservedJob, st *JobState, group string, count int) (ScalingPolicy, bool) {
	spec, ok := job.Groups[group]
	if !ok || spec.Scaling == nil {
		return ScalingPolicy{}, false
	}
	want := pinnedScaling(*spec.Scaling, count)
	if h := st.Held[group]; h != nil && h.Scaling != nil {
		want = pinnedScaling(*h.Scaling, count)
		if count >= h.Original {
			want = *h.Scaling
		}
	} else if count >= spec.Count {
		// A scale up of a group Steward holds nothing of: the policy is
		// its owner's, and stays.
		return ScalingPolicy{}, false
	}
	return want, want != *spec.Scaling
}

// keepScaling records a group's scaling policy in its hold, the first time
// Steward holds it: what a resume in full restores.
func (s *JobState) keepScaling(group string, p *ScalingPolicy) {
	h := s.Held[group]
	if h == nil || h.Scaling != nil || p == nil {
		return
	}
	kept := *p
	h.Scaling = &kept
}

// writeScaling sets a group's count together with its scaling policy (one
// re-registration of the job: Nomad refuses a plain scale outside the
// policy's min and max), with msg as a scaling event, only if the job is
// still the version the decision was made on.
func (ac *actor) writeScaling(ctx context.Context, r *round, k jobKey, group string, count int, p ScalingPolicy, msg string, meta map[string]any, evalPriority int) error {
	if r.anew(k, group, count) {
		if err := ac.leaveDoneOut(ctx, r, k, group, &p, meta); err != nil {
			return err
		}
	}
	index, err := ac.writes.nomadWrite(r, k, "scale "+group, func() (uint64, error) {
		return ac.nomad().ScaleWithPolicy(ctx, k.Namespace, k.ID, group, count, p, msg, meta, r.jobIndex(k), evalPriority)
	})
	if err != nil {
		return err
	}
	r.setJobIndex(k, index)
	if st := ac.states()[k]; st != nil {
		if h := st.Held[group]; h != nil {
			h.Index = index // Steward's own change: the hold stands (syncHolds)
		}
	}
	return nil
}

// unpinScaling gives a group whose owner took it back from a hold (its
// count changed through the scaling API, which the pinned policy allows
// downwards) its owner's policy back, when it still has the one Steward
// pinned. A re-registration brings its own policy, which stays.
func (ac *actor) unpinScaling(ctx context.Context, r *round, k jobKey, job *ObservedJob, group string, h *Held) {
	spec := job.Groups[group]
	if h.Scaling == nil || spec.Scaling == nil || spec.Scaling.Enabled || spec.Scaling.Max != int64(h.Original-h.Count) {
		return
	}
	if err := r.rerun(k, group); err != nil {
		ac.log().Warn("scaling policy of a group its owner took back not restored", "job", k, "group", group, "error", err)
		return
	}
	msg := fmt.Sprintf("Steward gives group %s its scaling policy back (%s): its owner changed its count while held", group, *h.Scaling)
	// Completed batch work is no part of the count written (round.takeDone).
	count := spec.Count - r.done(k, group)
	if err := ac.writeScaling(ctx, r, k, group, count, *h.Scaling, msg, map[string]any{"steward.rule": h.Rule}, 0); err != nil {
		if !refusedOrBackedOff(err) {
			ac.log().Error("restore the scaling policy of a group its owner took back", "job", k, "group", group, "error", err)
			r.failed++
		}
		return
	}
	r.acted++
}

// syncScaling keeps a held group's scaling policy pinned, and restores it
// once the group is resumed in full; want is the group's count as Steward
// holds it, which Nomad shows. It reports whether the hold entry may go
// (resumed in full, and the owner's policy back).
func (ac *actor) syncScaling(ctx context.Context, r *round, st *JobState, job *ObservedJob, group string, h *Held, want int) bool {
	spec := job.Groups[group]
	if spec.Scaling == nil || h.Scaling == nil {
		return h.Count == 0
	}
	k := st.key()
	var p ScalingPolicy
	switch {
	case h.Count == 0 && *spec.Scaling == *h.Scaling:
		return true
	case h.Count == 0:
		p = *h.Scaling
	case isPinned(*spec.Scaling, want):
		return false
	default:
		// Re-registered by its owner with this count and a policy of
		// their own: theirs is what a resume restores; pinned again
		// meanwhile, or the Autoscaler would scale the group up.
		ac.log().Info("held group's scaling policy changed by its owner: pinned again, theirs restored on resume", "job", k, "group", group,
			"policy", spec.Scaling.String())
		owner := *spec.Scaling
		h.Scaling = &owner
		p = pinnedScaling(owner, want)
	}
	if err := r.rerun(k, group); err != nil {
		ac.log().Warn("scaling policy of a held group not set", "job", k, "group", group, "error", err)
		return false
	}
	// Completed batch work is no part of the count written (round.takeDone).
	if d := r.takeDone(st, group); d > 0 {
		want -= d
		if h.Count > 0 {
			p = pinnedScaling(*h.Scaling, want)
		}
	}
	msg := fmt.Sprintf("Steward sets group %s's scaling policy to %s", group, p)
	if err := ac.writeScaling(ctx, r, k, group, want, p, msg, map[string]any{"steward.rule": h.Rule}, 0); err != nil {
		if !refusedOrBackedOff(err) {
			ac.log().Error("set scaling policy of a held group", "job", k, "group", group, "error", err)
			r.failed++
		}
		return false
	}
	r.acted++
	return h.Count == 0
}
