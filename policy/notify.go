package policy

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/zclconf/go-cty/cty"
)

// Notify is a webhook: decisions about jobs (the events it names, for the
// tenants it names) are POSTed to it as JSON. The policy file is the
// operator's: only an operator says where a team's decisions go. A block
// with no tenants receives every tenant's decisions, so it belongs to a
// receiver the operator controls; a team's own receiver gets a block
// naming that team alone.
type Notify struct {
	Name string
	// URL is where messages are POSTed; "" when URLEnv names an
	// environment variable of the controller that holds it (a URL that
	// is itself a secret, as chat webhooks are).
	URL    string
	URLEnv string
	// Events it receives (NotifyEvents); empty: every event.
	Events []string
	// Tenants whose jobs' decisions it receives, by tenant name; empty:
	// every tenant, namespaces no tenant names included.
	Tenants []string
	// UIURL is the Nomad UI's base address for the links in messages
	// ("https://nomad.example.com"); "": the controller's -ui-url, else
	// the Nomad address it talks to.
	UIURL string
	// HeadersFromEnv maps a request header to the controller's
	// environment variable holding its value, so that secrets stay out of
	// the policy file.
	HeadersFromEnv map[string]string
	// Timeout bounds one attempt; Attempts is how many are made before a
	// message is given up.
	Timeout  time.Duration
	Attempts int
	// PerJob makes the block a per-user channel: it takes only jobs that
	// name a recipient in their meta (RecipientMetaKey), and each message
	// carries that recipient as data ("recipient" in the body, and
	// RecipientHeader's value when set). The recipient never changes where
	// the message goes: the URL is the operator's.
	PerJob bool
	// RecipientHeader, with PerJob, is a request header the operator
	// names that carries the recipient ("X-Steward-Recipient"); "": the
	// body alone.
	RecipientHeader string
	// Recipients, with PerJob, is a pattern every recipient must match as
	// a whole (an allowlist: `[a-z0-9.-]+@example\.com`); "": any
	// recipient of the allowed characters (ValidRecipient).
	Recipients string
}

// RecipientMetaKey is the job meta key that names the job's recipient
// for per-job notify blocks (Notify.PerJob).
const RecipientMetaKey = "steward.notify"

// RecipientMax bounds a recipient's length.
const RecipientMax = 128

// validRecipient is the characters a recipient may have: an address, a
// user or a channel name ("ada@example.com", "ada", "#ml-team"), nothing
// that could end a header or a line.
var validRecipient = regexp.MustCompile(`^[A-Za-z0-9#@][A-Za-z0-9._@+#-]*$`)

// ValidRecipient reports why a job's recipient is refused ("" when it is
// not): at most RecipientMax bytes of letters, digits and . _ @ + # -.
func ValidRecipient(r string) string {
	switch {
	case r == "":
		return "empty"
	case len(r) > RecipientMax:
		return fmt.Sprintf("%d bytes, over %d", len(r), RecipientMax)
	case !validRecipient.MatchString(r):
		return "only letters, digits and . _ @ + # - are allowed, starting with a letter, a digit, # or @"
	}
	return ""
}

// Takes reports whether a per-job block takes a (valid) recipient: it
// matches the block's Recipients pattern, or the block has none.
func (n *Notify) Takes(recipient string) bool {
	if !n.PerJob || ValidRecipient(recipient) != "" {
		return false
	}
	if n.Recipients == "" {
		return true
	}
	// Compiled per call (few messages; nothing cached in a policy that
	// several goroutines read). A pattern the checker refused takes none.
	re, err := regexp.Compile(`^(?:` + n.Recipients + `)$`)
	return err == nil && re.MatchString(recipient)
}

// Notification events: what a message is about.
const (
	NotifyPreempt     = "preempt"      // work preempted (checkpointed and held) for other work or a limit
	NotifyMigrate     = "migrate"      // work preempted to resume at once on free GPUs elsewhere
	NotifyHold        = "hold"         // waiting work held back by Steward
	NotifyResume      = "resume"       // held work given back to Nomad to place
	NotifyMove        = "move"         // waiting work sent to another node pool (pool precedence)
	NotifyIdleReclaim = "idle_reclaim" // an idle rule released the job's GPUs
	NotifyIdleWarning = "idle_warning" // an idle rule will release them in warn_before
	NotifyPromote     = "promote"      // a starved job's priority raised
	NotifyStart       = "start"        // the job's GPU work started running
	NotifyFinish      = "finish"       // the job's GPU work ended (completed or stopped)
)

// NotifyEvents lists every notification event.
func NotifyEvents() []string {
	return []string{NotifyPreempt, NotifyMigrate, NotifyHold, NotifyResume, NotifyMove, NotifyIdleReclaim,
		NotifyIdleWarning, NotifyPromote, NotifyStart, NotifyFinish}
}

