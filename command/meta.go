package command

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/hashicorp/cli"
	"github.com/hashicorp/nomad/api"
	"github.com/mattn/go-isatty"
	"github.com/posener/complete"

	"github.com/gpu-steward/steward/controller"
)

// Meta holds the general options every command that talks to Nomad takes,
// the same as the nomad CLI's (its command.Meta): the flags override the
// environment, which overrides the defaults. A command embeds it
// (type XCommand struct{ Meta }, registered as &XCommand{Meta: Meta{UI:
// ui}}), adds its own flags to FlagSet's flag set, calls Parse, then
// Client and Namespace; its Help ends with generalOptionsUsage and its
// AutocompleteFlags come from Meta.AutocompleteFlags.
type Meta struct {
	UI cli.Ui

	// The general options as given on the command line ("" or false:
	// not given, the environment decides).
	address       string
	region        string
	namespace     string
	token         string
	tokenFile     string
	caCert        string
	caPath        string
	clientCert    string
	clientKey     string
	tlsServerName string
	insecure      bool
	noColor       bool

	// flags says which optional options this command takes.
	flags metaFlags
}

// metaFlags are the general options only some commands take.
type metaFlags int

const (
	// flagNamespace: -namespace (not for the controller, which watches
	// every namespace).
	flagNamespace metaFlags = 1 << iota
	// flagTokenFile: -token-file, read again on SIGHUP (the controller).
	flagTokenFile
)

// FlagSet is a flag set with the general options on it. Errors are
// returned by Parse, never printed by the flag package: commands print
// them with their help.
func (m *Meta) FlagSet(name string, which metaFlags) *flag.FlagSet {
	m.flags = which
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(discard{})
	fs.StringVar(&m.address, "address", "", "")
	fs.StringVar(&m.region, "region", "", "")
	if which&flagNamespace != 0 {
		fs.StringVar(&m.namespace, "namespace", "", "")
	}
	fs.StringVar(&m.token, "token", "", "")
	if which&flagTokenFile != 0 {
		fs.StringVar(&m.tokenFile, "token-file", "", "")
	}
	fs.StringVar(&m.caCert, "ca-cert", "", "")
	fs.StringVar(&m.caPath, "ca-path", "", "")
	fs.StringVar(&m.clientCert, "client-cert", "", "")
	fs.StringVar(&m.clientKey, "client-key", "", "")
	fs.StringVar(&m.tlsServerName, "tls-server-name", "", "")
	fs.BoolVar(&m.insecure, "tls-skip-verify", false, "")
	fs.BoolVar(&m.noColor, "no-color", false, "")
	return fs
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// Config is the Nomad client configuration: api.DefaultConfig (NOMAD_ADDR,
// NOMAD_REGION, NOMAD_NAMESPACE, NOMAD_TOKEN, NOMAD_CACERT, NOMAD_CAPATH,
// NOMAD_CLIENT_CERT, NOMAD_CLIENT_KEY, NOMAD_TLS_SERVER_NAME,
// NOMAD_SKIP_VERIFY) with every option given on the command line over it.
func (m *Meta) Config() (*api.Config, error) {
	cfg := api.DefaultConfig()
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&cfg.Address, m.address)
	set(&cfg.Region, m.region)
	set(&cfg.Namespace, m.namespace)
	set(&cfg.SecretID, m.token)
	set(&cfg.TLSConfig.CACert, m.caCert)
	set(&cfg.TLSConfig.CAPath, m.caPath)
	set(&cfg.TLSConfig.ClientCert, m.clientCert)
	set(&cfg.TLSConfig.ClientKey, m.clientKey)
	set(&cfg.TLSConfig.TLSServerName, m.tlsServerName)
	if m.insecure {
		cfg.TLSConfig.Insecure = true
	}
	if m.tokenFile != "" {
		if m.token != "" {
			return nil, fmt.Errorf("-token and -token-file both given: use one")
		}
		tok, err := readTokenFile(m.tokenFile)
		if err != nil {
			return nil, err
		}
		cfg.SecretID = tok
	}
	return cfg, nil
}

// Client connects to Nomad with Config.
func (m *Meta) Client() (*api.Client, error) {
	return m.ClientCounted(nil)
}

// ClientCounted is Client with its traffic counted on t (nil: not
// counted).
func (m *Meta) ClientCounted(t *controller.Traffic) (*api.Client, error) {
	cfg, err := m.Config()
	if err != nil {
		return nil, err
	}
	return nomadClientCounted(cfg, t)
}

