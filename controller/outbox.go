package controller

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

// The outbox: a message about a decision is saved in the job's state in
// the same write as the decision (before Nomad is asked to act), queued to
// the notifier, and removed once sent. A controller that restarts, or a
// new leader, finds what was not sent in the states it loads and sends it;
// a message is never queued twice by one controller. Between a receiver
// taking a message and the state being saved without it lies a window in
// which a crash sends it again: the Idempotency-Key header (the decision's
// ID) lets the receiver drop that repeat.

// outbox keeps the messages about decisions (Notice) in the jobs' states
// and hands them to the notifier: attachNotice and addNotice as the actor
// decides, sendOutbox each round, flushOutbox at the end of a term. It is
// given the store the messages are saved through, the usage store and the
// policy in force (to redact other tenants' jobs), and the API client
// (for the UI's address); the notifier is nil in a dry run.
type outbox struct {
	wiring
	store     *stateStore
	usage     *usageStore
	client    *api.Client
	engineNow func() (*policy.Policy, *engine.Engine)
	notifier  *notifier
}

// Notice is one decision's message, waiting in the job's state for the
// notify blocks in To.
type Notice struct {
	ID     string    `json:"id"` // the decision's ID, the Idempotency-Key
	To     []string  `json:"to"` // notify blocks still to send it to
	Event  string    `json:"event"`
	Action string    `json:"action"`
	At     time.Time `json:"at"`
	Group  string    `json:"group,omitempty"`
	GPUs   int       `json:"gpus,omitempty"`
	Tenant string    `json:"tenant,omitempty"`
	Tier   string    `json:"tier,omitempty"`
	Rule   string    `json:"rule,omitempty"`
	Reason string    `json:"reason"`
	// ReclaimAt: an idle warning's release time.
	ReclaimAt time.Time `json:"reclaim_at,omitzero"`
	// Recipient is the job's recipient (steward.notify, validated when
	// the decision was made) for the per-job blocks in To.
	Recipient string `json:"recipient,omitempty"`
}

// Message is the JSON a webhook receives.
type Message struct {
	ID        string     `json:"id"`
	Event     string     `json:"event"`
	Action    string     `json:"action"`
	Time      time.Time  `json:"time"`
	Job       MessageJob `json:"job"`
	Tenant    string     `json:"tenant,omitempty"`
	Tier      string     `json:"tier,omitempty"`
	GPUs      int        `json:"gpus,omitempty"`
	Rule      string     `json:"rule,omitempty"`
	Reason    string     `json:"reason"`
	ReclaimAt *time.Time `json:"reclaim_at,omitempty"`
	UIURL     string     `json:"ui_url"`
	Notify    string     `json:"notify"`
	// Recipient is who the job's owner asked a per-job block to tell
	// (its meta steward.notify): data for the receiver, never an address.
	Recipient string `json:"recipient,omitempty"`
	// Text is the message in one line, for chat tools that show only a
	// "text" field.
	Text string `json:"text"`
}

// MessageJob names the job a message is about.
type MessageJob struct {
	Namespace string `json:"namespace"`
	ID        string `json:"id"`
	Group     string `json:"group,omitempty"`
}

// eventOf is the notification event of an action; "" for actions no one
// is told about (a priority set back to its tier's).
func eventOf(a engine.Action) string {
	switch a.Kind {
	case engine.Preempt:
		if a.MoveTo != "" {
			return policy.NotifyMigrate
		}
		return policy.NotifyPreempt
	case engine.IdleStop:
		return policy.NotifyIdleReclaim
	case engine.Hold:
		return policy.NotifyHold
	case engine.Resume:
		return policy.NotifyResume
	case engine.Move:
		return policy.NotifyMove
	case engine.Promote:
		return policy.NotifyPromote
	}
	return ""
}

// idleWarningAction is the action name of an idle warning in messages and
// the decision log.
const idleWarningAction = "idle-warning"

// newDecisionID names a decision: its time and random bits, so that two
// controllers (an old leader and a new one) never make the same.
func newDecisionID(at time.Time) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "d-" + strconv.FormatInt(at.UnixNano(), 16) + "-" + hex.EncodeToString(b[:])
}

