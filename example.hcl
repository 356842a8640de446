# Example Steward policy for one 8-GPU demo node, shared by three teams.
# It sets every block and attribute the language has; the comments give each
# one's default. docs/reference/policy.md is the full reference.
#
# Check it with:  steward policy validate example.hcl
# See it resolved: steward policy show example.hcl

# How jobs say which tier they are in. The whole block is optional.
defaults {
  # Tier of a job that names none, or names a tier this policy does not
  # define. Default: the lowest-priority tier (here that is also "training").
  tier = "training"

  # Tiers a namespace no tenant block names may use. Default: tier alone,
  # so a forgotten or new namespace gains no tier nobody granted it.
  unnamed_tiers = ["training"]

  # Job meta key naming the job's tier. Keys with dots take Nomad's map
  # syntax in a jobspec:  meta = { "steward.tier" = "inference" }
  # Default: "steward.tier".
  tier_meta_key = "steward.tier"

  # Job meta key that, set to "true", makes all of a job's allocations one
  # gang: preempted together and resumed together. Default: "steward.gang".
  gang_meta_key = "steward.gang"

  # Job meta key overriding preemption.checkpoint_signal for one job
  # ("none" opts the job out of checkpointing). Default:
  # "steward.checkpoint_signal".
  checkpoint_meta_key = "steward.checkpoint_signal"
}

# Tiers are classes of work. priority (required, 1..100) becomes the Nomad job
# priority; higher tiers take GPUs from lower ones. preemptible (default true)
# says whether the tier's jobs may lose their GPUs; false means never a victim
# while within its tenant's reserve. preempt_grace (default: preemption.grace)
# caps the checkpoint grace of the work preempted for this tier's jobs.
# preempts_reserved (default []) lists lower tiers this tier may preempt
# within other tenants' reserves.
tier "inference" {
  priority    = 90
  preemptible = false

  # What its work does beyond its tenant's reserve: "run" (on free GPUs, or
  # GPUs its priority may take; preemptible there, by another tenant
  # reclaiming its own reserve, and by its tenant's limit) or "wait" (it runs
  # only within the reserve). Non-preemptible tiers only. Default: "run", so
  # serving never waits while GPUs are free.
  beyond_reserve = "run"

  # Serving cannot wait for a training job to checkpoint: work preempted
  # for inference is stopped at once, with no checkpoint signal ("0s"; the
  # grace is the lesser of this and preemption.grace). Limits and idle
  # rules still give preemption.grace.
  preempt_grace = "0s"
}

tier "build" {
  priority    = 80
  preemptible = false
}

tier "interactive" {
  priority    = 60
  preemptible = true

  # Interactive work beats batch training across teams too: it may preempt
  # these lower tiers even within another tenant's reserve. That tenant's
  # training then does not reclaim its reserve from interactive work (it
  # would only be preempted again); its own interactive work still does.
  # Default: [] (a reserve protects all of its tenant's work).
  preempts_reserved = ["training"]
}

tier "training" {
  priority    = 40
  preemptible = true
  # A precedence of pools (each with a node_pool): training submitted to
  # one of these node pools goes, while it waits, to the first with room
  # for it now; Steward re-registers the job there, and moves it back when
  # room frees in an earlier one. Default: [] (work stays where it is).
  pools = ["onprem", "cloud"]
}

# Tenants are teams, one Nomad namespace each. reserve GPUs are guaranteed to
# the team whenever it has work waiting for them; limit caps what it may hold,
# borrowed GPUs included. The reserves here add up to the node's 8 GPUs, so
# every guarantee can be kept; a team that is not using its reserve lends it.
# Non-preemptible work (inference, build) is never a victim within its
# tenant's reserve; beyond it, it runs (beyond_reserve = "run") but another
# tenant reclaiming its reserve may take it. A namespace no tenant names is a
# tenant of its own: reserve 0, no limit, every tier.
tenant "product" {
  namespace = "product" # Nomad namespace. Default: the tenant's name.
  reserve   = 4         # Default: 0.
  limit     = 8         # Default: no limit.
  weight    = 1         # Share of spare GPUs against other tenants. Default: 1; must be > 0.
  tiers     = []        # Tiers its jobs may use. Default: [] = every tier.
}

