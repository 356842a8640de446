package command

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/cli"
	"github.com/hashicorp/nomad/api"
	"github.com/posener/complete"
)

func init() {
	register("drain", func(ui cli.Ui) cli.Command { return &DrainCommand{Meta: Meta{UI: ui}} })
}

// DrainCommand is "steward drain NODE": Nomad's node drain for
// maintenance, and what Steward and Nomad each do with the node's GPU
// work. The drain itself is Nomad's (node write, an operator's right):
// the controller acts on any drain it sees, however started
// (controller/maintenance.go).
type DrainCommand struct {
	Meta
}

// drainDefaultDeadline is Nomad's own default: far longer than any grace.
const drainDefaultDeadline = time.Hour

func (c *DrainCommand) Help() string {
	return strings.TrimSpace(`
Usage: steward drain [options] NODE

  Drains a node for maintenance, as 'nomad node drain -enable' does, and
  says what happens to its GPU work. NODE is a node's name or a prefix of
  its ID. Nomad makes the node ineligible at once; the Steward controller
  gives every batch job's GPU allocations there its checkpoint signal and
  grace, holds the job and resumes it on other nodes when GPUs are free,
  with the reason "node maintenance" in its record. Nomad migrates service
  jobs itself (their migrate block, with their kill_signal), stops system
  jobs last, and stops whatever is left at the deadline, without a
  checkpoint. The token needs node write (an operator's).

  -deadline=1h
    When Nomad stops what is still on the node. Make it longer than the
    policy's longest checkpoint grace plus a minute.

  -disable
    Cancels the drain and makes the node eligible again (held work
    resumes wherever GPUs are free).

` + generalOptionsUsage(0))
}

func (c *DrainCommand) Synopsis() string {
	return "Drain a node for maintenance: its GPU work checkpoints and resumes elsewhere"
}

func (c *DrainCommand) AutocompleteFlags() complete.Flags {
	return c.Meta.AutocompleteFlags(0, complete.Flags{"-deadline": complete.PredictAnything, "-disable": complete.PredictNothing})
}

func (c *DrainCommand) AutocompleteArgs() complete.Predictor { return complete.PredictAnything }

func (c *DrainCommand) Run(args []string) int {
	fs := c.FlagSet("drain", 0)
	deadline := fs.Duration("deadline", drainDefaultDeadline, "")
	disable := fs.Bool("disable", false, "")
	if err := c.Parse(fs, args); err != nil || fs.NArg() != 1 {
		c.UI.Error(c.Help())
		return 1
	}
	if !*disable && *deadline <= 0 {
		c.UI.Error("drain: -deadline must be positive: Steward needs time to checkpoint (a forced drain stops everything at once; use nomad node drain -force for that)")
		return 1
	}
	client, err := c.Client()
	if err != nil {
		c.UI.Error(err.Error())
		return 1
	}
	node, err := findNode(client, fs.Arg(0))
	if err != nil {
		c.UI.Error(err.Error())
		return 1
	}
	if *disable {
		if _, err := client.Nodes().UpdateDrainOpts(node.ID, &api.DrainOptions{MarkEligible: true}, nil); err != nil {
			c.UI.Error(fmt.Sprintf("cancel the drain of node %s: %v", node.Name, err))
			return 1
		}
		c.UI.Output(fmt.Sprintf("node %s: drain cancelled, eligible again", node.Name))
		return 0
	}
	allocs, _, err := client.Nodes().Allocations(node.ID, nil)
	if err != nil {
		c.UI.Error(fmt.Sprintf("read the allocations of node %s: %v", node.Name, err))
		return 1
	}
	if _, err := client.Nodes().UpdateDrainOpts(node.ID, &api.DrainOptions{DrainSpec: &api.DrainSpec{Deadline: *deadline}}, nil); err != nil {
		c.UI.Error(fmt.Sprintf("drain node %s: %v (a drain takes a token with node write)", node.Name, err))
		return 1
	}
	c.UI.Output(fmt.Sprintf("node %s: draining, ineligible; Nomad stops what is left at %s (deadline %s)",
		node.Name, time.Now().Add(*deadline).UTC().Format(time.RFC3339), *deadline))
	for _, line := range drainSummary(allocs) {
		c.UI.Output("  " + line)
	}
	return 0
}

// findNode is the node a name or an ID prefix names: exactly one.
func findNode(client *api.Client, arg string) (*api.NodeListStub, error) {
	nodes, _, err := client.Nodes().List(nil)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	var byName, byID []*api.NodeListStub
	for _, n := range nodes {
		if n.Name == arg {
			byName = append(byName, n)
		}
		if strings.HasPrefix(n.ID, arg) {
			byID = append(byID, n)
		}
	}
	switch {
	case len(byName) == 1:
		return byName[0], nil
	case len(byName) == 0 && len(byID) == 1:
		return byID[0], nil
	case len(byName)+len(byID) == 0:
		return nil, fmt.Errorf("no node named %q or whose ID starts so", arg)
	}
	var names []string
	for _, n := range append(byName, byID...) {
		names = append(names, n.Name+" ("+n.ID[:min(8, len(n.ID))]+")")
	}
	return nil, fmt.Errorf("%q names several nodes: %s; give more of the ID", arg, strings.Join(names, ", "))
}

// drainSummary says, for each running allocation of the node that holds
// GPUs, who takes care of it: Steward (batch: checkpointed, held,
// resumed elsewhere) or Nomad (service: migrated; system, sysbatch).
// Work without GPUs is Nomad's, counted in one line.
func drainSummary(allocs []*api.Allocation) []string {
	var out []string
	other := 0
	for _, a := range allocs {
		if a.ClientTerminalStatus() || a.DesiredStatus != api.AllocDesiredStatusRun {
			continue
		}
		gpus := allocGPUs(a)
		typ := ""
		if a.Job != nil && a.Job.Type != nil {
			typ = *a.Job.Type
		}
		if gpus == 0 {
			other++
			continue
		}
		who := "Nomad migrates it (a " + typ + " job: its migrate block and kill_signal; no checkpoint signal from Steward)"
		switch typ {
		case api.JobTypeBatch:
			who = "Steward checkpoints it (signal, grace), holds it and resumes it elsewhere"
		case api.JobTypeSystem, api.JobTypeSysbatch:
			who = "Nomad stops it last (a " + typ + " job)"
		}
		out = append(out, fmt.Sprintf("%s/%s %s (%s): %d GPU(s): %s", a.Namespace, a.JobID, a.TaskGroup, a.ID[:min(8, len(a.ID))], gpus, who))
	}
	sort.Strings(out)
	if other > 0 {
		out = append(out, fmt.Sprintf("%d allocation(s) without GPUs: Nomad migrates them", other))
	}
	if len(out) == 0 {
		out = append(out, "no running allocations")
	}
	return out
}

// allocGPUs is how many GPU instances an allocation holds.
func allocGPUs(a *api.Allocation) int {
	n := 0
	if a.AllocatedResources == nil {
		return 0
	}
	for _, t := range a.AllocatedResources.Tasks {
		for _, d := range t.Devices {
			if d != nil && d.Type == "gpu" {
				n += len(d.DeviceIDs)
			}
		}
	}
	return n
}
