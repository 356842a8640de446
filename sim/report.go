package sim

import (
	"cmp"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/gpu-steward/steward/policy"
)

// Report is one workload under every compared policy.
type Report struct {
	Trace           string    `json:"trace"`
	Format          string    `json:"format"`
	Jobs            int       `json:"jobs"`
	DroppedCPUOnly  int       `json:"dropped_cpu_only"`
	Nodes           int       `json:"nodes"`
	GPUsPerNode     int       `json:"gpus_per_node,omitempty"` // 0 when node sizes are mixed
	Seed            uint64    `json:"seed"`
	CheckpointEvery string    `json:"checkpoint_every"`
	CheckpointCost  string    `json:"checkpoint_cost"`
	CheckpointDone  bool      `json:"checkpoint_done,omitempty"`
	DoneNotice      string    `json:"done_notice,omitempty"`
	PlanInterval    string    `json:"plan_interval"`
	TenantScale     float64   `json:"tenant_scale"`
	PolicyFiles     []string  `json:"policy_files,omitempty"`
	Derivation      string    `json:"derivation"`
	Results         []*Result `json:"results"`
	Input                     // what went in: node shapes, window, counts
}

// Options are a comparison's settings.
type Options struct {
	Config
	Seed     uint64
	Limit    int
	Window   Window       // only jobs submitted in it (zero: all)
	Policies []PolicyKind // default AllPolicies
	// TenantScale is the factor ScaleTenants applied to the policy, for
	// the report (1 when it was not scaled).
	TenantScale float64
}

// ScaleTenants multiplies every tenant's and department's reserve and limit
// by f (rounded), to size a policy written for another cluster.
// Departments scale with their tenants: left as written, a department's
// limit sized for the policy's cluster would cap its scaled tenants.
func ScaleTenants(p *policy.Policy, f float64) {
	if f == 1 {
		return
	}
	scale := func(reserve, limit *int) {
		*reserve = int(math.Round(float64(*reserve) * f))
		if *limit != policy.Unlimited {
			*limit = int(math.Round(float64(*limit) * f))
		}
	}
	for _, t := range p.Tenants {
		scale(&t.Reserve, &t.Limit)
	}
	for _, d := range p.Departments {
		scale(&d.Reserve, &d.Limit)
	}
}

// Compare derives the trace's workload and runs it under each policy.
// It changes tr's jobs in place (Derive).
func Compare(tr *Trace, o Options) (*Report, error) {
	d, in, err := prepare(tr, o)
	if err != nil {
		return nil, err
	}
	nodes, gpusPerNode := in.nodes()
	if o.TenantScale == 0 {
		o.TenantScale = 1
	}
	rep := &Report{Trace: tr.Name, Format: tr.Format, Jobs: len(tr.Jobs), DroppedCPUOnly: tr.Dropped,
		Nodes: nodes, GPUsPerNode: gpusPerNode, Seed: o.Seed,
		CheckpointEvery: o.CheckpointEvery.String(), CheckpointCost: o.CheckpointCost.String(), CheckpointDone: o.CheckpointDone,
		PlanInterval: o.PlanInterval.String(), TenantScale: o.TenantScale, PolicyFiles: o.Policy.Files, Derivation: d.Rule(),
		Input: in}
	if o.CheckpointDone {
		rep.DoneNotice = o.Config.doneNotice().String()
	}
	kinds := o.Policies
	if len(kinds) == 0 {
		kinds = AllPolicies
	}
	for _, k := range kinds {
		r, err := Simulate(tr.Jobs, o.Config, k)
		if err != nil {
			return nil, fmt.Errorf("trace %s: %w", tr.Name, err)
		}
		rep.Results = append(rep.Results, r)
	}
	return rep, nil
}

// row is one line of the comparison table: a metric and its value under
// each policy.
type row struct {
	name  string
	value func(r *Result) string
}

func hours(h float64) string   { return strconv.FormatFloat(h, 'f', 1, 64) }
func minutes(m float64) string { return strconv.FormatFloat(m, 'f', 1, 64) }
func pct(f float64) string     { return strconv.FormatFloat(f*100, 'f', 1, 64) + "%" }

