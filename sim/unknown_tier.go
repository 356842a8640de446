package sim

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// A Steward trace may name a tier the policy does not define (a typo, a
// tier since renamed). The controller runs such a job as its tenant's
// default tier, and so does the simulator; but the job then hides in that
// tier's figures, so the report counts these jobs apart and gives their
// queueing delay a row of its own.

// UnknownTier is a tier name of the trace that the policy lacks.
type UnknownTier struct {
	Tier string
	Jobs int
	// RanAs are the tiers the jobs ran as: their tenants' default tiers.
	RanAs []string
}

// noteUnknownTier counts a derived job whose tier the policy lacks.
func (d *Derivation) noteUnknownTier(j *Job, ranAs string) {
	i := slices.IndexFunc(d.Unknown, func(u UnknownTier) bool { return u.Tier == j.Tier })
	if i < 0 {
		d.Unknown = append(d.Unknown, UnknownTier{Tier: j.Tier})
		i = len(d.Unknown) - 1
	}
	u := &d.Unknown[i]
	u.Jobs++
	if !slices.Contains(u.RanAs, ranAs) {
		u.RanAs = append(u.RanAs, ranAs)
		slices.Sort(u.RanAs)
	}
}

// unknownTierRule is the derivation rule's line about them.
func (d *Derivation) unknownTierRule() string {
	if len(d.Unknown) == 0 {
		return ""
	}
	parts := make([]string, len(d.Unknown))
	for i, u := range d.Unknown {
		parts[i] = fmt.Sprintf("%q (%s) → %s", u.Tier, nJobs(u.Jobs), strings.Join(u.RanAs, ", "))
	}
	return fmt.Sprintf("  unknown  tiers the policy lacks ran as their tenant's default tier, as the controller runs them: %s\n",
		strings.Join(parts, "; "))
}

// unknownTierJobs is results.json's unknown_tier_jobs: tier → jobs.
func unknownTierJobs(unknown []UnknownTier) map[string]int {
	if len(unknown) == 0 {
		return nil
	}
	m := make(map[string]int, len(unknown))
	for _, u := range unknown {
		m[u.Tier] = u.Jobs
	}
	return m
}

// unknownTierDelays are the queueing delays of each unknown tier's jobs,
// by tier name (sorted), whatever tier they ran as.
func unknownTierDelays(s *simulator) []Delay {
	by := map[string][]float64{}
	var names []string
	for i := range s.jobs {
		j := &s.jobs[i]
		name := j.spec.Tier
		if name == "" || s.pol.Tiers[name] != nil {
			continue
		}
		if _, seen := by[name]; !seen {
			names = append(names, name)
			by[name] = nil
		}
		if j.firstStart >= 0 {
			by[name] = append(by[name], (j.firstStart - j.spec.Submit).Minutes())
		}
	}
	slices.Sort(names)
	var out []Delay
	for _, name := range names {
		d := summarise(by[name])
		d.Tier = name
		out = append(out, d)
	}
	return out
}

// unknownTierRows are the table's rows for them, after the tiers' own.
func (rep *Report) unknownTierRows() []row {
	if len(rep.Results) == 0 {
		return nil
	}
	var rows []row
	for i, d := range rep.Results[0].UnknownTierDelay {
		ranAs := "?"
		if k := slices.IndexFunc(rep.unknown, func(u UnknownTier) bool { return u.Tier == d.Tier }); k >= 0 {
			ranAs = strings.Join(rep.unknown[k].RanAs, ", ")
		}
		rows = append(rows, row{fmt.Sprintf("unknown tier %q → %s, %s: delay p50/p95/p99 (min)",
			d.Tier, ranAs, nJobs(rep.UnknownTierJobs[d.Tier])), func(r *Result) string {
			t := r.UnknownTierDelay[i]
			return fmt.Sprintf("%s / %s / %s", minutes(t.P50), minutes(t.P95), minutes(t.P99))
		}})
	}
	return rows
}

// unknownTierCSV are results.csv's metrics for them.
func unknownTierCSV(r *Result) [][2]string {
	var out [][2]string
	for _, d := range r.UnknownTierDelay {
		for _, q := range []struct {
			name string
			v    float64
		}{{"p50", d.P50}, {"p95", d.P95}, {"p99", d.P99}} {
			out = append(out, [2]string{"unknown_tier_delay_" + q.name + "_min." + d.Tier,
				strconv.FormatFloat(q.v, 'g', 6, 64)})
		}
		out = append(out, [2]string{"unknown_tier_jobs_started." + d.Tier, strconv.Itoa(d.Jobs)})
	}
	return out
}

func nJobs(n int) string {
	if n == 1 {
		return "1 job"
	}
	return strconv.Itoa(n) + " jobs"
}
