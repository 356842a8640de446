package command

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/user"
	"strings"
	"time"

	"github.com/hashicorp/cli"
	"github.com/hashicorp/nomad/api"
	"github.com/posener/complete"

	"github.com/gpu-steward/steward/controller"
)

func init() {
	register("pause", func(ui cli.Ui) cli.Command { return &PauseCommand{Meta: Meta{UI: ui}, action: "pause"} })
	register("resume", func(ui cli.Ui) cli.Command { return &PauseCommand{Meta: Meta{UI: ui}, action: "resume"} })
}

// PauseCommand is "steward pause JOB" and "steward resume JOB".
type PauseCommand struct {
	Meta
	action string
}

func (c *PauseCommand) Help() string {
	if c.action == "resume" {
		return strings.TrimSpace(`
Usage: steward resume [options] JOB

  Lets a paused job run again: the controller resumes it when capacity
  and its tenant's limit allow, like any held job. It also asks back a
  job an idle rule in mode "always" requeued, which otherwise waits held
  for its owner: it resumes on free GPUs. JOB may be a prefix of the
  job's ID, as for 'nomad job status'.

` + generalOptionsUsage(flagNamespace))
	}
	return strings.TrimSpace(`
Usage: steward pause [options] JOB

  Pauses a job: the controller sends its checkpoint signal, waits the
  grace, and holds the job (scaled to 0) until "steward resume JOB".
  The request is left for the leading controller in the variable
  steward/requests/JOB of the job's namespace (-namespace, else
  NOMAD_NAMESPACE, else "default"). JOB may be a prefix of the job's ID,
  as for 'nomad job status'; a token that may not list jobs must name it
  in full.

` + generalOptionsUsage(flagNamespace))
}

func (c *PauseCommand) Synopsis() string {
	if c.action == "resume" {
		return "Let a paused (or idle-requeued) job run again"
	}
	return "Checkpoint and hold a job until it is resumed"
}

func (c *PauseCommand) AutocompleteFlags() complete.Flags {
	return c.Meta.AutocompleteFlags(flagNamespace, nil)
}

func (c *PauseCommand) AutocompleteArgs() complete.Predictor { return predictJobs{meta: &c.Meta} }

func (c *PauseCommand) Run(args []string) int {
	fs := c.FlagSet(c.action, flagNamespace)
	if err := c.Parse(fs, args); err != nil || fs.NArg() != 1 {
		c.UI.Error(c.Help())
		return 1
	}
	client, ref, err := c.requestTarget(fs.Arg(0))
	if err != nil {
		c.UI.Error(err.Error())
		return 1
	}
	ns, job := ref.Namespace, ref.ID
	by := requester("steward " + c.action)
	req := controller.Request{Action: c.action, By: by, At: time.Now()}
	if err := controller.SubmitRequest(context.Background(), controller.NewNomad(client), ns, job, req); err != nil {
		c.UI.Error(err.Error())
		return 1
	}
	c.UI.Output(fmt.Sprintf("%s of %s/%s requested; the controller carries it out (see steward status)", c.action, ns, job))
	return 0
}

// requestTarget is the client and the job a request (pause, resume,
// snooze) names: the job a prefix names, or a missing job, at once. A
// token that may not list jobs (one with only acl/steward-user.policy.hcl,
// or a workload identity bound to it) still leaves its request for the ID
// as given: the controller acts only on a job of that name in that
// namespace, and logs and drops a request for none.
func (m *Meta) requestTarget(arg string) (*api.Client, jobRef, error) {
	ns := m.Namespace()
	if ns == "" {
		ns = "default"
	}
	client, err := m.Client()
	if err != nil {
		return nil, jobRef{}, err
	}
	ref, err := resolveJob(client, ns, arg, nil)
	return client, ref, err
}

// requester is who a request says it is from (shown in the CLI's output
// only; the controller does not believe it).
func requester(fallback string) string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return fallback
}

// isForbidden reports a 403 from Nomad: the token lacks the capability.
func isForbidden(err error) bool {
	var ue api.UnexpectedResponseError
	return errors.As(err, &ue) && ue.StatusCode() == http.StatusForbidden
}
