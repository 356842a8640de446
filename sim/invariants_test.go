package sim

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// TestInvariantsOverTime replays random workloads through the simulator
// (Steward under example.hcl, on a cluster small enough to be under
// pressure) and checks, at every action the engine takes, what must hold
// over time and not only per plan:
//   - no job is stopped more than max_per_job_per_hour times in any
//     sliding hour, preemptions and idle releases alike;
//   - non-preemptible work is never a victim while its tenant's
//     non-preemptible work fits in its reserve;
//   - hardly a tug of war: few jobs are preempted for a job that was
//     preempted for them in the last hour. Some are legitimate (a tenant's
//     standing changed since: Nomad placed its other work, a promotion),
//     so their share is bounded, not zero: maxTugShare (1.2 %; 0.8 %, 22
//     of 2,605, since priority no longer takes a tenant below its reserve
//     unless preempts_reserved allows, issue 31; 1.4 %, 38 of
//     2,802, since GPUs set aside for a beneficiary count against its
//     tenant's limit only as far as it takes them, issue 31: platform,
//     no longer held at its limit of 8 by 8-GPU victims freed for its
//     1-GPU notebooks, runs more interactive work, whose priority takes
//     other tenants' interactive work from just above their reserve to
//     below it, and their reclaims take it back (platform↔product and
//     platform↔research: 31 of the 38, 16 of 19 before); 0.7 %, 19 of
//     2,740, before; 1.1 %, 31 of
//     2,785, since serving beyond its reserve runs rather than wait, issue
//     31: the workload's pressure grew by 40 % more preemptions, and these
//     tugs with it, none of them serving beyond its reserve and its
//     reclaim, which the engine keeps apart; 0.8 %, 15 of 1,940, before;
//     1.1 %, 44 of 4,108, before a tier's preempts_reserved stopped its
//     victims' reclaims of it).
//
// Preemptions whose beneficiary did not run within the drain (the signal
// delay and the grace) + one plan (wasted_preemptions) are logged per seed
// and, over all seeds, must stay under maxWastedShare: a few remain (see
// docs/evaluation.md for their causes), 3-10 % per seed before GPUs were
// set aside until the beneficiary is placed. The share over these 8 seeds
// moves with any change of timing, however small: 1.6 % with drains that
// ended at the grace, 2.2 % once they end a signal delay later, as the
// controller's (2.1 % with a 0.5 s delay, 2.2 % with 2 s, under 2 % with
// 3 s); over 32 seeds 1.49 % and 1.87 %, a difference within the seeds'
// spread. The bound is 2.5 %.
func TestInvariantsOverTime(t *testing.T) {
	pol := examplePolicy(t)
	ScaleTenants(pol, 0.04) // example.hcl was scaled for 100 nodes; this is 4 nodes
	tiers := []string{"inference", "build", "interactive", "training", "training"}
	tenants := []string{"product", "research", "platform"}
	cap := pol.Preemption.MaxPerJobPerHour
	const maxWastedShare = 0.025
	const maxTugShare = 0.012
	preemptions, wasted, tugs := 0, 0, 0
	for seed := range uint64(8) {
		rng := rand.New(rand.NewPCG(seed, 13))
		var jobs []Job
		at := time.Duration(0)
		for i := range 400 {
			at += time.Duration(rng.IntN(600)) * time.Second
			j := randomJob(rng, i, at, tenants, tiers)
			if j.Tier == "interactive" && rng.IntN(2) == 0 {
				j.IdleAfter = j.RunTime / 3
			}
			jobs = append(jobs, j)
		}
		s, err := newSimulator(jobs, Config{Policy: pol, Nodes: 4, GPUsPerNode: 8, CheckpointEvery: DefaultCheckpointEvery,
			CheckpointCost: DefaultCheckpointCost, PlanInterval: DefaultPlanInterval}, Steward)
		if err != nil {
			t.Fatal(err)
		}
		// tugOfWar: when each job was last preempted for which other.
		lastFor := map[[2]engine.JobRef]time.Duration{}
		s.watch = func(a engine.Action) {
			if a.Kind != engine.Preempt && a.Kind != engine.IdleStop {
				return
			}
			if a.Kind == engine.Preempt && a.For != nil {
				if at, ok := lastFor[[2]engine.JobRef{*a.For, a.Job}]; ok && s.now-at < time.Hour {
					tugs++
					t.Logf("seed %d at %s: %s preempted for %s, which was preempted for it %s ago: %s",
						seed, s.now, a.Job, *a.For, s.now-at, a)
				}
				lastFor[[2]engine.JobRef{a.Job, *a.For}] = s.now
			}
			j := &s.jobs[s.byRef[a.Job]]
			hourAgo := epoch.Add(s.now - time.Hour)
			n := 1 // this one
			for _, at := range j.preemptTimes {
				if !at.Before(hourAgo) {
					n++
				}
			}
			if cap > 0 && n > cap {
				t.Errorf("seed %d at %s: %s stopped %d times in an hour (cap %d): %s", seed, s.now, a.Job, n, cap, a)
			}
			if tier := pol.Tiers[j.spec.Tier]; tier != nil && !tier.Preemptible {
				if fixed := s.nonPreemptibleGPUs(j.spec.Tenant); fixed <= pol.Tenants[j.spec.Tenant].Reserve {
					t.Errorf("seed %d at %s: non-preemptible %s is a victim while its tenant's non-preemptible work "+
						"(%d GPUs) fits in its reserve (%d): %s", seed, s.now, a.Job, fixed, pol.Tenants[j.spec.Tenant].Reserve, a)
				}
			}
		}
		if err := s.run(); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		r := s.m.result(s)
		t.Logf("seed %d: %d preemptions, %d wasted (%d with the victim back), %d stops over the cap",
			seed, r.Preemptions, r.WastedPreemptions, r.WastedVictimBack, r.CapBreaches)
		if r.CapBreaches != 0 {
			t.Errorf("seed %d: cap_breaches %d, want 0", seed, r.CapBreaches)
		}
		preemptions += r.Preemptions
		wasted += r.WastedPreemptions
	}
	if share := float64(tugs) / float64(max(1, preemptions)); share > maxTugShare {
		t.Errorf("%d of %d preemptions are a tug of war (%.1f %%), want at most %.1f %%", tugs, preemptions, 100*share, 100*maxTugShare)
	}
	if share := float64(wasted) / float64(max(1, preemptions)); share > maxWastedShare {
		t.Errorf("%d of %d preemptions wasted (%.1f %%), want at most %.0f %%", wasted, preemptions, 100*share, 100*maxWastedShare)
	}
}

