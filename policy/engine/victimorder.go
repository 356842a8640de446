package engine

import (
	"cmp"
	"fmt"
	"time"
)

// The victim order: which preemptible unit the engine gives up first. It
// is declared once, in victimOrder below, as numbered criteria, each one
// comparison; the first that tells two candidates apart decides. The
// packed key the walks sort and search by (victimKey) is built from the
// same table, each criterion in its own bits, the first highest, so the
// key's order is the criteria's order (TestVictimKeyOrder checks it over
// random candidates).
//
// Where the key is read: sortCandidates sorts the candidates by it (then
// by unit index, packed into its low bits); segment and walkRange cut the
// sorted candidates by binary search on segKey into segments (criteria 1
// and 2) and, within one, the prefix below a beneficiary's priority
// (criterion 3); potential.go ranks nodes by the key of the worst victim
// each needs.
//
// What the order does not say: which candidates a beneficiary may take
// (victimRule, walkRange), and the walk over the order (findVictims: on
// one node, the shortest prefix that frees enough, pruned to the smallest
// set). Two things adjust keys after this order: a unit of a group's top
// run (chains.go) takes the worst key of those above it, as Nomad stops
// them top first; and units that cannot be victims at all (capped,
// protected, buried) get no key.

// Victim classes, best victim first (criterion 1).
const (
	classIdle = iota
	classBackfill
	classOther
	classYoung // younger than min_runtime: only when nothing else frees enough
)

// victimFacts is what the victim order knows of one candidate unit.
type victimFacts struct {
	class int // classIdle ... classYoung
	// within: its tenant holds no more than its reservation (classOther
	// and classYoung only; idle work and backfill are never "within").
	within bool
	prio   int    // effective priority, 0..127 (the policy allows 1..100)
	gang   bool   // a gang of several allocations
	risk   uint64 // seconds of progress lost per GPU freed, at most maxRisk
	ui     int32  // the unit's index in the plan: the snapshot's order
}

// victimCriterion is one step of the victim order.
type victimCriterion struct {
	num  int    // its place in the order, from 1
	name string // short, for explanations
	why  string // why it ranks where it does, in a sentence
	// compare is < 0 when a goes before b by this criterion alone.
	compare func(a, b *victimFacts) int
	// bits and rank: the criterion in the packed key, rank(f) < 1<<bits,
	// a lower rank going first. rank must order as compare does.
	bits uint
	rank func(f *victimFacts) uint64
	// show is the fact this criterion reads, with its number.
	show func(f *victimFacts) string
}

// The criteria, in the victim order: their order here is the order, of
// compareVictims and of the key's bits alike.
const (
	critClass = iota
	critReservation
	critPriority
	critGang
	critRisk
	critUnit
	numCriteria
)

