package engine

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
)

// Steward preempts part of a group (some of its allocations, not all) by
// lowering the group's count: Nomad then stops the allocations whose names
// carry the highest indexes ("job.group[3]" before "job.group[2]"), and
// places no replacement. Any other way (stopping the chosen allocations
// one by one, then lowering the count) leaves the choice to the order in
// which Nomad runs the evaluations: the stops' own evaluations place
// replacements under the victims' names, and the count's evaluation then
// stops the highest names, which may be allocations that never had their
// checkpoint signal. So the victims of a group must be its allocations
// with the highest name indexes: the only ones Nomad stops for a lower
// count, whatever the order of its evaluations.
//
// A chain is a group's live allocations (each a unit of its own, not a
// gang) in that order, highest index first. Its first next units are taken
// (taken units always form a prefix of the chain); a victim search that
// reaches any unit of the chain on node n takes instead the chain's next
// unit not yet listed, if that one runs on n (chainPick): the units of a
// group on a node free the same GPUs there, so the search frees what it
// planned, and the chain stays a prefix. take and untake keep to the
// prefix the same way for the passes that take units by other orders
// (limits, idle releases).
//
// Only a chain's top run, its units from the first down to the first on
// another node, may be victims in a plan: the rest are buried, left out
// of the candidates (and so of the node potentials and bounds), as if not
// preemptible. Within the run chainPick always has a unit to give on the
// run's node, so the potentials the node searches go by stay exact: a
// search never tries a node that its chains then cannot free. (Buried
// units may be victims in a later plan, once the run above them has
// gone.)
type chain struct {
	units []int32 // the group's units, highest name index first
	next  int32   // units[:next] are taken
	// gen and listed: the units a victim walk (walkScratch.cur) has
	// listed from the chain, units[next:next+listed], all on one node.
	gen    uint32
	listed int32
}

// noChain is unit.chain for a unit in no chain: a gang, an allocation
// alone in its group, or one whose name says no index.
const noChain = -1

// buildChains puts the units of each group with several allocations (that
// say their name index) into a chain. It costs nothing for snapshots that
// name no allocation; for the others, a map keyed by an integer tag of the
// job and group (strings are compared only where two tags meet), and one
// array for all chains.
func (m *model) buildChains() {
	var cm chainMembers
	for ui := range m.units {
		u := &m.units[ui]
		u.chain = noChain
		if u.gang >= 0 || !u.named {
			continue
		}
		a := &m.s.Allocs[u.first]
		i := NameIndex(a.Name)
		if i < 0 {
			continue
		}
		if cm.byTag == nil {
			cm.byTag = map[uint64]int32{}
			cm.ms = make([]chainMember, 0, len(m.units)-ui)
		}
		tag := u.jobTag ^ strTag(a.Group)*0x9e3779b97f4a7c15
		cm.add(int32(ui), int32(min(i, 1<<31-1)), tag, demandRef{a.Job.Ref, a.Group})
	}
	if len(cm.ms) == 0 {
		return
	}
	m.linkChains(&cm)
}

// chainMember is a unit that says its name index, and its group.
type chainMember struct {
	ui, index, group int32
}

// chainMembers are the units of allocations that say their name index,
// grouped by job and group.
type chainMembers struct {
	ms     []chainMember
	byTag  map[uint64]int32 // tag of job and group -> group
	other  map[demandRef]int32
	groups []demandRef
	size   []int32
}

// add counts unit ui, of name index i, to the group key (whose tag is
// tag): a new group when it is the first of its group.
func (cm *chainMembers) add(ui, i int32, tag uint64, key demandRef) {
	g, ok := cm.byTag[tag]
	if ok && cm.groups[g] != key {
		g, ok = cm.other[key] // two groups, one tag
	}
	if !ok {
		g = int32(len(cm.groups))
		cm.groups, cm.size = append(cm.groups, key), append(cm.size, 0)
		if _, taken := cm.byTag[tag]; taken {
			if cm.other == nil {
				cm.other = map[demandRef]int32{}
			}
			cm.other[key] = g
		} else {
			cm.byTag[tag] = g
		}
	}
	cm.size[g]++
	cm.ms = append(cm.ms, chainMember{ui, i, g})
}

// linkChains makes a chain of each group of two or more members, its
// units in one segment of one array, the highest name index first.
func (m *model) linkChains(cm *chainMembers) {
	size := cm.size
	first := make([]int32, len(size))
	n := int32(0)
	for g, c := range size {
		first[g] = n
		if c >= 2 {
			n += c
		}
	}
	all := make([]int32, n)
	fill := slices.Clone(first)
	index := make([]int32, len(m.units)) // only members' are read
	for _, mk := range cm.ms {
		if size[mk.group] >= 2 {
			all[fill[mk.group]] = mk.ui
			fill[mk.group]++
			index[mk.ui] = mk.index
		}
	}
	for g, c := range size {
		if c < 2 {
			continue
		}
		units := all[first[g] : first[g]+c : first[g]+c]
		slices.SortFunc(units, func(a, b int32) int {
			if c := cmp.Compare(index[b], index[a]); c != 0 {
				return c // the highest index first
			}
			// The same index twice (Nomad may give a name twice): Nomad
			// stops either; the order is at least the same every plan.
			return strings.Compare(m.s.Allocs[m.units[a].first].ID, m.s.Allocs[m.units[b].first].ID)
		})
		top := m.units[units[0]].node
		buried := false
		for _, ui := range units {
			u := &m.units[ui]
			u.chain = int32(len(m.chains))
			buried = buried || u.node != top
			u.buried = buried
		}
		m.chains = append(m.chains, chain{units: units})
	}
}