// randomJob is job i of a random workload for example.hcl's tenants and
// tiers, submitted at at: 1 to 8 GPUs, a gang of two one time in three, 5
// minutes to 4 hours of work, never idle. Only product runs inference and
// build; the other tenants' such jobs run as interactive.
func randomJob(rng *rand.Rand, i int, at time.Duration, tenants, tiers []string) Job {
	tenant := tenants[rng.IntN(len(tenants))]
	tier := tiers[rng.IntN(len(tiers))]
	if tenant != "product" && (tier == "inference" || tier == "build") {
		tier = "interactive" // their only tiers: interactive and training
	}
	return Job{ID: "j" + itoa(i), Line: i + 2, User: tenant, Submit: at, GPUs: 1 << rng.IntN(4),
		Allocs: 1 + rng.IntN(3)/2, RunTime: time.Duration(300+rng.IntN(4*3600)) * time.Second,
		Tenant: tenant, Tier: tier, IdleAfter: NeverIdle}
}

// nonPreemptibleGPUs is what a tenant's running non-preemptible work holds.
func (s *simulator) nonPreemptibleGPUs(tenant string) int {
	n := 0
	for _, ji := range s.active {
		j := &s.jobs[ji]
		if t := s.pol.Tiers[j.spec.Tier]; j.spec.Tenant == tenant && t != nil && !t.Preemptible && j.state == running {
			n += j.gpus()
		}
	}
	return n
}
