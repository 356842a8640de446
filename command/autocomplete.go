package command

import (
	"strings"

	"github.com/hashicorp/nomad/api"
	"github.com/posener/complete"
)

// Shell completion (steward -autocomplete-install): each command lists
// its flags (Meta.AutocompleteFlags adds the general options) and
// predicts its arguments. Predictors that ask Nomad connect as the
// environment says (NOMAD_ADDR, NOMAD_TOKEN, NOMAD_NAMESPACE...): the
// command line is not parsed while completing. A failed call completes
// nothing.

// predictJobs completes job IDs by prefix, in the namespace the
// environment names or else every namespace the token may list.
type predictJobs struct{ meta *Meta }

func (p predictJobs) Predict(a complete.Args) []string {
	client, err := p.meta.Client()
	if err != nil {
		return nil
	}
	ns := p.meta.Namespace()
	if ns == "" {
		ns = api.AllNamespacesNamespace
	}
	stubs, _, err := client.Jobs().List(&api.QueryOptions{Namespace: ns, Prefix: a.Last})
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(stubs))
	for _, s := range stubs {
		out = append(out, s.ID)
	}
	return out
}

// predictNamespaces completes namespace names by prefix.
type predictNamespaces struct{}

func (predictNamespaces) Predict(a complete.Args) []string {
	client, err := (&Meta{}).Client()
	if err != nil {
		return nil
	}
	nss, _, err := client.Namespaces().List(nil)
	if err != nil {
		return nil
	}
	var out []string
	for _, n := range nss {
		if strings.HasPrefix(n.Name, a.Last) {
			out = append(out, n.Name)
		}
	}
	return out
}
