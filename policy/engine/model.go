package engine

// model is the cluster as the plan goes: the cluster (nodes, units,
// chains; cluster.go), the tenants' ledger (ledger.go), and the GPUs set
// aside for waiting work (earmarks.go). It owns taking and placing work
// (take, untake, place, unplace): each keeps the cluster, the ledger and
// the node index in step, so that no caller can forget one of them.
// Everything else reads it, or changes it only through these four and
// the earmarks' own moves.
type model struct {
	cluster
	// ix is the node index kept in step with the model: every change to
	// a node's free GPUs or taken units goes to ix.change, from take,
	// untake, place, unplace and the few moves of marked GPUs, and from
	// nowhere else.
	ix *nodeIndex

	ledger

	// marks are GPUs set aside per beneficiary (Snapshot.Waiting index):
	// not free to anyone else until it is served (earmarks.go).
	marks map[int32][]nodeGPUs
	// charged is, per beneficiary, the units of its marks counted in its
	// tenant's marked: no more GPUs than it waits for. A victim larger
	// than its beneficiary drains all its GPUs for it, but the tenant
	// will hold only what the beneficiary takes. Counting the rest
	// against its limit held the tenant's other beneficiaries at the
	// limit though their own victims had stopped: those preemptions
	// were wasted (issue 31, docs/evaluation.md).
	charged map[int32]int
	// aside: [tenant] the demand a node was set aside for in this plan,
	// if one was (setaside.go).
	aside asides
	// draining: per beneficiary, the GPUs per node that allocations
	// drain for it (Alloc.For): a placement there waits for them
	// (AfterVictims); the rest of its marks there are free now.
	draining map[int32][]nodeGPUs
	// surplus: per beneficiary, the GPUs among its marks that takeSurplus
	// moved to it from others', and whose they were (earmarks.go).
	surplus    surpluses
	waitingIdx map[demandRef]int32
	// placedJobs: jobs with allocations holding GPUs (inFlight), built
	// on first use.
	placedJobs map[JobRef]bool
	waitingOf  []resolved // [Snapshot.Waiting index] tenant and tier (resolveWaiting)
	// names: the tenant and tier of each namespace and tier name met
	// in this plan (tiermemo.go).
	names tenantTiers
	// blocked is the highest-tier demand that waited in this plan for
	// want of GPUs (protect.go).
	blocked blockedDemand
	// fixedOn is, per node, the GPUs of work no higher tier may take,
	// protectedOn of protected work, counted on first need (countFixed).
	fixedOn, protectedOn []int32
	// moved is placeIn's nodes, newest last, for unplaceLast to undo.
	moved []int32
}

// take removes a unit from the model cluster: its GPUs become free. A unit
// of a chain is taken in the order Nomad stops them: the chain's next
// (chains.go). It returns the unit taken.
func (m *model) take(ui int32) int32 {
	ui = m.chainTake(ui)
	u := &m.units[ui]
	u.taken = true
	m.nodesOf(u, func(n int32, g int) {
		m.ix.change(n, ui, int32(g))
		if m.tenants[u.tenant].quotas != nil {
			m.addUse(u.tenant, n, -g)
		}
	})
	m.heldChange(u, -1)
	m.tenants[u.tenant].use -= int(u.units)
	if !m.e.tiers[u.tier].preemptible {
		m.tenants[u.tenant].fixed -= int(u.units)
	}
	return ui
}

// untake puts a unit back (a gang placement that failed half way); in a
// chain, the chain's last taken. It returns the unit put back.
func (m *model) untake(ui int32) int32 {
	ui = m.chainUntake(ui)
	u := &m.units[ui]
	u.taken = false
	m.ix.rewalk(u.key)
	m.nodesOf(u, func(n int32, g int) {
		m.ix.change(n, ui, -int32(g))
		if m.tenants[u.tenant].quotas != nil {
			m.addUse(u.tenant, n, g)
		}
	})
	m.heldChange(u, 1)
	m.tenants[u.tenant].use += int(u.units)
	if !m.e.tiers[u.tier].preemptible {
		m.tenants[u.tenant].fixed += int(u.units)
	}
	return ui
}

// place puts one allocation of b on node n in the model cluster.
func (m *model) place(b *bene, n int32) {
	m.ix.change(n, noUnit, -int32(b.g))
	gu := b.g * m.pl.unitsOn(n)
	m.tenants[b.tenant].use += gu
	if m.tenants[b.tenant].quotas != nil {
		m.addUse(b.tenant, n, b.g)
	}
	if !m.e.tiers[b.tier].preemptible {
		m.tenants[b.tenant].fixed += gu
	}
	if b.protected {
		m.placeProtected(n, b.g)
	}
}

// unplace takes back place(b, n) (a gang placement that failed half way).
func (m *model) unplace(b *bene, n int32) {
	m.ix.change(n, noUnit, int32(b.g))
	gu := b.g * m.pl.unitsOn(n)
	m.tenants[b.tenant].use -= gu
	if m.tenants[b.tenant].quotas != nil {
		m.addUse(b.tenant, n, -b.g)
	}
	if !m.e.tiers[b.tier].preemptible {
		m.tenants[b.tenant].fixed -= gu
	}
	if b.protected {
		m.placeProtected(n, -b.g)
	}
}