tenant "research" {
  namespace = "research"
  reserve   = 4
  limit     = 6
  weight    = 1
  # A job naming another tier (say, inference) runs in default_tier, with
  # that tier's priority, and its record says so.
  tiers = ["interactive", "training"]
  # Tier of its jobs that name none, or one they may not use. Must be in
  # tiers. Default: defaults.tier if the tenant may use it, else the
  # lowest-priority tier it may use.
  default_tier = "training"

  # Its reserve and limit within a pool (defined below), beside the ones
  # above: here, 2 of the H100s are research's whenever it has work
  # waiting that can run on them, and it never holds more than 4 of them.
  pool "h100" {
    reserve = 2 # Default: 0.
    limit   = 4 # Default: no limit.
  }
}

tenant "platform" {
  namespace = "platform"
  reserve   = 0
  limit     = 2
  weight    = 0.5                         # Gets half the spare GPUs product or research would.
  tiers     = ["interactive", "training"] # No non-preemptible tiers: with no reserve, all of its work is borrowed.
  pools     = ["cloud", "onprem"]          # Its own pool precedence, instead of its tiers'. Default: [] (the tiers').
}

# A department groups tenants under a reserve and a limit of their own
# (hierarchical tenants; docs/reference/policy.md). Each tenant's reserve lies within
# the department's (their sum may not exceed it); the rest, and whatever a
# member leaves unused, goes to its other tenants before anyone outside, and
# a member below it reclaims it from tenants outside the department. The
# limit caps its tenants together, each tenant's own limit still holding.
# A division whose teams share one budget would read:
#
#   department "engineering" {
#     tenants = ["product", "research"]
#     reserve = 10 # product's 4 and research's 4, and 2 more for either
#     limit   = 12 # together; each keeps its own limit too
#   }
#
# Here platform's budget is kept in a department of its own, with its own
# numbers (so this file plans as it would without it): its future teams,
# each a namespace, join it by being added to tenants.
department "infra" {
  tenants = ["platform"] # Each tenant in at most one department. Required.
  reserve = 0            # Default: 0; at least the sum of its tenants' reserves.
  limit   = 2            # Default: no limit.
  weight  = 0.5          # Share among departments with fair share over time. Default: 1; must be > 0.
}

# A pool is a set of nodes: a Nomad node pool, the nodes of some GPU models,
# or both. With owners, it keeps its GPUs for some tiers: other tiers may
# borrow (backfill) them, and lose them at once when an owner needs them.
pool "serving" {
  node_pool = "serving"     # Nomad node pool. Default: the pool's name, unless models is set (then: every node pool).
  owners    = ["inference"] # Tiers the capacity is kept for. Default: [] = none: a pool for tenants' reserves and limits only.
  grace     = "0s"          # Grace given to backfill taken back here, instead of preemption.grace. Default: "0s".
}

# Node pools for the training tier's precedence (above). Without owners
# or models, a pool is just its node pool's nodes.
pool "onprem" {
  node_pool = "default"
}

pool "cloud" {
  node_pool = "cloud"
}

# Nodes of one GPU model, whatever their node pool: the models as the device
# plugin names them (the device's name in `nomad node status -verbose`).
pool "h100" {
  models = ["H100 80GB HBM3"] # Default: [] = every model.
  # Among waiting work that can run only here and that tiers, reserves and
  # priorities rank equal: "largest-first", "smallest-first" or "fifo".
  # Default: the usual order (fair shares, preempted work, longest waiting).
  order = "largest-first"
}

# Idle rules release GPUs held by jobs that do not use them. For each job the
# first rule (in file order) that covers its tier and tenant applies.
idle "notebooks" {
  tiers     = ["interactive"] # Tiers it covers. Default: [] = every preemptible tier. Non-preemptible tiers are not allowed.
  tenants   = []              # Tenants it covers, by tenant name. Default: [] = every tenant.
  threshold = 10              # A GPU is idle below this utilisation, in percent (0..100). Default: 10.
  after     = "15m"           # ...for this long. Default: "15m".
  mode      = "pressure"      # "pressure": only when other work waits for GPUs; "always": as soon as it matches. Default: "pressure".
  action    = "requeue"       # "requeue": hold the job and resume it when GPUs are free; "stop": stop it. Default: "requeue".
  max_snooze = "4h"           # Longest a job's owner may snooze the rule for it (steward snooze, the "keep-my-notebook" action); "0s": no snoozing. Default: "8h".
  # This long before the release, warn the job's owners once (a task event on
  # its allocation, a webhook): shorter than after. Default: "0s" = no warning.
  warn_before = "5m"
}

idle "abandoned" {
  tiers     = ["training"]
  tenants   = ["research", "platform"]
  threshold = 2
  after     = "1h"
  mode      = "always"
  action    = "stop"
}

