package sim

import (
	"fmt"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// Window picks the part of a trace to simulate: jobs submitted in
// [From, To), times since the trace's start (To 0: to its end). A week's
// trace can then be replayed a day at a time, or its busiest stretch alone.
type Window struct {
	From, To time.Duration
}

// WindowInfo is the window as the report shows it.
type WindowInfo struct {
	From        string  `json:"from"`
	To          string  `json:"to,omitempty"` // empty: to the trace's end
	FromSeconds float64 `json:"from_seconds"`
	ToSeconds   float64 `json:"to_seconds,omitempty"`
	// JobsOutside were submitted before From or at or after To.
	JobsOutside int `json:"jobs_outside"`
}

// IsSet reports whether the window leaves anything out.
func (w Window) IsSet() bool { return w.From > 0 || w.To > 0 }

// Check rejects a window that can hold no job.
func (w Window) Check() error {
	switch {
	case w.From < 0 || w.To < 0:
		return fmt.Errorf("window [%s, %s): times must not be negative", policy.FormatDuration(w.From), policy.FormatDuration(w.To))
	case w.To > 0 && w.To <= w.From:
		return fmt.Errorf("window [%s, %s): the end must come after the start", policy.FormatDuration(w.From), policy.FormatDuration(w.To))
	}
	return nil
}

// apply keeps the trace's jobs submitted in the window and re-bases
// their submissions so that the window starts at 0; it returns how many
// jobs it left out. Jobs stay in submission order.
func (w Window) apply(tr *Trace) *WindowInfo {
	if !w.IsSet() {
		return nil
	}
	info := &WindowInfo{From: policy.FormatDuration(w.From), FromSeconds: w.From.Seconds()}
	if w.To > 0 {
		info.To, info.ToSeconds = policy.FormatDuration(w.To), w.To.Seconds()
	}
	kept := tr.Jobs[:0]
	for _, j := range tr.Jobs {
		if j.Submit < w.From || (w.To > 0 && j.Submit >= w.To) {
			info.JobsOutside++
			continue
		}
		j.Submit -= w.From
		kept = append(kept, j)
	}
	tr.Jobs = kept
	return info
}

// String says the window for the report's header.
func (info *WindowInfo) String() string {
	to := info.To
	if to == "" {
		to = "the end"
	}
	return fmt.Sprintf("jobs submitted %s to %s of the trace (re-based to start at 0; %d outside left out)",
		info.From, to, info.JobsOutside)
}
