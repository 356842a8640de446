package sim

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// The public traces carry no tiers, tenants or GPU utilisation. Derive
// fills them in by a fixed rule, the same for every policy compared, from
// the job's own shape and a seeded hash of its ID or user: the same trace,
// seed and policy always give the same workload, and a different seed
// gives another plausible one. DerivationRule prints the rule.

// Work classes, from most to least urgent. They map onto the policy's
// tiers by rank (classTier), so any policy with at least one tier works.
const (
	classService     = iota // long-running small jobs: inference servers
	classBuild              // short small jobs: CI, evaluation
	classInteractive        // single-node jobs of up to a working day: notebooks
	classBatch              // everything else: training
	numClasses
)

var classNames = [numClasses]string{"service", "build", "interactive", "batch"}

// Parameters of the derivation rule; DerivationRule prints them.
const (
	serviceShare      = 0.10 // of small single-node jobs that run at least serviceMinRun
	serviceMaxGPUs    = 2
	serviceMinRun     = time.Hour
	buildMaxGPUs      = 2
	buildMaxRun       = 10 * time.Minute
	interactiveShare  = 0.60 // of single-node jobs of up to interactiveMaxRun
	interactiveMaxRun = 12 * time.Hour

	interactiveIdleShare = 0.50 // of interactive jobs go idle part-way
	interactiveBusyMin   = 0.20 // ... after this share of their run time
	interactiveBusySpan  = 0.40 // ... plus up to this much more
	batchIdleShare       = 0.05 // of batch jobs stall part-way
	batchBusyMin         = 0.50
	batchBusySpan        = 0.40

	// BusyUtil and IdleUtil are the GPU utilisation, in percent, that
	// busy and idle jobs report to the engine: idle is under every
	// sensible idle threshold, busy over it.
	BusyUtil = 90.0
	IdleUtil = 1.0
)

// DefaultTeams are the tenants when the policy defines none.
var DefaultTeams = []string{"team-a", "team-b", "team-c", "team-d"}

// Derivation says what Derive did, for the report.
type Derivation struct {
	Seed    uint64
	Tenants []string // namespaces users are spread over
	// Tiers maps each work class to the policy tier it became.
	Tiers [numClasses]string
	// Counts, by what was derived.
	ByTier    map[string]int
	ByTenant  map[string]int
	Idle      int // jobs given an idle tail
	Reshaped  int // jobs whose allocations were wider than a node
	Dropped   int // jobs larger than the whole cluster (never placeable)
	Given     int // jobs whose trace named tenant, tier or idleness (kept)
	Truncated int // jobs beyond -limit

	// Capacity is the cluster's GPUs, which Dropped jobs exceed.
	Capacity int
	// Fractional jobs asked for a fraction of a GPU and got a whole one.
	Fractional int
	// Unknown are tiers the trace names that the policy lacks.
	Unknown []UnknownTier
}

// DeriveOptions configure Derive.
type DeriveOptions struct {
	Seed        uint64
	Policy      *policy.Policy
	Nodes       int
	GPUsPerNode int
	// NodeGPUs, when set, is every node's GPU count and overrides Nodes
	// and GPUsPerNode (as in Config).
	NodeGPUs []int
	// NodeModels, when set, is every node's GPU model (as in Config): a
	// job asking for a model is kept only if that model's nodes can hold it.
	NodeModels []string
	Limit      int // at most this many jobs (0: all)
}

