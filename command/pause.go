package command

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/hashicorp/cli"
	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/controller"
)

func init() {
	register("pause", func(ui cli.Ui) cli.Command { return &PauseCommand{UI: ui, action: "pause"} })
	register("resume", func(ui cli.Ui) cli.Command { return &PauseCommand{UI: ui, action: "resume"} })
}

// PauseCommand is "steward pause JOB" and "steward resume JOB".
type PauseCommand struct {
	UI     cli.Ui
	action string
}

func (c *PauseCommand) Help() string {
	if c.action == "resume" {
		return strings.TrimSpace(`
Usage: steward resume [-namespace NS] JOB

  Lets a paused job run again: the controller resumes it when capacity
  and its tenant's limit allow, like any held job.
`)
	}
	return strings.TrimSpace(`
Usage: steward pause [-namespace NS] JOB

  Pauses a job: the controller sends its checkpoint signal, waits the
  grace, and holds the job (scaled to 0) until "steward resume JOB".
  The request is left for the leading controller in the variable
  steward/requests/JOB of the job's namespace.
`)
}

func (c *PauseCommand) Synopsis() string {
	if c.action == "resume" {
		return "Let a paused job run again"
	}
	return "Checkpoint and hold a job until it is resumed"
}

func (c *PauseCommand) Run(args []string) int {
	var address string
	ns := os.Getenv("NOMAD_NAMESPACE")
	if ns == "" {
		ns = "default"
	}
	fs := flag.NewFlagSet(c.action, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&ns, "namespace", ns, "")
	addressFlag(fs, &address)
	if err := fs.Parse(args); err != nil || fs.NArg() != 1 {
		c.UI.Error(c.Help())
		return 1
	}
	job := fs.Arg(0)
	client, err := nomadClient(address)
	if err != nil {
		c.UI.Error(err.Error())
		return 1
	}
	// Name a missing job at once. A token that may not read jobs (one
	// with only acl/steward-user.policy.hcl) still leaves its request: the
	// controller acts only on a job of that name in that namespace, and
	// logs and drops a request for none.
	if _, _, err := client.Jobs().Info(job, (&apiQuery{ns}).opts()); err != nil && !isForbidden(err) {
		c.UI.Error(fmt.Sprintf("job %s in namespace %s: %v", job, ns, err))
		return 1
	}
	by := "steward " + c.action
	if u, err := user.Current(); err == nil {
		by = u.Username
	}
	req := controller.Request{Action: c.action, By: by, At: time.Now()}
	if err := controller.SubmitRequest(context.Background(), controller.NewNomad(client), ns, job, req); err != nil {
		c.UI.Error(err.Error())
		return 1
	}
	c.UI.Output(fmt.Sprintf("%s of %s/%s requested; the controller carries it out (see steward status)", c.action, ns, job))
	return 0
}

// isForbidden reports a 403 from Nomad: the token lacks the capability.
func isForbidden(err error) bool {
	var ue api.UnexpectedResponseError
	return errors.As(err, &ue) && ue.StatusCode() == http.StatusForbidden
}