// noticeFor is the message about a decision for the notify blocks that
// take its event for the job's tenant; nil when none does.
func noticeFor(pol *policy.Policy, job *ObservedJob, event, action, group string, gpus int, why engine.Reason, at time.Time) *Notice {
	if event == "" || job == nil || len(pol.Notify) == 0 {
		return nil
	}
	set := pol.ResolveJob(job.Namespace, job.Meta)
	var to []string
	for _, n := range pol.Notify {
		// A per-job block takes only jobs naming a recipient it allows.
		if n.Wants(event, set.Tenant.Name) && (!n.PerJob || n.Takes(set.Recipient)) {
			to = append(to, n.Name)
		}
	}
	if len(to) == 0 {
		return nil
	}
	return &Notice{ID: newDecisionID(at), To: to, Event: event, Action: action, At: at, Group: group, GPUs: gpus,
		Tenant: set.Tenant.Name, Tier: set.Tier, Rule: string(why.Rule), Reason: why.Message, Recipient: set.Recipient}
}

// attachNotice puts the round's pending message (the action being carried
// out) into the job's state, to be saved with the decision. Each branch of
// execute calls it just before the save that records its decision, so
// that an action that turns out to do nothing sends nothing.
func (o *outbox) attachNotice(r *round, st *JobState) {
	k := st.key()
	n := r.pending[k]
	if n == nil {
		return
	}
	o.addNotice(st, n)
	r.attached[k] = n
	delete(r.pending, k)
}

// maxOutbox bounds the messages one job's state keeps unsent: a receiver
// that is down for long while the job's decisions go on must not grow the
// state towards Nomad's variable size limit, where the state could no
// longer be written and decisions would stop.
const maxOutbox = 16

// addNotice puts a message in the job's outbox, giving up the oldest when
// it is full.
func (o *outbox) addNotice(st *JobState, n *Notice) {
	st.Outbox = append(st.Outbox, n)
	if over := len(st.Outbox) - maxOutbox; over > 0 {
		for _, old := range st.Outbox[:over] {
			o.log().Error("webhook messages of this job pile up unsent: the oldest is given up", "job", st.key(),
				"decision", old.ID, "event", old.Event, "notify", strings.Join(old.To, ","))
			if o.notifier != nil {
				for _, to := range old.To {
					o.notifier.metrics.failed.WithLabelValues(to).Inc()
				}
			}
		}
		st.Outbox = slices.Delete(st.Outbox, 0, over)
	}
}

// dropUnsaved takes the round's attached message out of the state again
// when the decision was not saved with it (the save failed): no decision
// was recorded, so none is reported.
func (o *outbox) dropUnsaved(st *JobState, n *Notice) {
	if n == nil || strings.Contains(o.store.saved[st.key()], `"`+n.ID+`"`) {
		return
	}
	st.Outbox = slices.DeleteFunc(st.Outbox, func(x *Notice) bool { return x == n })
}

// sendOutbox marks the messages the notifier is done with, and queues
// those not yet on their way. The states it changes are saved by flush.
func (o *outbox) sendOutbox(pol *policy.Policy) {
	if o.notifier == nil {
		return
	}
	o.markSent(o.notifier.takeFinished())
	for _, st := range o.store.states() {
		for _, n := range st.Outbox {
			for _, to := range slices.Clone(n.To) {
				k := noticeKey{job: st.key(), id: n.ID, to: to}
				if o.notifier.busy(k) {
					continue
				}
				d, err := o.delivery(pol, st.key(), n, to)
				if err != nil {
					o.log().Error("webhook message cannot be sent: dropped", "notify", to, "job", st.key(), "decision", n.ID, "error", err)
					o.markSent(map[noticeKey]bool{k: true})
					continue
				}
				o.notifier.enqueue(d)
			}
		}
	}
}

// markSent removes messages that are done with from the states' outboxes.
func (o *outbox) markSent(done map[noticeKey]bool) {
	for k := range done {
		st := o.store.states()[k.job]
		if st == nil {
			continue
		}
		for _, n := range st.Outbox {
			if n.ID == k.id {
				n.To = slices.DeleteFunc(n.To, func(to string) bool { return to == k.to })
			}
		}
		st.Outbox = slices.DeleteFunc(st.Outbox, func(n *Notice) bool { return len(n.To) == 0 })
	}
}

// flushOutbox marks what was sent and saves the states it changed: at the
// end of a lead term, so that the next leader does not send it again.
func (o *outbox) flushOutbox(ctx context.Context) {
	if o.notifier == nil {
		return
	}
	done := o.notifier.takeFinished()
	o.markSent(done)
	saved := map[jobKey]bool{}
	for k := range done {
		if st := o.store.states()[k.job]; st != nil && !saved[k.job] {
			saved[k.job] = true
			if err := o.store.save(ctx, st); err != nil {
				o.log().Warn("cannot mark webhook messages sent: the next leader sends them again", "job", k.job, "error", err)
			}
		}
	}
}

