package command

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/cli"
	"github.com/hashicorp/nomad/api"
	"github.com/posener/complete"
	"github.com/ryanuber/columnize"

	"github.com/gpu-steward/steward/controller"
)

func init() {
	register("job", func(cli.Ui) cli.Command {
		return &groupCommand{synopsis: "Check jobs against the policy before submitting them",
			help: "Usage: steward job check [options] JOBSPEC\n\n  Subcommands: check"}
	})
	register("job check", func(ui cli.Ui) cli.Command { return &JobCheckCommand{Meta: Meta{UI: ui}} })
}

// Exit codes of `steward job check`, as documented in its help.
const (
	checkOK       = 0
	checkRefused  = 1
	checkNotAsked = 255
)

// JobCheckCommand is "steward job check JOBSPEC".
type JobCheckCommand struct {
	Meta
	// HTTP is the client used to reach the controller (tests); nil uses a
	// client with a 30 s timeout.
	HTTP *http.Client
}

func (c *JobCheckCommand) Help() string {
	return strings.TrimSpace(`
Usage: steward job check [options] JOBSPEC

  Says what Steward will make of a job before it is submitted: its tenant,
  the tier and Nomad priority it will get, whether it is a gang, its
  checkpoint signal and grace, and what Steward would do with it now
  against the live cluster: run it (free GPUs fit it), preempt whom for it
  (with each victim's reason), or hold it back (with the reason and the
  numbers). Meta values Steward refuses (an unknown tier, one the tenant
  may not use, a bad checkpoint signal or gang value) are named, with what
  is used instead.

  The jobspec is parsed by Nomad (as 'nomad job validate' does), and the
  question goes to the leading controller, which alone sees the whole
  cluster; it answers only if your token may submit the job (Nomad's own
  plan decides, with your token). A tenant's token is enough. Jobs of other
  namespaces that would be preempted are named by tenant and tier only.

  Exit status: 0 when Steward takes the job as written; 1 when it refuses
  some of its meta, or a group can never run as asked; 255 when the check
  could not be made (parse error, permission, no controller).

  -namespace is the namespace to parse the jobspec in (as for 'nomad job
  validate'); the job's own namespace decides where it is checked.

Check Options:

  -controller URL      The controller to ask (default: $STEWARD_CONTROLLER_ADDR,
                       else the address the leader publishes in
                       steward/controller of Steward's namespace).
  -controller-ca FILE  PEM CA certificate that signed the controller's TLS
                       certificate (default: $STEWARD_CONTROLLER_CACERT, else
                       the system's roots). Your token is sent only over TLS,
                       or in cleartext to a loopback address.
  -state-namespace NS  Steward's namespace (default "steward").
  -var KEY=VALUE       A value for a variable of the jobspec (repeatable), as
                       for 'nomad job plan'.
  -var-file FILE       A file of variable values (repeatable).
  -json                Print the answer as JSON.
  -t <template>        Format and print the answer using a Go template.

` + generalOptionsUsage(flagNamespace))
}

func (c *JobCheckCommand) AutocompleteFlags() complete.Flags {
	return c.Meta.AutocompleteFlags(flagNamespace, complete.Flags{
		"-controller": complete.PredictAnything, "-controller-ca": complete.PredictFiles("*.pem"), "-state-namespace": complete.PredictAnything,
		"-var": complete.PredictAnything, "-var-file": complete.PredictFiles("*"),
		"-json": complete.PredictNothing, "-t": complete.PredictAnything,
	})
}

func (c *JobCheckCommand) AutocompleteArgs() complete.Predictor {
	return complete.PredictOr(complete.PredictFiles("*.nomad"), complete.PredictFiles("*.hcl"))
}

func (c *JobCheckCommand) Synopsis() string {
	return "Say what Steward would do with a job before it is submitted"
}

