package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpu-steward/steward/policy/engine"
)

// JobState is everything the controller remembers about one job. It lives
// in a Nomad variable in the controller's own state namespace (statePath),
// where no tenant's token may write, written (check-and-set) before each
// action it describes, so a restarted controller (or a new leader)
// continues exactly where the last one stopped. Which job an entry is about
// comes from its path, never from its content.
type JobState struct {
	Namespace string `json:"namespace"`
	ID        string `json:"id"`
	// IDHash stands for an ID longer than stateIDMax, which is then not
	// saved (a 70 KB ID would pass Nomad's variable limit): the state is
	// matched to its job when Nomad shows it (resolveStates).
	IDHash string `json:"id_hash,omitempty"`
	// Held maps a task group to the allocations Steward holds back (the
	// group is scaled down by Count).
	Held map[string]*Held `json:"held,omitempty"`
	// Paused: a person paused the job (steward pause); it is not resumed
	// until they resume it.
	Paused bool `json:"paused,omitempty"`
	// Snooze: the job's owner snoozed its idle rule (snooze.go).
	Snooze *SnoozeState `json:"snooze,omitempty"`
	// QueueMove: the job's owner moved it in its tenant's waiting order
	// (steward queue move, queuemove.go). It lasts as long as the job.
	QueueMove *QueueMove `json:"queue_move,omitempty"`
	// Life is which of the job's start and finish messages were decided
	// (lifecycle.go): "", "started", "finished". Kept only for jobs a
	// per-job notify block tells.
	Life string `json:"life,omitempty"`
	// Promoted: Steward raised the job's priority above its tier's.
	Promoted bool `json:"promoted,omitempty"`
	// Preemptions are the times Steward preempted the job, oldest first,
	// for the eviction cap and promotion (kept for 24 hours).
	Preemptions []time.Time `json:"preemptions,omitempty"`
	// PreemptedTotal counts the same preemptions over the job's life,
	// for preemption.max_per_job (the times above are trimmed to a day).
	// It keeps the state while the job exists; a purged job's state is
	// forgotten, count and all. A state saved before it existed counts
	// from its recent times (engine.Job.PreemptionsTotal).
	PreemptedTotal int `json:"preempted_total,omitempty"`
	// Draining are preemptions between the checkpoint signal and the stop.
	Draining []*Drain `json:"draining,omitempty"`
	// Resumes counts the drains that asked the job to checkpoint (a
	// checkpoint signal): its next start resumes. The record carries it to
	// the job's tasks, whatever their driver (steward_resume_count,
	// record.go). Not a reason to keep the state: the record keeps the
	// count once the state is forgotten (mergeRecordItems).
	Resumes int `json:"resumes,omitempty"`
	// Done is the work the job kept from its runs before the current one:
	// what ran until each preemption that asked it to checkpoint, added
	// up; a preemption without a checkpoint signal loses it all. The
	// forecast counts it (forecast.Input.Done): a resumed job runs what
	// is left, not its whole run time again. Kept while the state is
	// (a preempted job's is, by PreemptedTotal).
	Done time.Duration `json:"done,omitempty"`
	// Waiting maps a group to when it began to wait for GPUs (queued by
	// Nomad or held by Steward), kept across hold and resume so that
	// waiting work keeps its place in line: Nomad's blocked evaluations are
	// re-created, and their times would make old work look new.
	Waiting map[string]time.Time `json:"waiting,omitempty"`
	// Interrupted marks groups Steward preempted mid-run that have not run
	// since (held, or resumed and not placed yet): the policy's
	// resume_order may put them ahead of work that never started.
	Interrupted map[string]bool `json:"interrupted,omitempty"`
	Status      string          `json:"status"`
	Rule        string          `json:"rule,omitempty"`
	Reason      string          `json:"reason,omitempty"`
	Updated     time.Time       `json:"updated"`
	// Marks are GPUs this job's preemptions freed, or counted on, for the
	// work they were made for, set aside until it runs (earmarks.go).
	Marks Marks `json:"marks,omitempty"`
	// Idle keeps, per allocation an idle rule covers (short ID), since
	// when its GPUs have been under the rule's threshold: written once an
	// allocation has been idle for idleSaveAfter, dropped when it is busy
	// again or gone, so that a restarted controller resumes idle timers
	// where they were. Written when idleness starts or ends, not as it
	// goes on: a sample history rewritten every minute cost a Raft write
	// per GPU job per minute, and 5 KB per allocation.
	Idle map[string]IdleSince `json:"idle,omitempty"`
	// Usage is the per-minute GPU history earlier versions saved: read
	// once, to resume their idle timers, and never written again.
	Usage map[string][]engine.Sample `json:"usage,omitempty"`
	// Warned keeps, per allocation (short ID), when an idle rule's
	// warning about it was last given (engine.Alloc.IdleWarned), so that
	// it is given once per idle stretch; IdleWarning is the warning that
	// stands (idlewarn.go).
	Warned      map[string]warnedAt `json:"warned,omitempty"`
	IdleWarning *IdleWarning        `json:"idle_warning,omitempty"`
	// Outbox holds the messages about decisions not yet sent to the
	// policy's webhooks, saved with the decisions (outbox.go).
	Outbox []*Notice `json:"outbox,omitempty"`
	// resumed is when Steward last scaled each group up (this process
	// only): until Nomad shows the new allocations, placed or blocked,
	// they are in no list it answers, and the engine would give their
	// GPUs to other work (resumeInFlight).
	resumed map[string]time.Time
}

