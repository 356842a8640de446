package controller

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/gpu-steward/steward/policy"
)

// Config is how the controller runs. Connection settings (address, token,
// TLS, region) come from the environment, as for the nomad CLI.
type Config struct {
	// PolicyFiles are parsed and merged; SIGHUP reloads them.
	PolicyFiles []string
	// DryRun plans and logs but changes nothing in Nomad.
	DryRun bool
	// Resync is the period of a full read of the cluster regardless of
	// events (the event stream replays only the last 100 events, so a gap
	// must never lose state).
	Resync time.Duration
	// StatsInterval is how often GPU activity is read: from each
	// covered client, or with one Prometheus query.
	StatsInterval time.Duration
	// ActivitySource is where GPU activity is read: ActivityNomad (each
	// covered node's host stats; "" too) or ActivityPrometheus (one
	// query per interval, Prometheus; activity_prometheus.go).
	ActivitySource string
	Prometheus     PrometheusConfig
	// Debounce gathers a burst of events into one decision.
	Debounce time.Duration
	// StateNamespace holds every job's state, the leader lock and the
	// status: a namespace of Steward's own, where no tenant's token may
	// write. It must exist (the controller does not create it).
	StateNamespace string
	// LockTTL and LockDelay tune leader election (Nomad variable lock):
	// a leader that vanishes is replaced after about 2×TTL+delay.
	LockTTL   time.Duration
	LockDelay time.Duration
	// Election is how copies elect their leader: ElectionLock (a Nomad
	// variable lock, whose TTL Nomad keeps at 10 s at least) or
	// ElectionLease (a lease Steward keeps in a variable itself, check-
	// and-set, with any TTL of a second or more: leader_lease.go).
	Election string
	// JobRecords writes each decision into the job's own variable
	// nomad/jobs/<job>, which the Nomad UI shows on the job's page and
	// its tasks can read. Merging into that variable needs read access to
	// it, where jobs may keep secrets: turning records off drops that need.
	JobRecords bool
	// Pprof also serves Go's profiler at /debug/pprof/ on Listen.
	Pprof bool
	// Listen is the address of /metrics, /healthz and, unless
	// CheckListen is set, /v1/job/check ("" turns them off).
	Listen string
	// CheckListen, when set, serves /v1/job/check alone, apart from
	// Listen (which may then stay on loopback).
	CheckListen string
	// TLSCert and TLSKey (PEM files, the operator's) put TLS on the
	// listener that serves /v1/job/check: checks carry callers' Nomad
	// tokens, so one off loopback must have them (Validate).
	TLSCert, TLSKey string
	// CheckConcurrency, CheckRate (per token, a second), CheckBurst and
	// CheckMaxBody (bytes) bound `steward job check` (checkguard.go).
	CheckConcurrency int
	CheckRate        float64
	CheckBurst       int
	CheckMaxBody     int64
	// UIURL is the Nomad UI's address for links in webhook messages,
	// unless a notify block sets its own; "" uses the Nomad address.
	UIURL string
	// Advertise is the URL at which people's `steward job check` reaches
	// this controller, published in the status; "" publishes the listen
	// address.
	Advertise string
	// MaxBackoff caps the wait between retries while Nomad is unreachable.
	MaxBackoff time.Duration
	// ActInFlight is how many of a plan's actions, each for a different
	// job, are carried out at once (actplan.go); 1: one after another.
	ActInFlight int
	// CallTimeout is the deadline of every Nomad request the controller
	// makes (the event stream's excepted): a hung request fails by then.
	CallTimeout time.Duration
	// WrittenPoll is how often the leader reads the checkpoint-written
	// files of victims in their grace (written_poll.go); 0: never (tasks
	// then stop early only through steward-exec's events).
	WrittenPoll time.Duration
	// RoundTimeout bounds a lead term without a finished round: a leader
	// that has not completed one for this long (a hung or failing Nomad
	// call every time) steps down and releases its lock, so that another
	// copy can act.
	RoundTimeout time.Duration
	// Identity names this controller in the leader record and in logs.
	Identity string
	// Consul, when set, elects the leader with a Consul session lock
	// instead of a Nomad variable lock.
	Consul *ConsulConfig
	// ControllerPools are the node pools of the controller's own nodes.
	// Nomad CE checks no node_pool rule when a job is registered (node
	// pool governance is Enterprise's), so any token that may submit jobs
	// may name them, or "all": Steward holds every such job outside its
	// own namespace (poolguard.go). Empty: no pool is guarded.
	ControllerPools []string
	// PlaceholderImage is the image a placeholder runs under docker, on a
	// node with neither steward-exec nor raw_exec: one the nodes have
	// already, with a shell and sleep; it is never pulled.
	PlaceholderImage string
	// Traffic, when set, counts the API client's traffic (its transport
	// wrapped with Traffic.Wrap), exported as metrics.
	Traffic *Traffic
}

// ConsulConfig is the Consul agent used for leader election. The token
// comes from CONSUL_HTTP_TOKEN, as for the consul CLI.
type ConsulConfig struct {
	Address string // e.g. "127.0.0.1:8500"; "" uses CONSUL_HTTP_ADDR
	// LockKey is the KV key of the lock (default "steward/leader").
	LockKey string
}

// DefaultStateNamespace is the namespace of Steward's own state.
const DefaultStateNamespace = "steward"

