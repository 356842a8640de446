package command

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/hashicorp/go-cleanhttp"
	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/controller"
)

// stringList is a repeatable string flag (-policy a.hcl -policy b.hcl).
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// nomadClientCounted connects with cfg (Meta.Config), its traffic counted
// on t (nil: not counted; nor over a unix socket, whose client the api
// package builds itself).
func nomadClientCounted(cfg *api.Config, t *controller.Traffic) (*api.Client, error) {
	if t != nil && !strings.HasPrefix(cfg.Address, "unix:") {
		// As the api package's own client (defaultHttpClient), with the
		// transport wrapped.
		hc := cleanhttp.DefaultPooledClient()
		tr := hc.Transport.(*http.Transport)
		tr.TLSHandshakeTimeout, tr.TLSClientConfig, tr.ForceAttemptHTTP2 = 10*time.Second, &tls.Config{MinVersion: tls.VersionTLS12}, false
		if err := api.ConfigureTLS(hc, cfg.TLSConfig); err != nil {
			return nil, fmt.Errorf("configure TLS for Nomad at %s: %w", cfg.Address, err)
		}
		hc.Transport = t.Wrap(hc.Transport)
		cfg.HttpClient = hc
	}
	c, err := api.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to Nomad at %s: %w", cfg.Address, err)
	}
	return c, nil
}

type apiQuery struct{ namespace string }

func (q *apiQuery) opts() *api.QueryOptions { return &api.QueryOptions{Namespace: q.namespace} }