func (rep *Report) rows() []row {
	rows := []row{
		{"jobs completed", func(r *Result) string { return strconv.Itoa(r.Completed) }},
		{"jobs stopped by an idle rule", func(r *Result) string { return strconv.Itoa(r.StoppedByIdleRule) }},
		{"jobs never started", func(r *Result) string { return strconv.Itoa(r.NeverStarted) }},
		{"makespan (h)", func(r *Result) string { return hours(r.MakespanHours) }},
		{"GPU utilisation, allocated", func(r *Result) string { return pct(r.UtilAllocated) }},
		{"GPU utilisation, busy", func(r *Result) string { return pct(r.UtilBusy) }},
		{"high-priority delay p50 (min)", func(r *Result) string { return minutes(r.HighPriorityDelay.P50) }},
		{"high-priority delay p95 (min)", func(r *Result) string { return minutes(r.HighPriorityDelay.P95) }},
		{"high-priority delay p99 (min)", func(r *Result) string { return minutes(r.HighPriorityDelay.P99) }},
		{"high-priority waits over 30 min, by rule", func(r *Result) string { return countsByKey(r.HighPriorityLongWaits) }},
		{"high-priority delay net of own limit p95/p99 (min)", func(r *Result) string {
			return minutes(r.HighPriorityDelayNetOwnLimit.P95) + " / " + minutes(r.HighPriorityDelayNetOwnLimit.P99)
		}},
		{"high-priority waits over 30 min, hours by rule", func(r *Result) string { return hoursByKey(r.HighPriorityLongWaitHours) }},
	}
	if len(rep.Results) > 0 {
		for i, d := range rep.Results[0].DelayByTier {
			rows = append(rows, row{fmt.Sprintf("%s delay p50/p95/p99 (min)", d.Tier), func(r *Result) string {
				t := r.DelayByTier[i]
				return fmt.Sprintf("%s / %s / %s", minutes(t.P50), minutes(t.P95), minutes(t.P99))
			}})
		}
	}
	rows = append(rows, rep.unknownTierRows()...)
	rows = append(rows,
		row{"GPU-hours lost to preemption", func(r *Result) string { return hours(r.LostGPUHours) }},
		row{"preemptions", func(r *Result) string { return strconv.Itoa(r.Preemptions) }},
		row{"jobs preempted 0/1/2/3/4/5+ times", func(r *Result) string {
			parts := make([]string, len(r.PreemptionsPerJob))
			for i, n := range r.PreemptionsPerJob {
				parts[i] = strconv.Itoa(n)
			}
			return strings.Join(parts, "/")
		}},
		row{"most preemptions of one job", func(r *Result) string { return strconv.Itoa(r.MaxPreemptionsPerJob) }},
		row{"most stops of one job in an hour", func(r *Result) string { return strconv.Itoa(r.MaxPreemptionsPerJobPerHour) }},
		row{"most stops of one job over its life", func(r *Result) string { return strconv.Itoa(r.MaxPreemptionsPerJobLife) }},
		row{"stops over the eviction cap", func(r *Result) string { return strconv.Itoa(r.CapBreaches) }},
		row{"wasted preemptions (victim back)", func(r *Result) string {
			return fmt.Sprintf("%d (%d)", r.WastedPreemptions, r.WastedVictimBack)
		}},
		row{"migrations (victims that move to free GPUs)", func(r *Result) string { return strconv.Itoa(r.Migrations) }},
		row{"idle stops", func(r *Result) string { return strconv.Itoa(r.IdleStops) }},
		row{"idle GPU-hours reclaimed", func(r *Result) string { return hours(r.IdleReclaimedGPUHours) }},
		row{"idle GPU-hours kept: no rule/within after/past after", func(r *Result) string {
			u := r.IdleUnreclaimedGPUHours
			return hours(u["no_rule"]) + "/" + hours(u["within_after"]) + "/" + hours(u["past_after"])
		}},
		row{"under-reservation wait (tenant-h)", func(r *Result) string { return hours(r.ReserveWaitHours) }},
		row{"reserved GPU-hours owed, unmet", func(r *Result) string { return hours(r.ReserveShortGPUHours) }},
		row{"fair share: Jain index, mean/worst day", func(r *Result) string {
			return strconv.FormatFloat(r.FairShare.Jain, 'f', 3, 64) + "/" + strconv.FormatFloat(r.FairShare.JainMin, 'f', 3, 64)
		}},
		row{"fair share: days ≥ 0.9 of days contested; tenant-days within ±20%", func(r *Result) string {
			return fmt.Sprintf("%d of %d; %s", r.FairShare.FairWindows, r.FairShare.Windows, pct(r.FairShare.Within20))
		}},
	)
	if len(rep.Results) > 0 {
		for i, t := range rep.Results[0].Tenants {
			rows = append(rows, row{fmt.Sprintf("share of GPU-hours: %s", t.Tenant), func(r *Result) string {
				return pct(r.Tenants[i].Share)
			}})
		}
	}
	rows = append(rows,
		row{"engine plans", func(r *Result) string { return strconv.Itoa(r.EnginePlans) }},
		row{"simulation time (s)", func(r *Result) string { return strconv.FormatFloat(r.WallSeconds, 'f', 2, 64) }},
	)
	return rows
}