// Wants reports whether the webhook receives event about a job of tenant
// (a tenant's name: the block label, or the namespace of one no tenant
// names).
//
// start and finish go only to blocks that list them: a block that takes
// every event (events = []) is not sent every job's start.
func (n *Notify) Wants(event, tenant string) bool {
	listed := slices.Contains(n.Events, event)
	if (event == NotifyStart || event == NotifyFinish) && !listed {
		return false
	}
	return (len(n.Events) == 0 || listed) &&
		(len(n.Tenants) == 0 || slices.Contains(n.Tenants, tenant))
}

// NotifyByName returns the notify block with the name, or nil.
func (p *Policy) NotifyByName(name string) *Notify {
	for _, n := range p.Notify {
		if n != nil && n.Name == name {
			return n
		}
	}
	return nil
}

var notifySchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
	{Name: "url"}, {Name: "url_env"}, {Name: "events"}, {Name: "tenants"}, {Name: "ui_url"},
	{Name: "headers_from_env"}, {Name: "timeout"}, {Name: "attempts"},
	{Name: "per_job"}, {Name: "recipient_header"}, {Name: "recipients"},
}}

func (d *decoder) notify(b *hcl.Block, name string) {
	a, _ := d.attrs(b, name, notifySchema)
	defer d.done(a)
	n := &Notify{Name: name, Timeout: DefaultNotifyTimeout, Attempts: DefaultNotifyAttempts}
	a.str("url", &n.URL)
	a.str("url_env", &n.URLEnv)
	a.strings("events", &n.Events)
	a.strings("tenants", &n.Tenants)
	a.str("ui_url", &n.UIURL)
	a.stringMap("headers_from_env", &n.HeadersFromEnv)
	a.duration("timeout", &n.Timeout)
	a.integer("attempts", &n.Attempts)
	a.boolean("per_job", &n.PerJob)
	a.str("recipient_header", &n.RecipientHeader)
	a.str("recipients", &n.Recipients)
	d.pol.Notify = append(d.pol.Notify, n)
}

var (
	// validEnvName is a POSIX environment variable name.
	validEnvName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	// validHeaderName is an HTTP field name (RFC 9110 token).
	validHeaderName = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
)

// reservedHeaders are set by Steward on every message.
var reservedHeaders = []string{"Content-Type", "Content-Length", "Host", "Idempotency-Key", "User-Agent"}

func (c *checker) notifies() {
	seen := map[string]bool{}
	for _, n := range c.p.Notify {
		if n == nil {
			c.errorf(where{block: blockNotify}, "Nil notify", "Policy.Notify holds a nil webhook.")
			continue
		}
		at := func(attr string) where { return whereAttr(blockNotify, n.Name, attr) }
		switch {
		case n.Name == "":
			c.errorf(at(""), "Empty notify name", "A notify block needs a non-empty name.")
		case seen[n.Name]:
			c.errorf(at(""), "Duplicate notify", "Notify %q is defined more than once.", n.Name)
		}
		seen[n.Name] = true
		switch {
		case n.URL == "" && n.URLEnv == "":
			c.errorf(at(""), "No webhook URL", "Notify %q needs url, or url_env naming the controller's environment variable that holds it.", n.Name)
		case n.URL != "" && n.URLEnv != "":
			c.errorf(at("url_env"), "Two webhook URLs", "Notify %q has url and url_env: give one.", n.Name)
		case n.URL != "":
			if err := CheckWebhookURL(n.URL); err != nil {
				c.errorf(at("url"), "Invalid webhook URL", "The url of notify %q: %v.", n.Name, err)
			}
		case !validEnvName.MatchString(n.URLEnv):
			c.errorf(at("url_env"), "Invalid environment variable name",
				"url_env of notify %q is %q: name an environment variable (letters, digits and underscores, not starting with a digit).", n.Name, n.URLEnv)
		}
		if n.UIURL != "" {
			if err := CheckWebhookURL(n.UIURL); err != nil {
				c.errorf(at("ui_url"), "Invalid UI address", "The ui_url of notify %q: %v.", n.Name, err)
			}
		}
		c.notifyEvents(at("events"), n.Events)
		c.refs(at("tenants"), blockTenant, n.Tenants, keys(c.p.Tenants))
		c.headers(n, at("headers_from_env"))
		if n.Timeout <= 0 {
			c.errorf(at("timeout"), "Invalid timeout", "The timeout of notify %q must be more than 0; got %q.", n.Name, FormatDuration(n.Timeout))
		}
		if n.Attempts < 1 {
			c.errorf(at("attempts"), "Invalid attempts", "attempts of notify %q must be 1 or more; got %d.", n.Name, n.Attempts)
		}
		c.perJob(n, at)
	}
}

func (c *checker) notifyEvents(at where, events []string) {
	known := NotifyEvents()
	seen := map[string]bool{}
	for i, e := range events {
		switch {
		case !slices.Contains(known, e):
			c.errorf(at.at(i), "Unknown event", "There is no event %q; events are %s.%s", e, strings.Join(known, ", "), didYouMean(e, known))
		case seen[e]:
			c.warnf(at.at(i), "Repeated event", "Event %q is listed more than once.", e)
		}
		seen[e] = true
	}
}

