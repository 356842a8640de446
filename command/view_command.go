package command

import (
	"flag"
	"fmt"

	"github.com/gpu-steward/steward/controller"
	"github.com/hashicorp/nomad/api"
	"github.com/posener/complete"
)

// viewAutocomplete completes the flags of the commands that read the
// controller's published view (status, queue).
func (m *Meta) viewAutocomplete() complete.Flags {
	return m.AutocompleteFlags(flagNamespace, complete.Flags{
		"-state-namespace": complete.PredictAnything, "-json": complete.PredictNothing,
		"-t": complete.PredictAnything, "-verbose": complete.PredictNothing,
	})
}

// view is what a view command has parsed and read: its arguments, the
// output format asked for, a client and the view its token may see.
type view struct {
	fs     *flag.FlagSet
	out    outputFlags
	client *api.Client
	status *controller.Status
}

// readViewCommand parses a view command's flags (at most maxArgs
// arguments; tooMany says why more are refused) and reads the view. On an
// error it has told the user, with help, and ok is false: exit 1.
func (m *Meta) readViewCommand(name string, args []string, maxArgs int, tooMany, help string) (v view, ok bool) {
	stateNS := controller.DefaultConfig().StateNamespace
	v.fs = m.FlagSet(name, flagNamespace)
	v.fs.StringVar(&stateNS, "state-namespace", stateNS, "")
	v.out.register(v.fs)
	if err := m.Parse(v.fs, args); err != nil || v.fs.NArg() > maxArgs {
		if err == nil {
			err = fmt.Errorf("%s", tooMany)
		}
		m.UI.Error(fmt.Sprintf("%v\n\n%s", err, help))
		return v, false
	}
	var err error
	if v.client, err = m.Client(); err == nil {
		v.status, err = readView(v.client, m.Namespace(), stateNS)
	}
	if err != nil {
		m.UI.Error(err.Error())
		return v, false
	}
	return v, true
}