# Webhooks: each decision about a job (the events listed, for the tenants
# listed) is POSTed as JSON, once, with an Idempotency-Key header. Only the
# operator writes this file: a block without tenants gets every team's
# decisions, so point it at a receiver the operators control; a team's own
# receiver gets a block naming that team alone.
notify "ops" {
  url_env = "STEWARD_OPS_WEBHOOK" # The URL, read from the controller's environment (URLs of chat webhooks are secrets). Or url.
}

notify "research" {
  url     = "https://hooks.example.com/steward/research" # Where to POST. Or url_env.
  events  = ["preempt", "migrate", "idle_warning", "idle_reclaim", "resume"] # Default: [] = every event.
  tenants = ["research"] # Only these tenants' jobs. Default: [] = every tenant.
  ui_url  = "https://nomad.example.com" # The Nomad UI in links. Default: the controller's -ui-url, else its Nomad address.
  # Headers whose values come from the controller's environment. Default: none.
  headers_from_env = {
    Authorization = "STEWARD_RESEARCH_WEBHOOK_AUTH"
  }
  timeout  = "10s" # Per attempt. Default: "10s".
  attempts = 8     # Tries, with exponential backoff and jitter, before a message is given up. Default: 8.
}

# A per-user channel: each job names its recipient in its meta
# (meta = { "steward.notify" = "ada@example.com" }), and messages about it go
# to this URL with the recipient as data (the body's "recipient", and the
# header below), never as an address. Jobs that name none get nothing here.
notify "users" {
  url              = "https://relay.example.com/steward" # The operator's relay, which delivers to each recipient.
  events           = ["start", "finish", "preempt", "idle_warning"]
  per_job          = true                  # Only jobs that name a recipient, each message carrying it. Default: false.
  recipient_header = "X-Steward-Recipient" # Also carry the recipient in this header. Default: none (the body only).
  recipients       = "[a-z0-9.-]+@example\\.com" # Recipients must match this as a whole (an allowlist). Default: any.
}

# Guards against pointless and repeated preemption. The block is optional;
# every attribute has a default.
preemption {
  min_runtime          = "10m"     # Younger work is preempted only when nothing older frees enough. Default: "10m".
  grace                = "2m"      # Time between the checkpoint signal and the stop. Default: "2m".
  checkpoint_signal    = "SIGUSR1" # Signal telling a victim to checkpoint; "none" for none. Default: "SIGUSR1".
  max_per_job_per_hour = 2         # Most preemptions (idle releases included) of one job in an hour; 0 = no cap. Default: 2.
  # Most preemptions of one job over its life: past it the job is protected
  # until it ends (its tenant's limit still applies, and, when nothing else
  # frees enough, another tenant's reserve reclaim or a higher tier);
  # 0 = no bound. Default: 10.
  max_per_job = 10
  # Which held work resumes first when GPUs free up, among work the tiers,
  # reserves, promotions and shares rank equal: "preempted-first" (work
  # preempted mid-run before work that never started) or "longest-waiting".
  # Default: "preempted-first".
  resume_order = "preempted-first"
  # Fair share over time, on here: what tenants borrow is shared by weight
  # over days, not only at each instant. fair_share_half_life: tenants' use
  # of borrowed GPUs (beyond their reserves) is remembered, halving every
  # half-life, and among work the tiers, reserves and promotions rank
  # equal, the tenant that used the least per unit of weight goes first
  # ("24h": a day's imbalance is paid back within a day or two; "168h", a
  # week, is Slurm's default). "0s" = off: the tenants' borrowed GPUs now
  # decide. Default: "0s".
  fair_share_half_life = "24h"

  # With fair_share_half_life: a tenant waiting to borrow GPUs preempts the
  # borrowed work of a tenant that used more than this many times its fair
  # share over time, as long as it then borrows no more per unit of weight
  # than the other keeps (rule fair_share). Without it, a tenant that
  # borrowed first keeps what long jobs hold, however long. 0 = off; else
  # at least 1. Default: 0.
  fair_share_reclaim_above = 1.5

  # Starved jobs get their priority raised. Optional; every attribute has a default.
  promote {
    after_preemptions = 3    # Promote after this many preemptions; 0 = never by count. Default: 3.
    after_wait        = "1h" # Promote after waiting this long for GPUs; "0s" = never by wait. Default: "1h".
    boost             = 10   # Priority points added (0..99). Default: 10.
  }
}
