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
type tenantTiers struct {
	ns    [nsSlots]nameSlot   // namespace → tenant
	tiers [tierSlots]nameSlot // tier name → column of Engine.tenantTier
}

// nsSlots and tierSlots are powers of two well above the tenants and
// tiers a policy names.
const (
	nsSlots   = 64
	tierSlots = 16
)

type nameSlot struct {
	name string
	idx  int32
	ok   bool
}

// slotOf is the slot of a name with tag in a table of 1<<bits slots.
func slotOf(tag uint64, bits uint) uint64 { return tag * 0x9e3779b97f4a7c15 >> (64 - bits) }

// of is namespace's tenant and tier's index in it: tenantOf, then
// tierFor. tenantOf adds a namespace no tenant names on its first
// look-up, as before.
func (tt *tenantTiers) of(m *model, namespace, tier string) (tenant, tierIdx int) {
	s := &tt.ns[slotOf(strTag(namespace), 6)]
	if !s.ok || s.name != namespace {
		s.fillTenant(m, namespace)
	}
	c := &tt.tiers[slotOf(strTag(tier), 4)]
	if !c.ok || c.name != tier {
		c.fillColumn(m.e, tier)
	}
	tenant = int(s.idx)
	return tenant, m.e.tenantTier[min(tenant, len(m.e.tenants))][c.idx]
}

// fillTenant and fillColumn resolve a name into its slot: kept out of
// of, so that a hit does not set up the stack frame of tenantOf's new
// tenant.
//
//go:noinline
func (s *nameSlot) fillTenant(m *model, namespace string) {
	*s = nameSlot{name: namespace, idx: int32(m.tenantOf(namespace)), ok: true}
}

//go:noinline
func (s *nameSlot) fillColumn(e *Engine, tier string) {
	col, ok := e.tierIdx[tier]
	if !ok {
		col = len(e.tiers)
	}
	*s = nameSlot{name: tier, idx: int32(col), ok: true}
}
