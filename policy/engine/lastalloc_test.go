package engine

import (
	"fmt"
	"strings"
	"testing"
)

// TestLastAllocMatchesLookups checks addUnit's memo of the allocation
// before: whatever the order of allocations (alike in a row, alternating,
// an unknown node or namespace in between), it answers as the look-ups it
// spares do.
func TestLastAllocMatchesLookups(t *testing.T) {
	type alloc struct{ node, ns, tier string }
	cases := []struct {
		name   string
		allocs []alloc
	}{
		{"alike in a row", []alloc{{"n1", "team0", "batch"}, {"n1", "team0", "batch"}, {"n1", "team0", "batch"}}},
		{"alternating", []alloc{{"n1", "team0", "batch"}, {"n2", "team1", "interactive"}, {"n1", "team0", "batch"}, {"n2", "team0", "interactive"}}},
		{"unknown node between", []alloc{{"n1", "team0", "batch"}, {"gone", "team0", "batch"}, {"n1", "team0", "batch"}, {"gone", "team0", "batch"}}},
		{"namespace no tenant names", []alloc{{"n1", "other", "batch"}, {"n1", "other", "batch"}, {"n2", "team1", ""}, {"n2", "other", "batch"}}},
		{"same tier name, other tenant", []alloc{{"n1", "team0", "batch"}, {"n1", "team1", "batch"}, {"n1", "team0", "batch"}}},
		// Names of one length and last four bytes share a tag, so a slot:
		// the memo must tell them apart by their first bytes (four up to
		// eight, eight up to twelve) or their whole text (longer).
		{"same tag, other first bytes", []alloc{{"n1", "team0", "build"}, {"n1", "xeam0", "build"}, {"n1", "team1", "build"}, {"n1", "team1", "xuild"}, {"n1", "team0", "build"}}},
		{"same tag, eight bytes", []alloc{{"n1", "team0", "training"}, {"n1", "team0", "trbining"}, {"n1", "team0", "training"}}},
		{"same tag, other middle", []alloc{{"n1", "team0", "interactive"}, {"n1", "team0", "interaXtive"}, {"n1", "team0", "interactive"}}},
		// Up to twelve bytes the first eight and the tag are the whole
		// name; past twelve the text is compared. (Namespaces no tenant
		// names: each becomes a tenant of its own, where tier names the
		// policy does not know all read one column.)
		{"same tag and first four, twelve bytes", []alloc{{"n1", "interactive1", "build"}, {"n1", "inteXactive1", "build"}, {"n1", "interactive1", "build"}}},
		{"same tag and first eight, over twelve", []alloc{{"n1", "interactive01", "build"}, {"n1", "interactXve01", "build"}, {"n1", "interactive01", "build"}}},
	}
	// More namespaces and tier names than tenantTiers has slots, some
	// met again after others took their slots, some no tenant names.
	var many []alloc
	for round := range 3 {
		for i := range 2*nsSlots + 3 {
			many = append(many, alloc{"n1", fmt.Sprintf("team%d", (i*7+round)%(2*nsSlots+3)), genTiers[i%len(genTiers)] + strings.Repeat("x", i%(2*tierSlots)%3)})
		}
	}
	cases = append(cases, struct {
		name   string
		allocs []alloc
	}{"more names than slots", many})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &Snapshot{Nodes: []Node{{ID: "n1", GPUs: 8}, {ID: "n2", GPUs: 8}}}
			st := newState(New(genPolicy(2, 4, 8)), s, t0)
			var last lastAlloc
			for i, a := range c.allocs {
				n, ok := last.nodeOf(&st.model, a.node)
				wantN, wantOK := st.nodeIDs[a.node]
				if n != wantN && ok || ok != wantOK {
					t.Errorf("alloc %d: node %q is %d, %v; the map says %d, %v", i, a.node, n, ok, wantN, wantOK)
				}
				job := Job{Ref: JobRef{Namespace: a.ns, ID: "j"}, Tier: a.tier}
				tenant, tier := last.tenantTier(&st.model, &job)
				wantTenant := st.tenantOf(a.ns)
				if wantTier := st.e.tierFor(wantTenant, a.tier); tenant != wantTenant || tier != wantTier {
					t.Errorf("alloc %d: %s/%s is tenant %d tier %d; the look-ups say %d, %d", i, a.ns, a.tier, tenant, tier, wantTenant, wantTier)
				}
			}
		})
	}
}