// chainKeys orders each chain's top run for the victim walks: a unit of
// the run can go only after those above it, so its key becomes the worst
// (highest) of its own and theirs, and the walks reach the run's units in
// its order, each with its own class (idle, young) where the run's order
// allows. (Units with equal keys may still be reached out of order:
// chainPick gives the run's next in their place, of the same class.) A
// unit of the run that is no candidate (capped, or not preemptible: an
// exposed allocation above one that is not) buries the rest.
func (c *cluster) chainKeys(keys []candKey) []candKey {
	cand := make([]bool, len(c.units))
	for _, k := range keys {
		cand[k.ui] = true
	}
	for ci := range c.chains {
		var worst uint64
		buried := false
		for _, ui := range c.chains[ci].units {
			u := &c.units[ui]
			buried = buried || u.buried || !cand[ui]
			if buried {
				u.buried = true
				continue
			}
			worst = max(worst, u.key)
			u.key = worst
		}
	}
	out := keys[:0]
	for _, k := range keys {
		if u := &c.units[k.ui]; !u.buried {
			out = append(out, candKey{key: u.key, ui: k.ui, node: k.node})
		}
	}
	return out
}

// NameIndex is the index in an allocation's name ("job.group[3]": 3); -1
// when it has none.
func NameIndex(name string) int {
	open, end := strings.LastIndexByte(name, '['), len(name)-1
	if open < 0 || end <= open || name[end] != ']' {
		return -1
	}
	i, err := strconv.Atoi(name[open+1 : end])
	if err != nil || i < 0 {
		return -1
	}
	return i
}

// chainPick is the unit a victim walk lists when it reaches unit ui on
// node n: ui itself outside a chain; in a chain, the chain's next unit not
// yet listed by this walk, if that runs on n (and, when the walk listed
// some already, they are on n too); -1 when the chain has none to give
// on n.
func (st *state) chainPick(ui int32, n int32) int32 {
	c := st.units[ui].chain
	if c < 0 {
		return ui
	}
	ch := &st.chains[c]
	listed := int32(0)
	if ch.gen == st.walk.cur {
		listed = ch.listed
	}
	i := ch.next + listed
	if int(i) >= len(ch.units) {
		return -1
	}
	if listed > 0 && st.units[ch.units[ch.next]].node != n {
		return -1 // the walk lists this chain on another node
	}
	pick := ch.units[i]
	if st.units[pick].node != n {
		return -1
	}
	return pick
}

// chainPickAny is chainPick for a search that frees GPUs on any node
// (swapElsewhere): the chain's next unit not in vs yet, wherever it runs.
func (c *cluster) chainPickAny(ui int32, vs []victim) int32 {
	ci := c.units[ui].chain
	if ci < 0 {
		return ui
	}
	ch := &c.chains[ci]
	i := ch.next
	for _, v := range vs {
		if c.units[v.ui].chain == ci {
			i++
		}
	}
	if int(i) >= len(ch.units) {
		return -1
	}
	return ch.units[i]
}

// chainListed records that the walk listed unit ui (chainPick's answer).
func (st *state) chainListed(ui int32) {
	c := st.units[ui].chain
	if c < 0 {
		return
	}
	ch := &st.chains[c]
	if ch.gen != st.walk.cur {
		ch.gen, ch.listed = st.walk.cur, 0
	}
	ch.listed++
}

// chainPeek is the unit take would take for ui (untaken), taking nothing.
func (c *cluster) chainPeek(ui int32) int32 {
	ci := c.units[ui].chain
	if ci < 0 {
		return ui
	}
	return c.chains[ci].units[c.chains[ci].next]
}

// chainLast is the unit untake would put back for ui (taken), changing
// nothing.
func (c *cluster) chainLast(ui int32) int32 {
	ci := c.units[ui].chain
	if ci < 0 {
		return ui
	}
	return c.chains[ci].units[c.chains[ci].next-1]
}

// chainTake is the unit take takes for ui: the chain's next.
func (c *cluster) chainTake(ui int32) int32 {
	ci := c.units[ui].chain
	if ci < 0 {
		return ui
	}
	ch := &c.chains[ci]
	ui = ch.units[ch.next]
	ch.next++
	return ui
}

// chainUntake is the unit untake puts back for ui: the chain's last taken.
func (c *cluster) chainUntake(ui int32) int32 {
	ci := c.units[ui].chain
	if ci < 0 {
		return ui
	}
	ch := &c.chains[ci]
	ch.next--
	return ch.units[ch.next]
}

// chainNext reports whether unit ui may be taken as itself: it is in no
// chain, or it is its chain's next.
func (c *cluster) chainNext(ui int32) bool {
	ci := c.units[ui].chain
	if ci < 0 {
		return true
	}
	ch := &c.chains[ci]
	return int(ch.next) < len(ch.units) && ch.units[ch.next] == ui
}