// resumeInFlight is how long after a resume allocations Nomad shows
// neither placed nor blocked still count as waiting: Nomad evaluates a
// scaled-up group within a second or two.
const resumeInFlight = 30 * time.Second

// Held is a group Steward scaled down.
type Held struct {
	// Count allocations are held; Original is the group's count before
	// Steward first scaled it down.
	Count    int       `json:"count"`
	Original int       `json:"original"`
	Since    time.Time `json:"since"`
	Rule     string    `json:"rule"`
	// Index is the job's modify index when Steward last wrote this hold:
	// a job whose count disagrees and whose index moved was changed by its
	// owner, who then overrides the hold.
	Index uint64 `json:"index"`
	// Taken is how many completed allocations of a batch group Steward's
	// last write took out of Original (round.takeDone): allocations Nomad
	// still counts while that write is not applied. syncHolds, finishing
	// it, leaves out only those completed since.
	Taken int `json:"taken,omitempty"`
	// Scaling is the group's scaling policy (the Nomad Autoscaler's) as
	// its owner set it, recorded before Steward first pinned it (disabled,
	// max at the held count: scaling.go); restored when the group is
	// resumed in full. Nil for a group without a scaling block.
	Scaling *ScalingPolicy `json:"scaling,omitempty"`
	// OwnerResumed: held after an idle release (Rule "idle"), and its
	// owner asked for it back since (steward resume). Work an idle rule in
	// mode always requeued waits until then (engine.Demand.OwnerResumed);
	// a new hold clears it.
	OwnerResumed bool `json:"owner_resumed,omitempty"`
	// Evicts is when a preemption or idle release that holds this group
	// was decided, while Nomad has not taken its lower count: it counts
	// toward the eviction cap once Nomad shows the count (syncHolds).
	Evicts time.Time `json:"evicts,omitzero"`
}

// DrainKind is what a drain stops its victims for (Drain.Kind): the
// engine's preemption or idle stop, a person's pause (a request), or a
// node's maintenance. Only a preemption and an idle stop are evictions.
// It is saved as a string in the job's state. An alias of string for
// now: the kinds are declared here, and drains built from a plain string
// (the tests') still compile; a defined type would let the compiler check
// every use.
type DrainKind = string

// The kinds of drain.
const (
	DrainPreempt     DrainKind = DrainKind(engine.Preempt)
	DrainIdleStop    DrainKind = DrainKind(engine.IdleStop)
	DrainPause       DrainKind = DrainKind(engine.RulePause)
	DrainMaintenance DrainKind = "maintenance"
)