// Derive completes a trace's jobs in place for a cluster and policy:
// reshapes jobs wider than a node, drops jobs the cluster can never hold,
// keeps the first Limit jobs, and fills in tenant, tier and idleness where
// the trace left them out.
func Derive(tr *Trace, o DeriveOptions) (*Derivation, error) {
	if o.Policy == nil || len(o.Policy.Tiers) == 0 {
		return nil, fmt.Errorf("derive workload: the policy defines no tiers")
	}
	cfg := Config{Nodes: o.Nodes, GPUsPerNode: o.GPUsPerNode, NodeGPUs: o.NodeGPUs}
	nodeGPUs, err := cfg.nodeGPUs()
	if err != nil {
		return nil, fmt.Errorf("derive workload: %w", err)
	}
	// Jobs are re-split to the largest node: smaller nodes take what fits.
	largest := slices.Max(nodeGPUs)
	d := &Derivation{Seed: o.Seed, ByTier: map[string]int{}, ByTenant: map[string]int{}}
	for _, name := range o.Policy.TenantNames() {
		d.Tenants = append(d.Tenants, o.Policy.Tenants[name].Namespace)
	}
	if len(d.Tenants) == 0 {
		d.Tenants = DefaultTeams
	}
	tiers := o.Policy.TierNames()
	for c := range d.Tiers {
		d.Tiers[c] = tiers[classTier(c, len(tiers))]
	}
	capacity := cfg.totalGPUs()
	d.Capacity = capacity
	kept := tr.Jobs[:0]
	for _, j := range tr.Jobs {
		if o.Limit > 0 && len(kept) == o.Limit {
			d.Truncated++
			continue
		}
		if j.GPUs > largest {
			// Wider than a node: as few allocations as fit, evenly sized.
			total := j.TotalGPUs()
			j.Allocs = (total + largest - 1) / largest
			j.GPUs = (total + j.Allocs - 1) / j.Allocs
			d.Reshaped++
		}
		if j.TotalGPUs() > capacity || j.Allocs > slotsFor(nodeGPUs, o.NodeModels, j.Model, j.GPUs) {
			d.Dropped++
			continue
		}
		if j.Tenant != "" || j.Tier != "" || j.IdleAfter != IdleUnset {
			d.Given++
		}
		class := classOf(&j, o.Seed)
		if j.Tenant == "" {
			user := j.User
			if user == "" {
				user = j.ID
			}
			j.Tenant = d.Tenants[int(unit(o.Seed, "tenant", user)*float64(len(d.Tenants)))]
		}
		if j.Tier == "" {
			j.Tier = d.Tiers[class]
		}
		if j.IdleAfter == IdleUnset {
			j.IdleAfter = idleAfter(&j, class, o.Seed)
		}
		if j.IdleAfter < j.RunTime {
			d.Idle++
		}
		if j.FractionalGPU {
			d.Fractional++
		}
		if o.Policy.Tiers[j.Tier] == nil {
			ranAs, _ := o.Policy.TenantTier(o.Policy.TenantOf(j.Tenant), j.Tier)
			d.noteUnknownTier(&j, ranAs)
		}
		d.ByTier[j.Tier]++
		d.ByTenant[j.Tenant]++
		kept = append(kept, j)
	}
	tr.Jobs = kept
	return d, nil
}

// classOf sorts a job into a work class by its shape, with a seeded coin
// for the shares.
func classOf(j *Job, seed uint64) int {
	single := j.Allocs == 1
	coin := unit(seed, "class", j.ID)
	switch {
	case single && j.GPUs <= serviceMaxGPUs && j.RunTime >= serviceMinRun && coin < serviceShare:
		return classService
	case single && j.GPUs <= buildMaxGPUs && j.RunTime <= buildMaxRun:
		return classBuild
	case single && j.RunTime <= interactiveMaxRun && coin < interactiveShare:
		return classInteractive
	}
	return classBatch
}

// classTier maps a class onto one of n tiers (highest priority first),
// spreading the four classes evenly over the tiers.
func classTier(class, n int) int {
	return int(math.Round(float64(class) * float64(n-1) / float64(numClasses-1)))
}

