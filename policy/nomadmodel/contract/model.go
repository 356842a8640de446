package contract

import (
	"fmt"

	"github.com/gpu-steward/steward/policy/engine"
	"github.com/gpu-steward/steward/policy/nomadmodel"
)

// Model is a case's start state in the one model of Nomad: what the
// model's own side plays, and the snapshot a side that starts from what
// the controller would read (the forecast's replay) plans on.
func Model(tc Case) (*nomadmodel.Cluster, error) {
	var nodes []engine.Node
	for _, n := range tc.Nodes {
		nodes = append(nodes, engine.Node{ID: n.ID, Name: n.ID, NodePool: poolOr(n.Pool), GPUs: n.GPUs})
	}
	c, err := nomadmodel.New(nodes)
	if err != nil {
		return nil, fmt.Errorf("case %q: %w", tc.Name, err)
	}
	for _, j := range tc.Jobs {
		g, err := c.AddGroup(nomadmodel.Group{Job: engine.Job{Ref: engine.JobRef{Namespace: j.Namespace, ID: j.ID},
			Tier: j.Tier, Priority: j.Priority, Gang: j.Gang}, Name: Group, GPUsPerAlloc: j.GPUs, Count: j.Count,
			NodePool: poolOr(j.Pool), Since: Start.Add(-j.WaitedFor)})
		if err != nil {
			return nil, fmt.Errorf("case %q: job %s/%s: %w", tc.Name, j.Namespace, j.ID, err)
		}
		for _, n := range j.Running {
			id, err := c.Start(g, n, Start.Add(-j.RanFor))
			if err != nil {
				return nil, fmt.Errorf("case %q: start %s/%s on %s: %w", tc.Name, j.Namespace, j.ID, n, err)
			}
			if j.Idle {
				idle := []engine.Sample{{At: Start.Add(-j.RanFor), Util: 0}, {At: Start, Util: 0}}
				if err := c.SetUsage(id, idle); err != nil {
					return nil, fmt.Errorf("case %q: usage of %s: %w", tc.Name, id, err)
				}
			}
		}
	}
	return c, nil
}

// poolOr is a node pool as Nomad names it: "" is "default".
func poolOr(p string) string {
	if p == "" {
		return "default"
	}
	return p
}
