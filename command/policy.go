package command

import "github.com/hashicorp/cli"

func init() {
	register("policy", func(cli.Ui) cli.Command {
		return &groupCommand{synopsis: "Validate and show policy files", help: "Usage: steward policy <validate|show> FILE..."}
	})
	register("policy validate", func(ui cli.Ui) cli.Command { return &PolicyValidateCommand{Meta{UI: ui}} })
	register("policy show", func(ui cli.Ui) cli.Command { return &PolicyShowCommand{UI: ui} })
}
