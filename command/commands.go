// Package command holds the steward CLI's subcommands. Each file is one
// command; Commands lists them for main.
package command

import "github.com/hashicorp/cli"

// Commands returns the CLI's subcommands keyed by their words.
func Commands(ui cli.Ui) map[string]cli.CommandFactory {
	return map[string]cli.CommandFactory{
		"policy": func() (cli.Command, error) {
			return &groupCommand{synopsis: "Validate and show policy files", help: "Usage: steward policy <validate|show> FILE..."}, nil
		},
		"policy validate": func() (cli.Command, error) { return &PolicyValidateCommand{UI: ui}, nil },
		"policy show":     func() (cli.Command, error) { return &PolicyShowCommand{UI: ui}, nil },
	}
}

// Plugins maps an executable file name to the Nomad plugin it serves. An
// operator copies the steward binary into the client's plugin_dir under one
// of these names and references it with a plugin "<name>" block.
var Plugins = map[string]func(){}

// groupCommand is the parent of a group of subcommands ("steward policy").
type groupCommand struct{ synopsis, help string }

func (c *groupCommand) Help() string     { return c.help }
func (c *groupCommand) Synopsis() string { return c.synopsis }
func (c *groupCommand) Run([]string) int { return cli.RunResultHelp }
