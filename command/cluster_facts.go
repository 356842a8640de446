package command

import (
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/policy"
)

// What `policy validate -cluster` reads of a cluster, read-only, with the
// caller's own token: a tenant's token may not list node pools or nodes,
// and sees only its own namespaces' jobs and allocations. What it may not
// read is left unchecked and said so, never guessed: a namespace the
// token cannot see is not "missing".

// unreadFact is a part of the cluster that could not be read.
type unreadFact struct {
	What string `json:"what"`
	Why  string `json:"why"`
}

// readClusterFacts reads what policy.Cluster holds. A 403 leaves that part
// unread (nil) with the reason; any other error fails the whole read.
func readClusterFacts(client *api.Client, tierKey string) (policy.Cluster, []unreadFact, error) {
	var (
		facts  policy.Cluster
		unread []unreadFact
	)
	all := &api.QueryOptions{Namespace: "*"}
	// A token that may read only some namespaces (node pools) lists only
	// those: the others would look missing. Only a management token, or
	// any on a cluster without ACLs, sees them all.
	whole, err := seesEverything(client)
	if err != nil {
		return policy.Cluster{}, nil, err
	}
	partial := func(what string) {
		unread = append(unread, unreadFact{What: what, Why: "the token lists only the " + what + " it may use (checked with a management token)"})
	}
	read := func(what string, do func() error) error {
		err := do()
		var se api.UnexpectedResponseError
		if errors.As(err, &se) && se.StatusCode() == http.StatusForbidden {
			unread = append(unread, unreadFact{What: what, Why: "the token may not read them (" + strings.TrimSpace(se.Error()) + ")"})
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s from Nomad: %w", what, err)
		}
		return nil
	}
	steps := []struct {
		what string
		do   func() error
	}{
		{"namespaces", func() error {
			if !whole {
				partial("namespaces")
				return nil
			}
			nss, _, err := client.Namespaces().List(nil)
			if err != nil {
				return err
			}
			facts.Namespaces = []string{}
			for _, ns := range nss {
				facts.Namespaces = append(facts.Namespaces, ns.Name)
			}
			return nil
		}},
		{"node pools", func() error {
			if !whole {
				partial("node pools")
				return nil
			}
			pools, _, err := client.NodePools().List(nil)
			if err != nil {
				return err
			}
			facts.NodePools = []string{}
			for _, p := range pools {
				facts.NodePools = append(facts.NodePools, p.Name)
			}
			return nil
		}},
		{"GPU models", func() error {
			nodes, _, err := client.Nodes().List(&api.QueryOptions{Params: map[string]string{"resources": "true"}})
			if err != nil {
				return err
			}
			models := map[string]bool{}
			for _, n := range nodes {
				if n.NodeResources == nil {
					continue
				}
				for _, d := range n.NodeResources.Devices {
					if d != nil && d.Type == "gpu" {
						models[d.Name] = true
					}
				}
			}
			facts.GPUModels = setList(models)
			return nil
		}},
		{"allocations", func() error {
			allocs, _, err := client.Allocations().List(&api.QueryOptions{Namespace: "*", Params: map[string]string{"resources": "true"}})
			if err != nil {
				return err
			}
			nss := map[string]bool{}
			for _, a := range allocs {
				if a.DesiredStatus != "run" || a.ClientStatus != "running" && a.ClientStatus != "pending" || a.AllocatedResources == nil {
					continue
				}
				for _, tr := range a.AllocatedResources.Tasks {
					for _, d := range tr.Devices {
						if d != nil && d.Type == "gpu" && len(d.DeviceIDs) > 0 {
							nss[a.Namespace] = true
						}
					}
				}
			}
			facts.GPUNamespaces = setList(nss)
			return nil
		}},
		{"jobs", func() error {
			jobs, _, err := client.Jobs().ListOptions(&api.JobListOptions{Fields: &api.JobListFields{Meta: true}}, all)
			if err != nil {
				return err
			}
			facts.JobTiers = map[string][]string{}
			for _, j := range jobs {
				if tier := j.Meta[tierKey]; tier != "" {
					facts.JobTiers[tier] = append(facts.JobTiers[tier], j.Namespace+"/"+j.ID)
				}
			}
			return nil
		}},
	}
	for _, s := range steps {
		if err := read(s.what, s.do); err != nil {
			return policy.Cluster{}, nil, err
		}
	}
	return facts, unread, nil
}

func setList(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// seesEverything reports whether the token lists every namespace and node
// pool: a management token, or any on a cluster without ACLs.
func seesEverything(client *api.Client) (bool, error) {
	tok, _, err := client.ACLTokens().Self(nil)
	switch {
	case err != nil && strings.Contains(err.Error(), "ACL support disabled"):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("read the token's own ACL token: %w", err)
	}
	return tok.Type == "management", nil
}
