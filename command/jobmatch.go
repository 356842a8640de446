package command

import (
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/nomad/api"
	"github.com/ryanuber/columnize"
)

// jobRef names a job in a namespace.
type jobRef struct{ Namespace, ID string }

func (j jobRef) String() string { return j.Namespace + "/" + j.ID }

// matchJob picks the job a prefix names among candidates, as `nomad job
// status` does: the only job whose ID starts with the prefix, or the one
// whose ID is exactly it when there are several (within one namespace).
// Otherwise it returns the matches (none, or more than one) and false.
func matchJob(candidates []jobRef, prefix string) (jobRef, []jobRef, bool) {
	var matches, exact []jobRef
	seen := map[jobRef]bool{}
	for _, c := range candidates {
		if !strings.HasPrefix(c.ID, prefix) || seen[c] {
			continue
		}
		seen[c] = true
		matches = append(matches, c)
		if c.ID == prefix {
			exact = append(exact, c)
		}
	}
	sort.Slice(matches, func(i, k int) bool { return matches[i].String() < matches[k].String() })
	switch {
	case len(matches) == 1:
		return matches[0], matches, true
	case len(exact) == 1:
		return exact[0], matches, true
	}
	return jobRef{}, matches, false
}

// errAmbiguous is a prefix that names several jobs: the message lists
// them, as `nomad job status` does.
type errAmbiguous struct {
	prefix  string
	matches []jobRef
}

func (e errAmbiguous) Error() string {
	rows := []string{"ID|Namespace"}
	for _, m := range e.matches {
		rows = append(rows, m.ID+"|"+m.Namespace)
	}
	return fmt.Sprintf("Prefix %q matched multiple jobs\n\n%s", e.prefix, columnize.SimpleFormat(rows))
}

// resolveJob finds the job a prefix names in namespace ns ("*": every
// namespace the token may list) through Nomad's job list. A token that
// may not list jobs gets the prefix matched among known instead (the jobs
// the status view names), and failing that the prefix as the exact ID:
// a tenant with only acl/steward-user.policy.hcl can still name its job
// in full.
func resolveJob(client *api.Client, ns, prefix string, known []jobRef) (jobRef, error) {
	if prefix == "" {
		return jobRef{}, fmt.Errorf("no job named")
	}
	stubs, _, err := client.Jobs().List(&api.QueryOptions{Namespace: ns, Prefix: prefix})
	var candidates []jobRef
	switch {
	case err == nil:
		for _, s := range stubs {
			candidates = append(candidates, jobRef{s.Namespace, s.ID})
		}
	case isForbidden(err):
		for _, k := range known {
			if ns == "*" || k.Namespace == ns {
				candidates = append(candidates, k)
			}
		}
		if len(candidates) == 0 && ns != "*" {
			return jobRef{ns, prefix}, nil
		}
	default:
		return jobRef{}, fmt.Errorf("list jobs with prefix %q in namespace %s: %w", prefix, ns, err)
	}
	job, matches, ok := matchJob(candidates, prefix)
	switch {
	case ok:
		return job, nil
	case len(matches) == 0 && isForbidden(err) && ns != "*":
		return jobRef{ns, prefix}, nil
	case len(matches) == 0:
		return jobRef{}, fmt.Errorf("no job with prefix %q in namespace %s", prefix, ns)
	}
	return jobRef{}, errAmbiguous{prefix, matches}
}