// delivery builds the request for a message to one notify block of the
// policy in force.
func (o *outbox) delivery(pol *policy.Policy, k jobKey, n *Notice, to string) (*delivery, error) {
	nb := pol.NotifyByName(to)
	if nb == nil {
		return nil, fmt.Errorf("the policy has no notify block %q any more", to)
	}
	target, headers, err := notifyEnv(nb)
	if err != nil {
		return nil, err
	}
	if nb.PerJob {
		// Checked again as it leaves: a state is the controller's, but a
		// policy reloaded since may allow less.
		if !nb.Takes(n.Recipient) {
			return nil, fmt.Errorf("notify %q does not take the job's recipient", nb.Name)
		}
		if nb.RecipientHeader != "" {
			headers[nb.RecipientHeader] = n.Recipient
		}
	}
	body, err := json.Marshal(o.message(nb, k, n))
	if err != nil {
		return nil, fmt.Errorf("encode message: %w", err)
	}
	return &delivery{key: noticeKey{job: k, id: n.ID, to: to}, url: target, headers: headers, body: body,
		timeout: nb.Timeout, attempts: nb.Attempts}, nil
}

// notifyEnv resolves a notify block's URL and headers from the
// controller's environment.
func notifyEnv(nb *policy.Notify) (string, map[string]string, error) {
	target := nb.URL
	if nb.URLEnv != "" {
		target = os.Getenv(nb.URLEnv)
		if target == "" {
			return "", nil, fmt.Errorf("notify %q: url_env %s is not set", nb.Name, nb.URLEnv)
		}
		if err := policy.CheckWebhookURL(target); err != nil {
			return "", nil, fmt.Errorf("notify %q: url_env %s: not a webhook URL (http or https, with a host, no credentials)", nb.Name, nb.URLEnv)
		}
	}
	headers := map[string]string{}
	for h, env := range nb.HeadersFromEnv {
		v, ok := os.LookupEnv(env)
		if !ok {
			return "", nil, fmt.Errorf("notify %q: headers_from_env %s: %s is not set", nb.Name, h, env)
		}
		headers[h] = v
	}
	return target, headers, nil
}

// checkNotifyEnv fails when a notify block's environment variables are not
// set: at start, and for a reloaded policy.
func checkNotifyEnv(p *policy.Policy) error {
	for _, nb := range p.Notify {
		if _, _, err := notifyEnv(nb); err != nil {
			return fmt.Errorf("%w%s", err, notifyEnvSkippedHint())
		}
	}
	return nil
}

// message is the JSON a receiver gets.
func (o *outbox) message(nb *policy.Notify, k jobKey, n *Notice) Message {
	reason := n.Reason
	if len(nb.Tenants) > 0 {
		// A block scoped to tenants reaches them: no other
		// namespace's job is named (redact.go).
		pol, _ := o.engineNow()
		reason = redactJobs(reason, k.Namespace, knownNamespaces(pol, o.usage, o.store))
	}
	m := Message{ID: n.ID, Event: n.Event, Action: n.Action, Time: n.At.UTC(),
		Job:    MessageJob{Namespace: k.Namespace, ID: k.ID, Group: n.Group},
		Tenant: n.Tenant, Tier: n.Tier, GPUs: n.GPUs, Rule: n.Rule, Reason: reason,
		UIURL: jobUIURL(o.uiBase(nb), k), Notify: nb.Name}
	if nb.PerJob {
		m.Recipient = n.Recipient
	}
	if !n.ReclaimAt.IsZero() {
		t := n.ReclaimAt.UTC()
		m.ReclaimAt = &t
	}
	what := k.Namespace + "/" + k.ID
	if n.Group != "" {
		what += "/" + n.Group
	}
	m.Text = fmt.Sprintf("%s %s: %s %s", what, strings.ReplaceAll(n.Event, "_", " "), reason, m.UIURL)
	return m
}

// uiBase is the Nomad UI's address for links: the block's ui_url, else
// the controller's -ui-url, else the Nomad address it talks to.
func (o *outbox) uiBase(nb *policy.Notify) string {
	switch {
	case nb.UIURL != "":
		return nb.UIURL
	case o.cfg().UIURL != "":
		return o.cfg().UIURL
	case o.client != nil:
		return o.client.Address()
	}
	return ""
}

// jobUIURL is the job's page in the Nomad UI: <base>/ui/jobs/<job>@<ns>.
func jobUIURL(base string, k jobKey) string {
	return strings.TrimRight(base, "/") + "/ui/jobs/" + url.PathEscape(k.ID) + "@" + url.PathEscape(k.Namespace)
}