// Drain is a preemption in progress, in three steps: decided (the job's
// record says why, and the task's template renders it), signalled (the
// checkpoint signal sent, the grace running), and finished (the job held,
// the victims stopping). Until the victims are gone their GPUs count as
// free for the beneficiary alone, and nobody is preempted for it again.
type Drain struct {
	Group  string   `json:"group"` // "" for a whole gang
	Allocs []string `json:"allocs"`
	// On is where the victims hold GPUs, as the preemption found them:
	// the GPUs they give back are set aside for For even when a victim
	// exits by itself before the controller finishes the drain (Nomad
	// then lists it no more).
	On     []NodeGPUs    `json:"on,omitempty"`
	Signal string        `json:"signal,omitempty"`
	Grace  time.Duration `json:"grace,omitempty"`
	// Decided is when the preemption was decided and recorded.
	Decided time.Time `json:"decided"`
	// Signaled is when the checkpoint signal went out (zero: not yet);
	// Deadline is then Signaled + Grace.
	Signaled time.Time `json:"signaled"`
	Deadline time.Time `json:"deadline"`
	// Sent: the checkpoint signal reached Nomad. Signaled is set before
	// sending, Sent after, and neither is written by itself (store.go): a
	// controller that took over finds the drain unsignalled and signals
	// it with a whole grace; one that finds Signaled saved (with another
	// write) and not Sent, or a send that failed, sends it again within
	// the grace.
	Sent bool `json:"sent,omitempty"`
	// Finished: the job is held and the victims are being stopped, since
	// FinishedAt; victims Nomad still runs are stopped again, and after
	// victimStopLimit the preemption is given up so the engine plans anew.
	Finished   bool      `json:"finished,omitempty"`
	FinishedAt time.Time `json:"finished_at,omitempty"`
	// Requeue: hold and resume later; false stops the group for good.
	Requeue bool      `json:"requeue"`
	Kind    DrainKind `json:"kind"`
	For     string    `json:"for,omitempty"`
	// ForGroup is the beneficiary's task group ("": its first waiting one).
	ForGroup string `json:"for_group,omitempty"`
	// MoveTo: the victims fit at once on this node, and resume there once
	// the beneficiary is placed (a migration; engine.Action.MoveTo).
	MoveTo string `json:"move_to,omitempty"`
	Rule   string `json:"rule"`
	Reason string `json:"reason"`
	// Completed are the victims that finished their work by themselves
	// before the stop reached them (a batch task that exited 0 just as
	// its grace ran out): done, so not held, and never run again
	// (round.endedVictims).
	Completed int `json:"completed,omitempty"`
	// Unadmitted: the limit stops work Nomad placed over its tenant's
	// limit before any plan saw it run (neverAdmitted). Its job is held
	// by the limit, not preempted: the stop is no eviction (it is not in
	// Preemptions, so it does not count toward the eviction cap).
	Unadmitted bool `json:"unadmitted,omitempty"`
	// stoppedAgain is when victims Nomad still ran were last stopped
	// again (this process only): each stop makes Nomad evaluate the job,
	// so they are retried every victimStopRetry, not at every round.
	stoppedAgain time.Time
	// settled: how its victims ended is known and taken into its hold
	// (keepCompletedOut; this process only, read again after a restart).
	settled bool
}

// NodeGPUs is GPUs on a node, saved as [node, gpus].
type NodeGPUs struct {
	Node string
	GPUs int
}

func (g NodeGPUs) MarshalJSON() ([]byte, error) {
	return json.Marshal([2]any{g.Node, g.GPUs})
}

// UnmarshalJSON reads [node, gpus], or the object earlier versions wrote.
func (g *NodeGPUs) UnmarshalJSON(b []byte) error {
	var pair [2]json.RawMessage
	if err := json.Unmarshal(b, &pair); err == nil {
		if err := json.Unmarshal(pair[0], &g.Node); err != nil {
			return fmt.Errorf("node GPUs: node: %w", err)
		}
		if err := json.Unmarshal(pair[1], &g.GPUs); err != nil {
			return fmt.Errorf("node GPUs: count: %w", err)
		}
		return nil
	}
	var obj struct {
		Node string `json:"node"`
		GPUs int    `json:"gpus"`
	}
	if err := json.Unmarshal(b, &obj); err != nil {
		return fmt.Errorf("node GPUs: %w", err)
	}
	g.Node, g.GPUs = obj.Node, obj.GPUs
	return nil
}

