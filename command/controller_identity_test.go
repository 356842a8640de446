package command

import (
	"strings"
	"testing"
)

// TestControllerIdentityNamesNoAllocation: an -id that holds the
// controller's allocation ID (as the shipped job's did) is published with
// the allocation's name instead; tenants read it.
func TestControllerIdentityNamesNoAllocation(t *testing.T) {
	const alloc = "5f1c2d3e-4b5a-6978-8a9b-0c1d2e3f4a5b"
	cases := []struct {
		name, id, allocID, allocName, want string
		renamed                            bool
	}{
		{name: "the allocation ID", id: alloc, allocID: alloc, allocName: "steward-controller.controller[1]",
			want: "steward-controller.controller[1]", renamed: true},
		{name: "the ID inside a name", id: "ctl-" + alloc, allocID: alloc, want: "ctl-steward-controller", renamed: true},
		{name: "the allocation's name", id: "steward-controller.controller[0]", allocID: alloc, want: "steward-controller.controller[0]"},
		{name: "outside Nomad", id: "host:42", want: "host:42"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, renamed := publicIdentity(tc.id, tc.allocID, tc.allocName)
			if got != tc.want || renamed != tc.renamed || strings.Contains(got, alloc) {
				t.Errorf("publicIdentity(%q) = %q, %t; want %q, %t", tc.id, got, renamed, tc.want, tc.renamed)
			}
		})
	}
}
