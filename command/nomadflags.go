package command

import (
	"flag"
	"fmt"
	"strings"

	"github.com/hashicorp/nomad/api"
)

// stringList is a repeatable string flag (-policy a.hcl -policy b.hcl).
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// nomadClient connects the way the nomad CLI does: NOMAD_ADDR,
// NOMAD_TOKEN, NOMAD_CACERT, NOMAD_CLIENT_CERT, NOMAD_CLIENT_KEY,
// NOMAD_REGION and friends, with -address overriding NOMAD_ADDR.
func nomadClient(address string) (*api.Client, error) {
	cfg := api.DefaultConfig()
	if address != "" {
		cfg.Address = address
	}
	c, err := api.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to Nomad at %s: %w", cfg.Address, err)
	}
	return c, nil
}

func addressFlag(fs *flag.FlagSet, p *string) {
	fs.StringVar(p, "address", "", "Nomad HTTP address (default: $NOMAD_ADDR or http://127.0.0.1:4646)")
}

type apiQuery struct{ namespace string }

func (q *apiQuery) opts() *api.QueryOptions { return &api.QueryOptions{Namespace: q.namespace} }