// Statuses shown in the job's record.
const (
	StatusRunning   = "running"
	StatusDraining  = "checkpointing"
	StatusPreempted = "preempted"
	StatusMigrating = "migrating" // preempted, to resume on free GPUs elsewhere
	StatusHeld      = "held"
	StatusPaused    = "paused"
	StatusIdleStop  = "idle-stopped"
	StatusPromoted  = "promoted"
	StatusMoved     = "moved" // to another node pool, by its pool precedence
)

const preemptionMemory = 24 * time.Hour

// validVariablePath is what Nomad accepts as a variable path.
var validVariablePath = regexp.MustCompile("^[a-zA-Z0-9-_~/]{1,128}$")

// statePrefix is where job states live, in the state namespace.
const statePrefix = "steward/jobs/"

// statePath is the variable path of a job's state in the state namespace:
// steward/jobs/<namespace>/<job ID>, each escaped (variable paths allow only
// [a-zA-Z0-9-_~/]; other characters become ~XX). A path that would pass
// Nomad's 128 characters is named by a hash of the job instead, which the
// entry's content must then match (stateKey).
func statePath(k jobKey) string {
	p := statePrefix + escapePath(k.Namespace) + "/" + escapePath(k.ID)
	if len(p) <= 128 {
		return p
	}
	sum := sha256.Sum256([]byte(k.Namespace + "\x00" + k.ID))
	return statePrefix + "~~" + hex.EncodeToString(sum[:20])
}

// stateKey is the job a state path names. For a hashed path the content
// names the job, and is believed only if it hashes to that path.
func stateKey(path string, content *JobState) (jobKey, error) {
	rest, ok := strings.CutPrefix(path, statePrefix)
	if !ok {
		return jobKey{}, fmt.Errorf("%s is not under %s", path, statePrefix)
	}
	var k jobKey
	if strings.HasPrefix(rest, "~~") {
		k = jobKey{content.Namespace, content.ID}
	} else if ns, id, ok := strings.Cut(rest, "/"); ok {
		k = jobKey{unescapePath(ns), unescapePath(id)}
	}
	if k.Namespace == "" || k.ID == "" || statePath(k) != path {
		return jobKey{}, fmt.Errorf("%s does not name a job (the path is not the one Steward writes for any job it could name)", path)
	}
	return k, nil
}

// varPath names a per-job variable under prefix. An ID too long to fit
// once escaped is named by its hash ("~~" + hex), and the variable's
// content then carries the ID.
func varPath(prefix, jobID string) string {
	p := prefix + escapePath(jobID)
	if len(p) <= 128 {
		return p
	}
	sum := sha256.Sum256([]byte(jobID))
	return prefix + "~~" + hex.EncodeToString(sum[:20])
}

// recordPath is the job's own variable, shown on its page in the Nomad UI;
// "" when the job ID cannot be a variable path.
func recordPath(jobID string) string {
	p := "nomad/jobs/" + jobID
	if escapePath(jobID) != jobID || !validVariablePath.MatchString(p) {
		return ""
	}
	return p
}

func escapePath(s string) string {
	var b strings.Builder
	for _, r := range []byte(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteByte(r)
		default:
			fmt.Fprintf(&b, "~%02x", r)
		}
	}
	return b.String()
}

