package command

import (
	"errors"
	"strings"

	"github.com/hashicorp/cli"
	"github.com/hashicorp/nomad/api"
)

func init() {
	register("operator", func(cli.Ui) cli.Command {
		return &groupCommand{synopsis: "Set Steward up on a cluster, and collect what troubleshooting needs",
			help: "Usage: steward operator <setup|debug> [options]"}
	})
	register("operator setup", func(ui cli.Ui) cli.Command { return &OperatorSetupCommand{Meta: Meta{UI: ui}} })
	register("operator debug", func(ui cli.Ui) cli.Command { return &OperatorDebugCommand{Meta: Meta{UI: ui}} })
}

// isNotFound says whether a Nomad API error is a 404: the thing asked for
// does not exist (yet).
func isNotFound(err error) bool {
	var ue api.UnexpectedResponseError
	if errors.As(err, &ue) {
		return ue.StatusCode() == 404
	}
	// Some endpoints answer a missing object with an error text alone.
	return err != nil && strings.Contains(err.Error(), "not found")
}
