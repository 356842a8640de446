// Command steward is Steward: GPU tiers, team reservations and idle-GPU
// reclaim for HashiCorp Nomad.
//
// One binary serves every role. Run as "steward" it is a CLI
// (steward policy validate, steward controller, ...). Copied into a Nomad
// client's plugin_dir under a plugin's file name it serves that plugin to
// the agent, which starts plugins with no arguments.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/cli"

	"github.com/gpu-steward/steward/command"
)

func main() {
	os.Exit(run(filepath.Base(os.Args[0]), os.Args[1:]))
}

func run(name string, args []string) int {
	if serve, ok := command.Plugins[strings.TrimSuffix(name, ".exe")]; ok {
		serve()
		return 0
	}
	ui := &cli.BasicUi{Reader: os.Stdin, Writer: os.Stdout, ErrorWriter: os.Stderr}
	c := &cli.CLI{
		Name:     "steward",
		Version:  command.VersionText(), // -version; internal/version says where it comes from
		Args:     args,
		Commands: command.Commands(ui),
		// steward -autocomplete-install adds completion to the shell's
		// rc file (bash, zsh, fish), as nomad -autocomplete-install does.
		Autocomplete: true,
	}
	code, err := c.Run()
	if err != nil {
		fmt.Fprintf(os.Stderr, "steward: %v\n", err)
		return 1
	}
	return code
}