func unescapePath(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '~' && i+2 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+3], "%02x", &c); err == nil {
				b.WriteByte(c)
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func (s *JobState) key() jobKey { return jobKey{s.Namespace, s.ID} }

// encode returns the variable items for the state: its ID as a hash when
// too long to carry, reasons cut to reasonMax, and an error when it is
// still over stateMaxBytes (errStateTooBig).
func (s *JobState) encode() (map[string]string, error) {
	b, err := json.Marshal(s.bounded())
	if err != nil {
		return nil, fmt.Errorf("encode state of %s: %w", s.key(), err)
	}
	if n := len(b) + len(statePath(s.key())); n > stateMaxBytes {
		return nil, fmt.Errorf("%w: the state of %s is %d bytes, over the %d Steward writes (Nomad refuses a variable over 64 KiB): "+
			"not saved, and the action it describes not taken", errStateTooBig, clip(s.key().String(), quoteMax), n, stateMaxBytes)
	}
	return map[string]string{"state": string(b), schemaItem: strconv.Itoa(stateSchema)}, nil
}

func decodeState(items map[string]string) (*JobState, error) {
	v, ok := items[schemaItem]
	if _, err := schemaOf(v, ok); err != nil {
		return nil, err // never decoded: a newer format may mean other things by the same fields
	}
	raw, ok := items["state"]
	if !ok {
		return nil, fmt.Errorf("no state item")
	}
	var s JobState
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		return nil, fmt.Errorf("decode state: %w", err)
	}
	return &s, nil
}

// empty reports whether the state holds nothing worth keeping.
func (s *JobState) empty(now time.Time) bool {
	s.trimPreemptions(now)
	// GPUs set aside for a beneficiary count too: a victim's state may
	// hold nothing else (stopped for good by an idle rule), and a
	// restarted controller must still keep them aside.
	s.pruneMarks(now)
	return len(s.Held) == 0 && !s.Paused && !s.Promoted && s.Snooze == nil && s.QueueMove == nil && s.Life == "" && len(s.Preemptions) == 0 && s.PreemptedTotal == 0 &&
		len(s.Draining) == 0 && len(s.Idle) == 0 && len(s.Usage) == 0 &&
		len(s.Interrupted) == 0 && len(s.Marks) == 0 && len(s.Warned) == 0 && s.IdleWarning == nil && len(s.Outbox) == 0
}

// waits reports whether a group of the job waits for GPUs (kept in
// memory, for its place in line, though not saved on its own).
func (s *JobState) waits() bool {
	return len(s.Waiting) > 0
}

// preempted records a preemption that took effect at t: in the recent
// times (the eviction cap, promotion) and in the lifetime count
// (max_per_job), which starts from the recent times for a state saved
// before it was kept.
func (s *JobState) preempted(t time.Time) {
	s.PreemptedTotal = max(s.PreemptedTotal, len(s.Preemptions)) + 1
	s.Preemptions = append(s.Preemptions, t)
}

// pendingEvictions are the times of evictions decided but not counted yet:
// drains between the decision and the stop (each counts when finishDrain
// writes its scale, or through Held.Evicts when that write is not taken).
// A pause and work held before it was admitted are no evictions (finishDrain).
func (s *JobState) pendingEvictions() []time.Time {
	var out []time.Time
	for _, d := range s.Draining {
		if d == nil || d.Finished || d.Kind == DrainPause || d.Kind == DrainMaintenance || d.Unadmitted || d.Decided.IsZero() {
			continue
		}
		out = append(out, d.Decided)
	}
	var held []time.Time
	for _, h := range s.Held {
		if h != nil && !h.Evicts.IsZero() {
			held = append(held, h.Evicts)
		}
	}
	// One drain holds each of its groups with the same time: one eviction.
	slices.SortFunc(held, func(a, b time.Time) int { return a.Compare(b) })
	return append(out, slices.Compact(held)...)
}

func (s *JobState) trimPreemptions(now time.Time) {
	cut := 0
	for cut < len(s.Preemptions) && now.Sub(s.Preemptions[cut]) > preemptionMemory {
		cut++
	}
	s.Preemptions = s.Preemptions[cut:]
}

// heldCount is the allocations held across groups.
func (s *JobState) heldCount() int {
	n := 0
	for _, h := range s.Held {
		n += h.Count
	}
	return n
}

