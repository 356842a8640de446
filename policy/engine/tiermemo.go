package engine

// tenantTiers remembers, for one plan, the tenant a namespace resolves to
// and the column of the engine's tenant × tier table a tier name reads. A
// fleet's snapshot interleaves its tenants' allocations and queue
// (37,000 units and 10,000 demands in the benchmark's fleet plan, 8
// tenants and 4 tiers), so a memo of the one before (lastAlloc had one)
// missed on almost all of them, and each miss paid two string-keyed map
// look-ups (tenantOf, tierFor): about 12 M instructions of a 283 M fleet
// plan. A name's slot
// is found by its tag (strTag: no hashing of the text) and confirmed by
// comparing the name; a slot taken by another name is overwritten, so a
// collision costs a look-up, never a wrong answer.
//
// A pair of names is looked up first, in one slot: the tenant's slot and
// the tier's each left a look-up of their own to make and confirm, and the
// answer was then read from the tenant × tier table, about 115
// instructions a look-up (5.4 M of a 236 M fleet plan).
type tenantTiers struct {
	pairs [pairSlots]pairSlot // (namespace, tier name) → tenant, tier index
	ns    [nsSlots]nameSlot   // namespace → tenant
	tiers [tierSlots]nameSlot // tier name → column of Engine.tenantTier
}

// pairSlot holds a namespace and a tier name met together: ns.idx is the
// tenant, tier.idx the tier's index in it (the table's cell, not its
// column). Both are fixed for the plan: a namespace resolves to one
// tenant (tenantOf appends a tenant it adds, so indexes stay) and the
// table is the engine's.
type pairSlot struct{ ns, tier nameSlot }

// nsSlots and tierSlots are powers of two well above the tenants and
// tiers a policy names.
const (
	nsSlots   = 64
	tierSlots = 16
	// pairSlots is well above the pairs a plan meets (the fleet
	// benchmark's 8 tenants × 4 tiers), so that few share a slot.
	pairSlots = 256
)

type nameSlot struct {
	name string
	tag  uint64 // strTag(name)
	head uint64 // headOf(name)
	idx  int32
	ok   bool
}

// slotOf is the slot of a name with tag in a table of 1<<bits slots.
func slotOf(tag uint64, bits uint) uint64 { return tag * 0x9e3779b97f4a7c15 >> (64 - bits) }

// holds reports whether s holds name, whose tag is tag. The tag is the
// name's length and its last four bytes, the whole of a name of up to
// four; with the first four (headOf) it is all of a name of up to eight
// (a namespace like "team3"), with the first eight all of a name of up
// to twelve (a tier name like "interactive"): the text, which each
// allocation holds in its own copy, is compared only for longer names.
func (s *nameSlot) holds(name string, tag uint64) bool {
	return s.ok && s.tag == tag && s.head == headOf(name) && (len(name) <= 12 || s.name == name)
}

// headOf is what a slot keeps of a name besides its tag: its first four
// bytes for a name of four to eight, its first eight for a longer one, 0
// for a name under four. Each is one load, as strTag's last four.
func headOf(name string) uint64 {
	switch {
	case len(name) > 8:
		return head8(name)
	case len(name) >= 4:
		return head4(name)
	}
	return 0
}

func head4(name string) uint64 {
	b := name[:4]
	return uint64(uint32(b[3]) | uint32(b[2])<<8 | uint32(b[1])<<16 | uint32(b[0])<<24)
}

func head8(name string) uint64 {
	b := name[:8]
	return uint64(b[7]) | uint64(b[6])<<8 | uint64(b[5])<<16 | uint64(b[4])<<24 |
		uint64(b[3])<<32 | uint64(b[2])<<40 | uint64(b[1])<<48 | uint64(b[0])<<56
}

// of is namespace's tenant and tier's index in it: tenantOf, then
// tierFor. tenantOf adds a namespace no tenant names on its first
// look-up, as before.
//
// The pair's slot is confirmed here as holds would, with headOf written
// out: holds and headOf are over the inliner's budget, and a call for
// each name cost more than the comparisons. A tier name of nine to twelve
// bytes ("interactive", "inference") was compared by memequal
// (memequal and memeqbody 1.4 M instructions of a 231 M fleet plan).
func (tt *tenantTiers) of(m *model, namespace, tier string) (tenant, tierIdx int) {
	nt, tg := strTag(namespace), strTag(tier)
	p := &tt.pairs[slotOf(nt^tg<<1, 8)]
	if p.ns.ok && p.ns.tag == nt && p.tier.tag == tg {
		var nh, th uint64
		if len(namespace) > 8 {
			nh = head8(namespace)
		} else if len(namespace) >= 4 {
			nh = head4(namespace)
		}
		if len(tier) > 8 {
			th = head8(tier)
		} else if len(tier) >= 4 {
			th = head4(tier)
		}
		if p.ns.head == nh && p.tier.head == th &&
			(len(namespace) <= 12 || p.ns.name == namespace) && (len(tier) <= 12 || p.tier.name == tier) {
			return int(p.ns.idx), int(p.tier.idx)
		}
	}
	return tt.fillPair(m, p, namespace, tier, nt, tg)
}

// fillPair resolves a pair of names through their own slots (filling
// those that miss) and keeps the answer in the pair's slot p.
//
//go:noinline
func (tt *tenantTiers) fillPair(m *model, p *pairSlot, namespace, tier string, nt, tg uint64) (tenant, tierIdx int) {
	s := &tt.ns[slotOf(nt, 6)]
	if !s.holds(namespace, nt) {
		s.fillTenant(m, namespace, nt)
	}
	c := &tt.tiers[slotOf(tg, 4)]
	if !c.holds(tier, tg) {
		c.fillColumn(m.e, tier, tg)
	}
	tenant = int(s.idx)
	tierIdx = m.e.tenantTier[min(tenant, len(m.e.tenants))][c.idx]
	p.ns, p.tier = *s, *c
	p.tier.idx = int32(tierIdx)
	return tenant, tierIdx
}

// fillTenant and fillColumn resolve a name into its slot: kept out of
// of, so that a hit does not set up the stack frame of tenantOf's new
// tenant.
//
//go:noinline
func (s *nameSlot) fillTenant(m *model, namespace string, tag uint64) {
	*s = nameSlot{name: namespace, tag: tag, head: headOf(namespace), idx: int32(m.tenantOf(namespace)), ok: true}
}

//go:noinline
func (s *nameSlot) fillColumn(e *Engine, tier string, tag uint64) {
	col, ok := e.tierIdx[tier]
	if !ok {
		col = len(e.tiers)
	}
	*s = nameSlot{name: tier, tag: tag, head: headOf(tier), idx: int32(col), ok: true}
}