func (c *JobCheckCommand) Run(args []string) int {
	var ctlAddr, ctlCA string
	var out outputFlags
	var vars, varFiles stringList
	ns := controller.DefaultConfig().StateNamespace
	fs := c.FlagSet("job check", flagNamespace)
	fs.StringVar(&ctlAddr, "controller", os.Getenv("STEWARD_CONTROLLER_ADDR"), "")
	fs.StringVar(&ctlCA, "controller-ca", os.Getenv("STEWARD_CONTROLLER_CACERT"), "")
	fs.StringVar(&ns, "state-namespace", ns, "")
	fs.BoolVar(&out.json, "json", false, "")
	fs.StringVar(&out.template, "t", "", "")
	fs.Var(&vars, "var", "")
	fs.Var(&varFiles, "var-file", "")
	if err := c.Parse(fs, args); err != nil || fs.NArg() != 1 {
		if err == nil {
			err = fmt.Errorf("want one jobspec file")
		}
		c.UI.Error(fmt.Sprintf("%v\n\n%s", err, c.Help()))
		return checkNotAsked
	}
	path := fs.Arg(0)
	src, err := os.ReadFile(path)
	if err != nil {
		c.UI.Error(fmt.Sprintf("read jobspec: %v", err))
		return checkNotAsked
	}
	cfg, err := c.Config()
	if err != nil {
		c.UI.Error(err.Error())
		return checkNotAsked
	}
	token := cfg.SecretID
	client, err := nomadClientCounted(cfg, nil)
	if err != nil {
		c.UI.Error(err.Error())
		return checkNotAsked
	}
	values, err := variableValues(vars, varFiles)
	if err != nil {
		c.UI.Error(err.Error())
		return checkNotAsked
	}
	// Nomad parses in the namespace the client names (-namespace,
	// NOMAD_NAMESPACE), where the caller's token needs parse-job, as for
	// `nomad job validate`.
	job, err := client.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: string(src), Variables: values, Canonicalize: true})
	if err != nil {
		hint := ""
		if strings.Contains(err.Error(), "403") && c.Namespace() == "" {
			hint = " (give -namespace or set NOMAD_NAMESPACE to a namespace your token may submit jobs in)"
		}
		c.UI.Error(fmt.Sprintf("%s: Nomad cannot parse the jobspec: %v%s", path, err, hint))
		return checkNotAsked
	}
	if ctlAddr == "" {
		addr, err := controller.ReadCheckAddress(context.Background(), controller.NewNomad(client), ns)
		switch {
		case err != nil:
			c.UI.Error(fmt.Sprintf("find the controller: %v (or give -controller URL)", err))
			return checkNotAsked
		case addr == "":
			c.UI.Error("find the controller: the leader publishes no address (it runs with -listen \"\"); give -controller URL")
			return checkNotAsked
		}
		if err := publishedAddrOK(addr, client.Address()); err != nil {
			c.UI.Error(err.Error())
			return checkNotAsked
		}
		ctlAddr = addr
	}
	res, err := c.ask(ctlAddr, ctlCA, token, job)
	if err != nil {
		c.UI.Error(err.Error())
		return checkNotAsked
	}
	if out.formatted() {
		if c.print(out.format(res)) != 0 {
			return checkNotAsked
		}
	} else {
		c.UI.Output(FormatCheck(res))
	}
	return checkExit(res)
}

// ask sends the job to the controller with the caller's token, which
// goes only over TLS, or in cleartext to loopback (tokenTransportOK).
func (c *JobCheckCommand) ask(addr, caFile, token string, job *api.Job) (*controller.CheckResult, error) {
	if err := tokenTransportOK(addr, token); err != nil {
		return nil, err
	}
	body, err := json.Marshal(controller.CheckRequest{Job: job})
	if err != nil {
		return nil, fmt.Errorf("encode job: %w", err)
	}
	url := strings.TrimRight(addr, "/") + "/v1/job/check"
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("ask the controller at %s: %w", addr, err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("X-Nomad-Token", token)
	}
	hc := c.HTTP
	if hc == nil {
		if hc, err = checkHTTPClient(caFile); err != nil {
			return nil, err
		}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("ask the controller at %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return nil, fmt.Errorf("the controller at %s answered %s: %s", addr, resp.Status, e.Error)
	}
	var res controller.CheckResult
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		return nil, fmt.Errorf("decode the controller's answer: %w", err)
	}
	return &res, nil
}

// checkExit is the exit status for an answer: 1 when Steward refuses some
// of the job's meta or a group can never run as asked.
func checkExit(res *controller.CheckResult) int {
	if len(res.Problems) > 0 {
		return checkRefused
	}
	for _, g := range res.Groups {
		if g.Verdict == controller.VerdictWait && strings.Contains(g.Reason, "the largest node has") {
			return checkRefused
		}
	}
	return checkOK
}

