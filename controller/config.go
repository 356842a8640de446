package controller

import (
	"fmt"
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
	// StatsInterval is how often GPU activity is read from each client.
	StatsInterval time.Duration
	// Debounce gathers a burst of events into one decision.
	Debounce time.Duration
	// StateNamespace holds every job's state, the leader lock and the
	// status: a namespace of Steward's own, where no tenant's token may
	// write. It must exist (the controller does not create it).
	StateNamespace string
	// LockTTL and LockDelay tune leader election (Nomad variable lock):
	// a leader that vanishes is replaced after about TTL+delay.
	LockTTL   time.Duration
	LockDelay time.Duration
	// JobRecords writes each decision into the job's own variable
	// nomad/jobs/<job>, which the Nomad UI shows on the job's page and
	// its tasks can read. Merging into that variable needs read access to
	// it, where jobs may keep secrets: turning records off drops that need.
	JobRecords bool
	// Pprof also serves Go's profiler at /debug/pprof/ on Listen.
	Pprof bool
	// Listen is the address of /metrics, /healthz and /v1/job/check (""
	// turns them off).
	Listen string
	// UIURL is the Nomad UI's address for links in webhook messages,
	// unless a notify block sets its own; "" uses the Nomad address.
	UIURL string
	// Advertise is the URL at which people's `steward job check` reaches
	// this controller, published in the status; "" publishes the listen
	// address.
	Advertise string
	// MaxBackoff caps the wait between retries while Nomad is unreachable.
	MaxBackoff time.Duration
	// CallTimeout is the deadline of every Nomad request the controller
	// makes (the event stream's excepted): a hung request fails by then.
	CallTimeout time.Duration
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

// DefaultConfig returns the defaults documented in README.
func DefaultConfig() Config {
	return Config{
		Resync:         30 * time.Second,
		StatsInterval:  10 * time.Second,
		Debounce:       5 * time.Millisecond,
		StateNamespace: DefaultStateNamespace,
		JobRecords:     true,
		LockTTL:        15 * time.Second,
		LockDelay:      15 * time.Second,
		Listen:         "127.0.0.1:9646",
		MaxBackoff:     30 * time.Second,
		CallTimeout:    30 * time.Second,
		RoundTimeout:   2 * time.Minute,
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
	case c.LockTTL < 10*time.Second:
		return fmt.Errorf("lock TTL %s: Nomad accepts 10s at least", c.LockTTL)
	case c.LockDelay < 0:
		return fmt.Errorf("lock delay %s: must not be negative", c.LockDelay)
	case c.CallTimeout <= 0:
		return fmt.Errorf("nomad timeout %s: must be positive", c.CallTimeout)
	case c.RoundTimeout <= c.CallTimeout:
		return fmt.Errorf("round timeout %s: must be longer than the Nomad timeout %s (one hung call must not end a term)", c.RoundTimeout, c.CallTimeout)
	}
	if c.UIURL != "" {
		if err := policy.CheckWebhookURL(c.UIURL); err != nil {
			return fmt.Errorf("ui url: %w", err)
		}
	}
	return nil
}