// victimOrder is the victim order, best victim first. The bits add up to
// 64; the last criterion, the unit index, takes the keyFreeBits low bits,
// which victimKey leaves zero: sortKeys sorts keys that come in unit order
// stably, which orders ties by the index as if it were packed there.
var victimOrder = [numCriteria]victimCriterion{
	// 1. Idle work (idle rule in pressure mode) loses nothing by stopping;
	// backfill ran on loan in a pool kept for other tiers; then work past
	// min_runtime; work younger than min_runtime last, since min_runtime
	// promises work that long a run before it is preempted (the walk
	// reaches it only when nothing else frees enough).
	critClass: {
		num: 1, name: "class",
		why:     "idle work first, then backfill in a pool kept for other tiers, then work past min_runtime, then younger work",
		compare: func(a, b *victimFacts) int { return cmp.Compare(a.class, b.class) },
		bits:    2,
		rank:    rankClass,
		show:    func(f *victimFacts) string { return classNames[f.class] },
	},
	// 2. GPUs beyond a tenant's reservation are lent; those within it are
	// owed. Taking lent GPUs back first keeps the promise of every
	// reservation, whatever the tiers.
	critReservation: {
		num: 2, name: "reservation",
		why:     "tenants over their reservation before tenants within it",
		compare: func(a, b *victimFacts) int { return cmpBool(a.within, b.within) },
		bits:    1,
		rank:    rankReservation,
		show: func(f *victimFacts) string {
			if f.within {
				return "its tenant is within its reservation"
			}
			return "its tenant is over its reservation"
		},
	},
	// 3. The lowest priority first: the tiers' order is the policy's own
	// word on whose work matters more. Within a segment (criteria 1 and
	// 2) the walk takes only the prefix below the beneficiary's priority,
	// found by binary search on the key.
	critPriority: {
		num: 3, name: "priority",
		why:     "the lowest priority first",
		compare: func(a, b *victimFacts) int { return cmp.Compare(a.prio, b.prio) },
		bits:    7,
		rank:    rankPriority,
		show:    func(f *victimFacts) string { return fmt.Sprintf("priority %d", f.prio) },
	},
	// 4. A gang is preempted whole: one of several allocations stops work
	// on several nodes for GPUs on one. A single allocation breaks one
	// job on one node.
	critGang: {
		num: 4, name: "gang",
		why:     "single allocations before gangs of several",
		compare: func(a, b *victimFacts) int { return cmpBool(a.gang, b.gang) },
		bits:    1,
		rank:    rankGang,
		show: func(f *victimFacts) string {
			if f.gang {
				return "a gang of several allocations"
			}
			return "one allocation"
		},
	},
	// 5. The least progress lost per GPU freed (atRisk: since the last
	// checkpoint, or the start): the GPU-time thrown away is what a
	// preemption costs its victim.
	critRisk: {
		num: 5, name: "progress at risk",
		why:     "the least progress at risk per GPU first (since the last checkpoint, or the start)",
		compare: func(a, b *victimFacts) int { return cmp.Compare(a.risk, b.risk) },
		bits:    riskBits,
		rank:    rankRisk,
		show: func(f *victimFacts) string {
			return fmt.Sprintf("%s at risk per GPU", time.Duration(f.risk)*time.Second)
		},
	},
	// 6. Ties go by unit index, the snapshot's order: the same snapshot
	// gives the same plan.
	critUnit: {
		num: 6, name: "unit index",
		why:     "ties go by the snapshot's order",
		compare: func(a, b *victimFacts) int { return cmp.Compare(a.ui, b.ui) },
		bits:    keyFreeBits,
		rank:    rankUnit,
		show:    func(f *victimFacts) string { return fmt.Sprintf("unit %d", f.ui) },
	},
}

var classNames = [...]string{
	classIdle:     "idle",
	classBackfill: "backfill in a pool kept for other tiers",
	classOther:    "past min_runtime",
	classYoung:    "younger than min_runtime",
}

// riskBits holds maxRisk.
const riskBits = 34

// maxRisk caps the seconds a key holds (34 bits: over 500 years); more
// rank as equal, then by unit index.
const maxRisk = 1<<riskBits - 1

// keyFreeBits: the low bits of a key are zero (the risk is counted in
// seconds from bit 19), the unit index's place in the order.
const keyFreeBits = 19

// compareVictims compares two candidates by the victim order: < 0 when a
// is given up before b. It returns the first criterion that tells them
// apart, nil for the same unit. This is what an explanation of "why X
// rather than Y" names, with both sides' show.
func compareVictims(a, b *victimFacts) (int, *victimCriterion) {
	for i := range victimOrder {
		c := &victimOrder[i]
		if d := c.compare(a, b); d != 0 {
			return d, c
		}
	}
	return 0, nil
}

// The criteria's ranks, a lower rank going first (victimOrder's rank).
func rankClass(f *victimFacts) uint64       { return uint64(f.class) }
func rankReservation(f *victimFacts) uint64 { return bit(f.within) }
func rankPriority(f *victimFacts) uint64    { return uint64(f.prio) }
func rankGang(f *victimFacts) uint64        { return bit(f.gang) }
func rankRisk(f *victimFacts) uint64        { return f.risk }
func rankUnit(f *victimFacts) uint64        { return uint64(f.ui) }

// keyShift and keyMask place each criterion's rank in the packed key, as
// victimOrder lays it out: the first criterion highest.
var keyShift, keyMask = keyLayout()

func keyLayout() (shift, mask [numCriteria]uint64) {
	var at uint
	for c := numCriteria - 1; c >= 0; c-- {
		shift[c], mask[c] = uint64(at), 1<<victimOrder[c].bits-1
		at += victimOrder[c].bits
	}
	return shift, mask
}