// FormatCheck renders an answer as the nomad CLI renders its tables.
func FormatCheck(r *controller.CheckResult) string {
	var b strings.Builder
	kv := columnize.DefaultConfig()
	kv.Glue = " = "
	tier := r.Tier
	if r.Requested == "" {
		tier += " (default: the job names no tier)"
	}
	prio := fmt.Sprint(r.Priority)
	if r.SpecPriority != r.Priority {
		prio += fmt.Sprintf(" (the jobspec says %d; Steward sets %d)", r.SpecPriority, r.Priority)
	}
	signal, grace := "none (stopped without grace)", "-"
	if r.CheckpointSignal != "" {
		signal, grace = r.CheckpointSignal, r.Grace.String()
	}
	b.WriteString(columnize.Format([]string{
		"Job|" + r.Namespace + "/" + r.Job,
		"Tenant|" + r.Tenant,
		"Tier|" + tier,
		"Priority|" + prio,
		fmt.Sprintf("Gang|%t", r.Gang),
		"Checkpoint Signal|" + signal,
		"Grace|" + grace,
	}, kv) + "\n")
	if len(r.Problems) > 0 {
		b.WriteString("\nRefused Meta\n")
		for _, p := range r.Problems {
			b.WriteString("  " + p + "\n")
		}
	}
	b.WriteString("\nIf Submitted Now\n")
	rows := []string{"Group|Allocs|GPUs Each|Verdict|Reason"}
	for _, g := range r.Groups {
		rows = append(rows, fmt.Sprintf("%s|%d|%d|%s|%s", g.Group, g.Count, g.GPUsPerAlloc, g.Verdict, g.Reason))
	}
	b.WriteString(columnize.SimpleFormat(rows) + "\n")
	for _, g := range r.Groups {
		if len(g.Victims) > 0 {
			fmt.Fprintf(&b, "\nPreempted for group %s\n", g.Group)
			rows := []string{"Job|Tenant|Tier|GPUs|Signal|Grace|Reason"}
			for _, v := range g.Victims {
				job := v.Job
				if job == "" {
					job = "(another tenant's job)"
				}
				sig, gr := v.Signal, v.Grace.String()
				if sig == "" {
					sig, gr = "-", "-"
				}
				rows = append(rows, fmt.Sprintf("%s|%s|%s|%d|%s|%s|%s", job, v.Tenant, v.Tier, v.GPUs, sig, gr, v.Reason))
			}
			b.WriteString(columnize.SimpleFormat(rows) + "\n")
		}
		if g.Nomad != "" {
			fmt.Fprintf(&b, "\nGroup %s: %s\n", g.Group, g.Nomad)
		}
	}
	fmt.Fprintf(&b, "\nChecked by %s against the cluster as read at %s.", r.Leader, r.At.Local().Format(time.DateTime))
	return b.String()
}

// tokenTransportOK refuses to send a token where others could read it: in
// cleartext (http) to anything but a loopback address. The address comes
// from a variable the leader publishes, so a controller that moved, or a
// process that took its old port, must not collect tokens.
func tokenTransportOK(addr, token string) error {
	u, err := url.Parse(addr)
	if err != nil || u.Host == "" {
		return fmt.Errorf("controller address %q: want http(s)://HOST:PORT", addr)
	}
	switch {
	case u.Scheme == "https":
		return nil
	case u.Scheme != "http":
		return fmt.Errorf("controller address %q: want http(s)://HOST:PORT", addr)
	case token == "" || controller.IsLoopback(u.Host):
		return nil
	}
	return fmt.Errorf("refusing to send your Nomad token in cleartext to %s, which is not loopback: "+
		"the controller must serve checks over TLS (steward controller -tls-cert/-tls-key; see docs/reference/controller.md)", addr)
}

// checkHTTPClient is the client that asks the controller: TLS verified
// against caFile (else the system's roots), and no redirects, which would
// carry the token header to wherever they point.
func checkHTTPClient(caFile string) (*http.Client, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("read -controller-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-controller-ca %s: no PEM certificate in it", caFile)
		}
		tc.RootCAs = pool
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tc
	return &http.Client{Timeout: 30 * time.Second, Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return fmt.Errorf("the controller answered with a redirect: not followed (it would carry your token)")
		}}, nil
}

// publishedAddrOK refuses a loopback check address the leader published
// when Nomad itself is not on this machine: that loopback is the
// controller's node's, and here whatever listens on that port (any local
// user's process) would get the token.
func publishedAddrOK(checkAddr, nomadAddr string) error {
	cu, err := url.Parse(checkAddr)
	if err != nil || !controller.IsLoopback(cu.Host) {
		return nil
	}
	nu, err := url.Parse(nomadAddr)
	if err == nil && (nu.Scheme == "unix" || controller.IsLoopback(nu.Host)) {
		return nil
	}
	return fmt.Errorf("the leader serves checks on its node's loopback (%s), not reachable from here: "+
		"run the check on that node, or ask the operator for a TLS check listener (give -controller URL to override)", checkAddr)
}