func (c *checker) headers(n *Notify, at where) {
	names := make([]string, 0, len(n.HeadersFromEnv))
	for h := range n.HeadersFromEnv {
		names = append(names, h)
	}
	sort.Strings(names)
	for _, h := range names {
		env := n.HeadersFromEnv[h]
		switch {
		case !validHeaderName.MatchString(h):
			c.errorf(at, "Invalid header name", "headers_from_env of notify %q names header %q, which is not an HTTP header name.", n.Name, h)
		case slices.ContainsFunc(reservedHeaders, func(r string) bool { return strings.EqualFold(r, h) }):
			c.errorf(at, "Reserved header", "headers_from_env of notify %q sets %s, which Steward sets itself (%s).",
				n.Name, h, strings.Join(reservedHeaders, ", "))
		}
		if !validEnvName.MatchString(env) {
			c.errorf(at, "Invalid environment variable name",
				"headers_from_env of notify %q reads header %s from %q: name an environment variable (letters, digits and underscores, not starting with a digit).",
				n.Name, h, env)
		}
	}
}

// CheckWebhookURL checks an address messages or links may use: http or
// https, with a host, and no credentials in it (a policy file is no place
// for secrets: use url_env or headers_from_env).
func CheckWebhookURL(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return fmt.Errorf("%q is not a URL", raw)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%q must start with http:// or https://", raw)
	case u.Host == "":
		return fmt.Errorf("%q names no host", raw)
	case u.User != nil:
		return fmt.Errorf("%q holds credentials: keep them out of the policy (url_env, headers_from_env)", u.Redacted())
	}
	return nil
}

// formatNotify writes notify blocks for Format.
func formatNotify(root *hclwrite.Body, p *Policy) {
	for _, n := range p.Notify {
		root.AppendNewline()
		b := root.AppendNewBlock(blockNotify, []string{n.Name}).Body()
		if len(n.Events) == 0 {
			comment(b, "events = [] sends every event.")
		}
		if len(n.Tenants) == 0 {
			comment(b, "tenants = [] sends every tenant's decisions.")
		}
		if n.UIURL == "" {
			comment(b, "ui_url is left out: the controller's -ui-url, else its Nomad address.")
		}
		if n.URLEnv != "" {
			setString(b, "url_env", n.URLEnv)
		} else {
			setString(b, "url", n.URL)
		}
		setStrings(b, "events", n.Events)
		setStrings(b, "tenants", n.Tenants)
		if n.UIURL != "" {
			setString(b, "ui_url", n.UIURL)
		}
		if len(n.HeadersFromEnv) > 0 {
			m := map[string]cty.Value{}
			for h, env := range n.HeadersFromEnv {
				m[h] = cty.StringVal(env)
			}
			b.SetAttributeValue("headers_from_env", cty.MapVal(m))
		}
		setString(b, "timeout", FormatDuration(n.Timeout))
		b.SetAttributeValue("attempts", cty.NumberIntVal(int64(n.Attempts)))
		if n.PerJob {
			b.SetAttributeValue("per_job", cty.True)
			if n.RecipientHeader != "" {
				setString(b, "recipient_header", n.RecipientHeader)
			}
			if n.Recipients != "" {
				setString(b, "recipients", n.Recipients)
			}
		}
	}
}

// perJob checks a per-job block's recipient header and pattern.
func (c *checker) perJob(n *Notify, at func(string) where) {
	if !n.PerJob {
		if n.RecipientHeader != "" {
			c.errorf(at("recipient_header"), "Recipient header without per_job", "recipient_header of notify %q needs per_job = true.", n.Name)
		}
		if n.Recipients != "" {
			c.errorf(at("recipients"), "Recipients without per_job", "recipients of notify %q needs per_job = true.", n.Name)
		}
		return
	}
	if h := n.RecipientHeader; h != "" {
		_, set := n.HeadersFromEnv[h]
		for k := range n.HeadersFromEnv {
			set = set || strings.EqualFold(k, h)
		}
		switch {
		case !validHeaderName.MatchString(h):
			c.errorf(at("recipient_header"), "Invalid header name", "recipient_header of notify %q is %q, which is not an HTTP header name.", n.Name, h)
		case slices.ContainsFunc(reservedHeaders, func(r string) bool { return strings.EqualFold(r, h) }) || strings.EqualFold(h, "Authorization"):
			c.errorf(at("recipient_header"), "Reserved header", "recipient_header of notify %q is %s, which a job must not set (%s, Authorization).",
				n.Name, h, strings.Join(reservedHeaders, ", "))
		case set:
			c.errorf(at("recipient_header"), "Header set twice", "recipient_header of notify %q is %s, which headers_from_env sets too.", n.Name, h)
		}
	}
	if n.Recipients != "" {
		if _, err := regexp.Compile(`^(?:` + n.Recipients + `)$`); err != nil {
			c.errorf(at("recipients"), "Invalid recipients pattern", "recipients of notify %q is not a regular expression: %v.", n.Name, err)
		}
	}
}