// idleAfter picks when a job's GPUs go idle, if ever.
func idleAfter(j *Job, class int, seed uint64) time.Duration {
	share, busyMin, busySpan := 0.0, 0.0, 0.0
	switch class {
	case classInteractive:
		share, busyMin, busySpan = interactiveIdleShare, interactiveBusyMin, interactiveBusySpan
	case classBatch:
		share, busyMin, busySpan = batchIdleShare, batchBusyMin, batchBusySpan
	}
	if unit(seed, "idle", j.ID) >= share {
		return NeverIdle
	}
	busy := busyMin + busySpan*unit(seed, "busy", j.ID)
	return time.Duration(float64(j.RunTime) * busy).Round(time.Second)
}

// unit is a seeded hash of (purpose, key) mapped to [0, 1): FNV-1a, then
// a SplitMix64 finaliser so that nearby keys spread out.
func unit(seed uint64, purpose, key string) float64 {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], seed)
	h.Write(b[:])
	h.Write([]byte(purpose))
	h.Write([]byte{0})
	h.Write([]byte(key))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11) / (1 << 53)
}

// Rule prints the derivation rule with its parameters and what it gave,
// so that results are never read without it.
func (d *Derivation) Rule() string {
	var b strings.Builder
	pct := func(f float64) string { return fmt.Sprintf("%.0f%%", f*100) }
	fmt.Fprintf(&b, "Workload derivation (seed %d; the same seed gives the same workload):\n", d.Seed)
	fmt.Fprintf(&b, "  tenant   where the trace names none: users spread over %s by a seeded hash of the user\n",
		strings.Join(d.Tenants, ", "))
	fmt.Fprintf(&b, "  tier     where the trace names none: a class by job shape, mapped onto the policy's tiers by rank\n")
	fmt.Fprintf(&b, "           service     %s of 1-node jobs of ≤%d GPUs running ≥%s (hash of the job ID)  → %s\n",
		pct(serviceShare), serviceMaxGPUs, serviceMinRun, d.Tiers[classService])
	fmt.Fprintf(&b, "           build       other 1-node jobs of ≤%d GPUs running ≤%s                          → %s\n",
		buildMaxGPUs, buildMaxRun, d.Tiers[classBuild])
	fmt.Fprintf(&b, "           interactive %s of other 1-node jobs running ≤%s                             → %s\n",
		pct(interactiveShare), interactiveMaxRun, d.Tiers[classInteractive])
	fmt.Fprintf(&b, "           batch       everything else (multi-node gangs, long runs)                     → %s\n",
		d.Tiers[classBatch])
	fmt.Fprintf(&b, "  idleness where the trace names none: GPUs at %.0f%% while busy, %.0f%% once idle;\n", BusyUtil, IdleUtil)
	fmt.Fprintf(&b, "           %s of interactive jobs go idle after %s–%s of their run time (notebook left open),\n",
		pct(interactiveIdleShare), pct(interactiveBusyMin), pct(interactiveBusyMin+interactiveBusySpan))
	fmt.Fprintf(&b, "           %s of batch jobs after %s–%s (a stalled run); the rest stay busy\n",
		pct(batchIdleShare), pct(batchBusyMin), pct(batchBusyMin+batchBusySpan))
	fmt.Fprintf(&b, "  shape    one allocation per node the job spanned; wider than the largest node: re-split into allocations of its size; every multi-allocation job is a gang\n")
	fmt.Fprintf(&b, "  result   tiers %s; tenants %s; %d with an idle tail; %d re-split; %d dropped (larger than the cluster); %d cut by -limit\n",
		countList(d.ByTier), countList(d.ByTenant), d.Idle, d.Reshaped, d.Dropped, d.Truncated)
	if d.Fractional > 0 {
		fmt.Fprintf(&b, "  fraction %s asked for a fraction of a GPU; each was counted as 1 whole GPU\n", nJobs(d.Fractional))
	}
	b.WriteString(d.unknownTierRule())
	if d.Given > 0 {
		fmt.Fprintf(&b, "  given    %d jobs named their own tenant, tier or idleness; those values were kept\n", d.Given)
	}
	return b.String()
}

func countList(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
