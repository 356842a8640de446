// Package command holds the steward CLI's subcommands. Each file is one
// command and registers itself in init with register; Commands lists them
// for main.
package command

import "github.com/hashicorp/cli"

// factories holds every subcommand keyed by its words ("policy validate").
// Each command file adds its own entry in init, so adding a command touches
// only its file.
var factories = map[string]func(ui cli.Ui) cli.Command{}

// register adds a subcommand. It panics on a duplicate: two files claiming
// the same words is a programming error caught by any test run.
func register(words string, f func(ui cli.Ui) cli.Command) {
	if _, dup := factories[words]; dup {
		panic("command registered twice: " + words)
	}
	factories[words] = f
}

// Commands returns the CLI's subcommands keyed by their words.
func Commands(ui cli.Ui) map[string]cli.CommandFactory {
	out := make(map[string]cli.CommandFactory, len(factories))
	for words, f := range factories {
		f := f
		out[words] = func() (cli.Command, error) { return f(ui), nil }
	}
	return out
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