// WriteTable prints the comparison for a terminal, with the derivation
// rule above it.
func (rep *Report) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "Trace %s (%s): %d GPU jobs", rep.Trace, rep.Format, rep.Jobs)
	if rep.DroppedCPUOnly > 0 {
		fmt.Fprintf(w, " (%d CPU-only jobs left out)", rep.DroppedCPUOnly)
	}
	fmt.Fprintf(w, " on %s; jobs checkpoint every %s on their own", rep.setting(), rep.CheckpointEvery)
	if rep.CheckpointDone {
		fmt.Fprintf(w, " and say when a signalled checkpoint is written (stopped within %s)", rep.DoneNotice)
	}
	if rep.TenantScale != 1 {
		fmt.Fprintf(w, "; tenant reserves and limits × %g", rep.TenantScale)
	}
	fmt.Fprintln(w)
	fmt.Fprint(w, rep.Derivation)
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "\t")
	for _, r := range rep.Results {
		fmt.Fprintf(tw, "%s\t", r.Policy)
	}
	fmt.Fprintln(tw)
	for _, row := range rep.rows() {
		fmt.Fprintf(tw, "%s\t", row.name)
		for _, r := range rep.Results {
			fmt.Fprintf(tw, "%s\t", row.value(r))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// WriteMarkdown prints the comparison as a Markdown table (for docs/evaluation.md).
func (rep *Report) WriteMarkdown(w io.Writer) error {
	fmt.Fprint(w, "| metric |")
	for _, r := range rep.Results {
		fmt.Fprintf(w, " %s |", r.Policy)
	}
	fmt.Fprint(w, "\n|---|")
	for range rep.Results {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprintln(w)
	for _, row := range rep.rows() {
		if row.name == "simulation time (s)" || row.name == "engine plans" {
			continue
		}
		fmt.Fprintf(w, "| %s |", row.name)
		for _, r := range rep.Results {
			fmt.Fprintf(w, " %s |", row.value(r))
		}
		fmt.Fprintln(w)
	}
	return nil
}

// WriteJSON writes every figure, the series and the derivation rule.
func WriteJSON(w io.Writer, reps []*Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(reps)
}

// WriteCSV writes one line per trace, policy and metric (long format, for
// scripts): trace,policy,metric,value.
func WriteCSV(w io.Writer, reps []*Report) error {
	cw := csv.NewWriter(w)
	if err := cw.Write([]string{"trace", "policy", "metric", "value"}); err != nil {
		return err
	}
	f := func(x float64) string { return strconv.FormatFloat(x, 'g', 6, 64) }
	for _, rep := range reps {
		for _, r := range rep.Results {
			put := func(metric, value string) { _ = cw.Write([]string{rep.Trace, r.Policy, metric, value}) }
			put("jobs", strconv.Itoa(r.Jobs))
			put("completed", strconv.Itoa(r.Completed))
			put("stopped_by_idle_rule", strconv.Itoa(r.StoppedByIdleRule))
			put("never_started", strconv.Itoa(r.NeverStarted))
			put("makespan_hours", f(r.MakespanHours))
			put("util_allocated", f(r.UtilAllocated))
			put("util_busy", f(r.UtilBusy))
			for _, q := range []struct {
				name string
				d    Delay
			}{{"high_priority", r.HighPriorityDelay}, {"high_priority_net_own_limit", r.HighPriorityDelayNetOwnLimit}} {
				put(q.name+"_delay_p50_min", f(q.d.P50))
				put(q.name+"_delay_p95_min", f(q.d.P95))
				put(q.name+"_delay_p99_min", f(q.d.P99))
			}
			for _, rule := range slices.Sorted(maps.Keys(r.HighPriorityLongWaitHours)) {
				put("high_priority_long_wait_hours."+rule, f(r.HighPriorityLongWaitHours[rule]))
			}
			for _, rule := range slices.Sorted(maps.Keys(r.HighPriorityWaitHours)) {
				put("high_priority_wait_hours."+rule, f(r.HighPriorityWaitHours[rule]))
			}
			for _, d := range r.DelayByTier {
				put("delay_p50_min."+d.Tier, f(d.P50))
				put("delay_p95_min."+d.Tier, f(d.P95))
				put("delay_p99_min."+d.Tier, f(d.P99))
			}
			for _, kv := range unknownTierCSV(r) {
				put(kv[0], kv[1])
			}
			put("lost_gpu_hours", f(r.LostGPUHours))
			put("preemptions", strconv.Itoa(r.Preemptions))
			put("preempted_jobs", strconv.Itoa(r.PreemptedJobs))
			put("max_preemptions_per_job", strconv.Itoa(r.MaxPreemptionsPerJob))
			put("max_preemptions_per_job_per_hour", strconv.Itoa(r.MaxPreemptionsPerJobPerHour))
			put("max_preemptions_per_job_life", strconv.Itoa(r.MaxPreemptionsPerJobLife))
			put("cap_breaches", strconv.Itoa(r.CapBreaches))
			put("wasted_preemptions", strconv.Itoa(r.WastedPreemptions))
			put("wasted_victim_back", strconv.Itoa(r.WastedVictimBack))
			put("migrations", strconv.Itoa(r.Migrations))
			for i, n := range r.PreemptionsPerJob {
				label := strconv.Itoa(i)
				if i == len(r.PreemptionsPerJob)-1 {
					label += "+"
				}
				put("jobs_preempted_times."+label, strconv.Itoa(n))
			}
			put("idle_stops", strconv.Itoa(r.IdleStops))
			put("idle_reclaimed_gpu_hours", f(r.IdleReclaimedGPUHours))
			for _, why := range []string{"no_rule", "within_after", "past_after"} {
				put("idle_unreclaimed_gpu_hours."+why, f(r.IdleUnreclaimedGPUHours[why]))
			}
			put("reserve_wait_hours", f(r.ReserveWaitHours))
			put("reserve_short_gpu_hours", f(r.ReserveShortGPUHours))
			put("fair_share_jain", strconv.FormatFloat(r.FairShare.Jain, 'f', 3, 64))
			for _, t := range r.Tenants {
				put("share."+t.Tenant, f(t.Share))
			}
			put("engine_plans", strconv.Itoa(r.EnginePlans))
		}
	}
	cw.Flush()
	return cw.Error()
}

// hoursByKey prints hours as "limit 812.3, capacity 4.0", the largest
// first (then by name), or "0" when there are none.
func hoursByKey(m map[string]float64) string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int {
		if c := cmp.Compare(m[b], m[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + " " + hours(m[k])
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, ", ")
}

// countsByKey prints counts as "limit 157, capacity 4", the largest first
// (then by name), or "0" when there are none.
func countsByKey(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if m[a] != m[b] {
			return m[b] - m[a]
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + " " + strconv.Itoa(m[k])
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, ", ")
}