// victimKey packs the victim order's criteria, but the unit index, into
// one integer, where victimOrder's bits place them; the low keyFreeBits
// bits are zero. It calls the ranks by name, not through the table: the
// key is built for every candidate of every plan, and a call through a
// func value costs more than the rest of the key (TestVictimKeyFromTable
// checks it against the table's ranks). Every rank fits its bits by
// construction (classes, booleans, the risk capped at maxRisk) but the
// priority, which the policy bounds (1 to 100) and this masks, as before,
// so that it never spills into the criterion above. Small enough to
// inline.
func victimKey(f *victimFacts) uint64 {
	return rankClass(f)<<keyShift[critClass] |
		rankReservation(f)<<keyShift[critReservation] |
		rankPriority(f)&keyMask[critPriority]<<keyShift[critPriority] |
		rankGang(f)<<keyShift[critGang] |
		rankRisk(f)<<keyShift[critRisk]
}

// victimFacts is what the victim order knows of unit u, a candidate.
func (m *model) victimFacts(ui int32) victimFacts {
	u := &m.units[ui]
	f := victimFacts{class: classOther, prio: u.prio, ui: ui}
	switch {
	case u.idle == idlePressure:
		f.class = classIdle
	case u.backfill:
		f.class = classBackfill
	case u.age < m.e.p.Preemption.MinRuntime:
		f.class = classYoung
	}
	// (A department's reserve protects its work from tenants outside it
	// only, not from its own: addVictim asks deptProtected.)
	if t := &m.tenants[u.tenant]; f.class >= classOther && t.use <= t.reserve {
		f.within = true
	}
	f.gang = m.isGangOfMany(u)
	f.risk = m.atRisk(u) // last: it reads the allocation, most likely not in cache
	return f
}

// segKey is the smallest key of a segment at a priority: criteria 1 to 3.
func segKey(seg int, prio int) uint64 {
	f := victimFacts{prio: prio}
	switch seg {
	case segIdle:
		f.class = classIdle
	case segBackfill:
		f.class = classBackfill
	case segOver, segNotOver:
		f.class = classOther
	case segYoungOver, segYoungNotOver:
		f.class = classYoung
	default:
		return ^uint64(0)
	}
	f.within = seg == segNotOver || seg == segYoungNotOver
	return victimKey(&f)
}

// atRisk is the progress a unit loses if it is stopped now per GPU it
// frees, in seconds, up to maxRisk: the time since its last checkpoint, or
// since it started when it reported none since (a checkpoint older than
// the start was made by an earlier run, which this one resumed from or
// ignored). For a gang it is the mean over its members, weighted by their
// GPUs. Without checkpoints it is the unit's age, so the most recently
// started goes first.
//
// Per GPU, not GPUs × time: the walk frees GPUs on a node, so ranking by
// the cost of each GPU freed loses the least GPU-time for the GPUs needed
// (an 8-GPU job 10 minutes past its checkpoint loses 80 GPU-minutes;
// eight 1-GPU jobs 20 minutes past theirs, taken for being smaller one by
// one, lose 160 and break eight jobs instead of one). Among victims of
// equal size the order is the same.
func (c *cluster) atRisk(u *unit) uint64 {
	if u.gang < 0 {
		if u.checkpointed {
			return sinceCheckpoint(&c.s.Allocs[u.first], c.now)
		}
		return uint64(max(0, min(u.age/time.Second, maxRisk))) // the usual case: the age at hand
	}
	var sum, gpus uint64
	c.allocsOf(u, func(ai int32) {
		a := &c.s.Allocs[ai]
		g := uint64(len(a.GPUIDs))
		sum += sinceCheckpoint(a, c.now) * g // < 2^34 × GPUs: no overflow
		gpus += g
	})
	if gpus == 0 {
		return 0
	}
	return sum / gpus
}

// sinceCheckpoint is the seconds of an allocation's work that a stop now
// loses, up to maxRisk.
func sinceCheckpoint(a *Alloc, now time.Time) uint64 {
	since := a.StartedAt
	if a.CheckpointAt.After(since) {
		since = a.CheckpointAt
	}
	secs := now.Sub(since) / time.Second
	if secs <= 0 {
		return 0 // started or checkpointed in the future: clocks disagree
	}
	return min(uint64(secs), maxRisk)
}

// cmpBool orders false before true.
func cmpBool(a, b bool) int { return cmp.Compare(bit(a), bit(b)) }

func bit(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}