// Namespace is the namespace the command works in: -namespace, else
// NOMAD_NAMESPACE, else "" (none named).
func (m *Meta) Namespace() string {
	if m.namespace != "" {
		return m.namespace
	}
	return os.Getenv("NOMAD_NAMESPACE")
}

// Color says whether output may be coloured: not with -no-color, nor
// with NOMAD_CLI_NO_COLOR set (as the nomad CLI), nor when standard
// output is not a terminal.
func (m *Meta) Color() bool {
	if m.noColor {
		return false
	}
	if v, ok := os.LookupEnv("NOMAD_CLI_NO_COLOR"); ok {
		if off, err := strconv.ParseBool(v); err != nil || off {
			return false
		}
	}
	return isatty.IsTerminal(os.Stdout.Fd())
}

// Parse parses the command line; then errors are shown in red where
// Color allows.
func (m *Meta) Parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if _, colored := m.UI.(*cli.ColoredUi); !colored && m.Color() {
		m.UI = &cli.ColoredUi{ErrorColor: cli.UiColorRed, WarnColor: cli.UiColorYellow, Ui: m.UI}
	}
	return nil
}

// AutocompleteFlags are the general options' predictors, merged with a
// command's own.
func (m *Meta) AutocompleteFlags(which metaFlags, own complete.Flags) complete.Flags {
	f := complete.Flags{
		"-address":         complete.PredictAnything,
		"-region":          complete.PredictAnything,
		"-token":           complete.PredictAnything,
		"-ca-cert":         complete.PredictFiles("*"),
		"-ca-path":         complete.PredictDirs("*"),
		"-client-cert":     complete.PredictFiles("*"),
		"-client-key":      complete.PredictFiles("*"),
		"-tls-server-name": complete.PredictAnything,
		"-tls-skip-verify": complete.PredictNothing,
		"-no-color":        complete.PredictNothing,
	}
	if which&flagNamespace != 0 {
		f["-namespace"] = predictNamespaces{}
	}
	if which&flagTokenFile != 0 {
		f["-token-file"] = complete.PredictFiles("*")
	}
	for k, v := range own {
		f[k] = v
	}
	return f
}

// generalOptionsUsage is the help text of the general options, for the
// end of each command's help.
func generalOptionsUsage(which metaFlags) string {
	var b strings.Builder
	b.WriteString(`General Options (as the nomad CLI's):

  -address=<addr>
    The address of the Nomad server. Overrides NOMAD_ADDR.
    Default = http://127.0.0.1:4646

  -region=<region>
    The region of the Nomad servers to forward commands to. Overrides
    NOMAD_REGION.
`)
	if which&flagNamespace != 0 {
		b.WriteString(`
  -namespace=<namespace>
    The target namespace for queries and actions bound to a namespace.
    Overrides NOMAD_NAMESPACE.
`)
	}
	b.WriteString(`
  -token=<token>
    The SecretID of an ACL token to use to authenticate API requests.
    Overrides NOMAD_TOKEN.
`)
	if which&flagTokenFile != 0 {
		b.WriteString(`
  -token-file=<path>
    Read the ACL token from this file instead (as a Nomad job: the workload
    identity, ${NOMAD_SECRETS_DIR}/nomad_token); the controller re-reads it
    on SIGHUP. It must be readable by its owner alone (mode 0600).
`)
	}
	b.WriteString(`
  -ca-cert=<path>
    Path to a PEM encoded CA cert file to use to verify the Nomad server
    SSL certificate. Overrides NOMAD_CACERT.

  -ca-path=<path>
    Path to a directory of PEM encoded CA cert files to verify the Nomad
    server SSL certificate. Overrides NOMAD_CAPATH.

  -client-cert=<path>
    Path to a PEM encoded client certificate for TLS authentication to the
    Nomad server. Overrides NOMAD_CLIENT_CERT.

  -client-key=<path>
    Path to an unencrypted PEM encoded private key matching the client
    certificate from -client-cert. Overrides NOMAD_CLIENT_KEY.

  -tls-server-name=<value>
    The server name to use as the SNI host when connecting via TLS.
    Overrides NOMAD_TLS_SERVER_NAME.

  -tls-skip-verify
    Do not verify TLS certificate. This is highly not recommended.
    Overrides NOMAD_SKIP_VERIFY.

  -no-color
    Disables colored output (also NOMAD_CLI_NO_COLOR).`)
	return b.String()
}
