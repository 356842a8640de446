package command

import (
	"fmt"
	"runtime"
	"strings"

	"github.com/hashicorp/cli"

	"github.com/gpu-steward/steward/internal/version"
)

func init() {
	register("version", func(ui cli.Ui) cli.Command { return &VersionCommand{UI: ui} })
}

// VersionCommand is "steward version" (also "steward -version").
type VersionCommand struct{ UI cli.Ui }

func (c *VersionCommand) Help() string {
	return strings.TrimSpace(`
Usage: steward version

  Prints Steward's version (the plugins steward-gpu and steward-exec built
  with it report the same one to Nomad), the version of Nomad it was built
  against, and the Go toolchain and platform. "steward -version" prints the
  same.
`)
}

func (c *VersionCommand) Synopsis() string {
	return "Print Steward's version and the Nomad it was built against"
}

func (c *VersionCommand) Run(args []string) int {
	if len(args) > 0 {
		c.UI.Error(fmt.Sprintf("version takes no arguments\n\n%s", c.Help()))
		return 1
	}
	c.UI.Output(VersionText())
	return 0
}

// VersionText is what "steward version" prints.
func VersionText() string {
	return fmt.Sprintf("Steward %s\nBuilt against Nomad %s\nGo %s %s/%s",
		version.String(), version.Nomad(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