// DefaultConfig returns the defaults documented in docs/reference/controller.md.
func DefaultConfig() Config {
	return Config{
		Resync:         30 * time.Second,
		StatsInterval:  10 * time.Second,
		ActivitySource: ActivityNomad,
		Prometheus:     DefaultPrometheusConfig(),
		Debounce:       5 * time.Millisecond,
		StateNamespace: DefaultStateNamespace,
		JobRecords:     true,
		LockTTL:        15 * time.Second,
		LockDelay:      15 * time.Second,
		Election:       ElectionLock,
		Listen:         "127.0.0.1:9646",
		MaxBackoff:     30 * time.Second,
		CallTimeout:    30 * time.Second,
		ActInFlight:    actInFlight,
		WrittenPoll:    DefaultWrittenPoll,
		RoundTimeout:   2 * time.Minute,

		PlaceholderImage: DefaultPlaceholderImage,

		CheckConcurrency: 4,
		CheckRate:        1,
		CheckBurst:       5,
		CheckMaxBody:     1 << 20,
	}
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	switch {
	case len(c.PolicyFiles) == 0:
		return fmt.Errorf("no policy file: give -policy FILE")
	case c.Resync <= 0:
		return fmt.Errorf("resync %s: must be positive", c.Resync)
	case c.StatsInterval <= 0:
		return fmt.Errorf("stats interval %s: must be positive", c.StatsInterval)
	case c.Election != "" && c.Election != ElectionLock && c.Election != ElectionLease:
		return fmt.Errorf("election %q: want %q (a Nomad variable lock) or %q (a lease in a variable)", c.Election, ElectionLock, ElectionLease)
	case c.Election == ElectionLease && c.Consul != nil:
		return fmt.Errorf("election %q keeps its lease in Nomad: not with a Consul address", ElectionLease)
	case c.Election == ElectionLease && c.LockTTL < time.Second:
		return fmt.Errorf("lock TTL %s: the lease needs 1s at least", c.LockTTL)
	case c.Election != ElectionLease && c.LockTTL < 10*time.Second:
		return fmt.Errorf("lock TTL %s: Nomad accepts 10s at least (a shorter TTL needs -election %s)", c.LockTTL, ElectionLease)
	case c.LockDelay < 0:
		return fmt.Errorf("lock delay %s: must not be negative", c.LockDelay)
	case c.ActInFlight < 0:
		return fmt.Errorf("actions in flight %d: must not be negative (0 or 1: one after another)", c.ActInFlight)
	case c.CallTimeout <= 0:
		return fmt.Errorf("nomad timeout %s: must be positive", c.CallTimeout)
	case c.RoundTimeout <= c.CallTimeout:
		return fmt.Errorf("round timeout %s: must be longer than the Nomad timeout %s (one hung call must not end a term)", c.RoundTimeout, c.CallTimeout)
	}
	if err := c.validateCheck(); err != nil {
		return err
	}
	switch c.ActivitySource {
	case "", ActivityNomad:
	case ActivityPrometheus:
		if err := c.Prometheus.validate(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("-activity-source %q: want %s or %s", c.ActivitySource, ActivityNomad, ActivityPrometheus)
	}
	if err := validateControllerPools(c.ControllerPools); err != nil {
		return err
	}
	if c.PlaceholderImage != "" { // "": DefaultPlaceholderImage
		if err := validPlaceholderImage(c.PlaceholderImage); err != nil {
			return err
		}
	}
	if c.UIURL != "" {
		if err := policy.CheckWebhookURL(c.UIURL); err != nil {
			return fmt.Errorf("ui url: %w", err)
		}
	}
	return nil
}

// validateCheck refuses to serve checks, which carry callers' Nomad
// tokens, in cleartext off loopback, and bounds that cannot bound.
func (c Config) validateCheck() error {
	switch {
	case c.CheckConcurrency < 1:
		return fmt.Errorf("check concurrency %d: must be at least 1", c.CheckConcurrency)
	case c.CheckRate <= 0 || c.CheckBurst < 1:
		return fmt.Errorf("check rate %g a second, burst %d: both must be positive", c.CheckRate, c.CheckBurst)
	case c.CheckMaxBody < 1:
		return fmt.Errorf("check body limit %d bytes: must be positive", c.CheckMaxBody)
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return fmt.Errorf("-tls-cert and -tls-key go together: give both or neither")
	}
	if c.Advertise != "" {
		u, err := url.Parse(c.Advertise)
		switch {
		case err != nil || u.Host == "" || u.Scheme != "http" && u.Scheme != "https":
			return fmt.Errorf("-advertise %q: want http(s)://HOST:PORT", c.Advertise)
		case u.Scheme == "http" && !IsLoopback(u.Host):
			return fmt.Errorf("-advertise %s: checks carry callers' Nomad tokens, and steward job check sends them in cleartext to loopback only: advertise an https URL", c.Advertise)
		}
	}
	flag, addr := "-listen", c.Listen
	if c.CheckListen != "" {
		flag, addr = "-check-listen", c.CheckListen
	}
	if addr == "" || c.TLSCert != "" || IsLoopback(addr) {
		return nil
	}
	return fmt.Errorf("%s %s serves /v1/job/check off loopback without TLS, and every check carries its caller's Nomad token: "+
		"give -tls-cert and -tls-key, or serve checks on loopback", flag, addr)
}

// IsLoopback reports whether a host:port (or a URL's host) names only
// this machine: a loopback IP or "localhost". An empty host (":9646")
// listens on every interface, so it is not.
func IsLoopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// validateControllerPools refuses controller pools that would hold every
// tenant's work: "default" (where a job that names no pool goes) and
// "all" (every node). The controller's nodes must be a pool of their own.
func validateControllerPools(pools []string) error {
	for _, p := range pools {
		switch p {
		case "":
			return fmt.Errorf("-controller-pool: empty node pool name")
		case "default", "all":
			return fmt.Errorf("-controller-pool %s: Steward would hold every tenant's job there; run the controller on nodes of a node pool of their own (docs/install.md)", p)
		}
	}
	return nil
}