// hold adds n held allocations to a group whose count is now count.
func (s *JobState) hold(group string, n, count int, rule string, now time.Time, index uint64) *Held {
	if s.Held == nil {
		s.Held = map[string]*Held{}
	}
	h := s.Held[group]
	if h == nil || h.Count == 0 {
		// A new hold, or one released in full (kept at Count 0 until
		// Nomad shows the resume): it waits since it began to wait for
		// GPUs, which a group Nomad placed since is not (trackWaiting).
		since := now
		if w, ok := s.Waiting[group]; ok && w.Before(now) {
			since = w
		}
		if h == nil {
			h = &Held{Original: count}
			s.Held[group] = h
		}
		h.Since = since
	}
	h.Count += n
	if h.Count > h.Original {
		h.Count = h.Original
	}
	h.Rule = rule
	h.Index = index
	h.OwnerResumed = false
	return h
}

// release gives n held allocations of a group back. They keep waiting
// (for Nomad to place them) since the hold began. A group released in full
// keeps its entry, at Count 0, until Nomad shows the group back at its
// original count (syncHolds): a failed scale or a crash between recording
// the release and scaling up is then finished by the next round, never
// left at 0 for good.
func (s *JobState) release(group string, n int) {
	h := s.Held[group]
	if h == nil {
		return
	}
	s.setWaiting(group, h.Since)
	h.Count = max(h.Count-n, 0)
}

// holds reports whether Steward holds back any allocation of the group.
func (s *JobState) holds(group string) bool {
	h := s.Held[group]
	return h != nil && h.Count > 0
}

// draining reports whether the allocation is being preempted.
func (s *JobState) draining(allocID string) *Drain {
	for _, d := range s.Draining {
		if d.has(allocID) {
			return d
		}
	}
	return nil
}

// States name allocations and nodes by the first shortIDLen characters of
// their UUIDs, as Nomad's CLI and UI show them, and match them by prefix
// against what Nomad lists: a preemption of a 64-allocation gang over 64
// nodes is then about 2 KiB of state instead of 8, within Nomad's
// variable size limit with room to spare. Two allocations of one job (or
// two nodes) sharing the first 32 bits of a random UUID is about a one in
// a million chance for a 64-allocation job; were it to happen, both count
// as the drain's, which errs on the side of stopping a victim's own
// sibling, never another job's allocation.
const shortIDLen = 8

func shortID(id string) string {
	if len(id) > shortIDLen {
		return id[:shortIDLen]
	}
	return id
}

func shortIDs(ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = shortID(id)
	}
	return out
}

// sameID reports whether a stored ID (short, or full from an earlier
// version) names the full ID.
func sameID(stored, full string) bool { return stored != "" && strings.HasPrefix(full, stored) }

// has reports whether the drain's victims include the allocation.
func (d *Drain) has(allocID string) bool {
	return slices.ContainsFunc(d.Allocs, func(s string) bool { return sameID(s, allocID) })
}

// IdleSince is since when an allocation's GPUs have been idle, and their
// mean utilisation then (for reasons: "GPU utilisation 2% for 20m"),
// saved as [unix seconds, percent].
type IdleSince struct {
	Since time.Time
	Util  float64
}

// idleSaveAfter is how long an allocation must have been idle before its
// idleness is saved: a GPU that flickers between busy and idle costs no
// writes, and a restart loses at most this much of an idle timer.
const idleSaveAfter = time.Minute

func (i IdleSince) MarshalJSON() ([]byte, error) {
	return json.Marshal([2]float64{float64(i.Since.Unix()), math.Round(i.Util*10) / 10})
}

func (i *IdleSince) UnmarshalJSON(b []byte) error {
	var v [2]float64
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("idle since: %w", err)
	}
	i.Since, i.Util = time.Unix(int64(v[0]), 0).UTC(), v[1]
	return nil
}

func (s *JobState) setWaiting(group string, since time.Time) {
	if s.Waiting == nil {
		s.Waiting = map[string]time.Time{}
	}
	if w, ok := s.Waiting[group]; !ok || since.Before(w) {
		s.Waiting[group] = since
	}
}
