package controller

import (
	"fmt"
	"sort"
	"strings"
)

// describe summarises an observation for the debug log: GPUs in use and
// queued per job, so a round's decisions can be traced to what it saw.
func (o *Observation) describe() string {
	use := map[string]int{}
	for _, a := range o.Allocs {
		use[a.Namespace+"/"+a.JobID] += len(a.GPUIDs)
	}
	var parts []string
	for k, n := range use {
		parts = append(parts, fmt.Sprintf("%s=%d", k, n))
	}
	for k, gs := range o.Queued {
		for g, q := range gs {
			parts = append(parts, fmt.Sprintf("%s/%s queued %d", k.String(), g, q.Count))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}
