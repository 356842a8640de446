# The Nomad ACL policy the Steward controller needs, and nothing more.
#
# As a Nomad job (jobs/steward-controller.nomad.hcl, namespace steward), bind
# it to the job's workload identity; no token to hand out:
#
#   nomad acl policy apply -namespace steward -job steward-controller \
#     -description "Steward controller" steward-controller acl/steward-controller.policy.hcl
#
# Run elsewhere, give it a token of its own:
#
#   nomad acl policy apply -description "Steward controller" steward-controller acl/steward-controller.policy.hcl
#   nomad acl token create -name steward-controller -policy steward-controller -type client
#
# and run the controller with NOMAD_TOKEN (or -token-file) set to its secret.
#
# How Nomad reads this file (checked in e2e/security_test.go): for job
# capabilities the most specific namespace rule wins, so in namespace
# steward only the "steward" block counts, in every other namespace only the
# "*" block. Variables are matched differently: by the closest glob over
# namespace and path together, so a "*" path rule also reaches namespace
# steward unless the "steward" block names that path itself (hence the deny
# below).

# Steward's own namespace: nobody but the controller (and operators) may
# write here, which is what makes its state trustworthy.
namespace "steward" {
  # list-jobs, read-job: Steward's own placeholder jobs (steward-hold-*),
  # which hold free GPUs for work that preempted while its victims
  # checkpoint; the start-up check that this namespace exists
  # (GET /v1/namespace/steward) needs any capability here.
  # submit-job: register and purge those placeholders. Steward submits no
  # other job here; tenants must have no rule in this namespace.
  capabilities = ["list-jobs", "read-job", "submit-job"]

  variables {
    # steward/jobs/<ns>/<job>: every job's state (held groups, preemptions,
    # drains, pause); steward/leader: the leader lock (lock acquire, renew,
    # release are writes); steward/status: the whole cluster's status
    # (`steward status` with an operator's token); steward/controller:
    # where the leader answers `steward job check`.
    # list: load the state at start; destroy: forget a job with nothing left
    # to remember.
    path "steward/*" {
      capabilities = ["read", "write", "list", "destroy"]
    }
    # The controller's own job keeps its policy in nomad/jobs/steward-controller,
    # which its tasks read through workload identity anyway; the token need not
    # write it (the "*" rule below would otherwise reach it).
    path "nomad/jobs/*" {
      capabilities = ["deny"]
    }
  }
}

# Every tenant namespace.
namespace "*" {
  # list-jobs, read-job  read jobs, allocations, evaluations and job
  #                      summaries, and their events in the event stream
  # scale-job            hold and resume work (scale a group down and up)
  # submit-job           set a job's priority to its tier's (re-register it,
  #                      EnforceIndex), register a held service job with
  #                      its new count while its deployment is active, and
  #                      resume work GPUs were freed for with an evaluation
  #                      ahead of Nomad's queue (EvalPriority), and hold a
  #                      group with a scaling policy (count and the policy's
  #                      enabled, min and max in one registration)
  # alloc-lifecycle      send the checkpoint signal, and stop victims one
  #                      by one where lowering their group's count alone
  #                      would not (not its top; stragglers)
  # csi-mount-volume     re-register (the submit-job writes above) a job
  #                      that mounts a CSI volume: Nomad checks the
  #                      submitter's right to mount each of the job's
  #                      volumes on every registration (Job.Register),
  #                      with plugin read below; see host_volume for host
  #                      volumes
  # read-fs              the checkpoint contract for every driver: read
  #                      (stat, never the content) one file,
  #                      <task>/local/steward-checkpoint-written, of the
  #                      victims of a preemption during their grace, which
  #                      a task of any driver touches once its checkpoint
  #                      is written, so that it is stopped then rather than
  #                      at the end of its grace. Nomad's read-fs also
  #                      allows reading the rest of the allocation dir
  #                      (logs, local/, not secrets/): the controller reads
  #                      nothing else (docs/reference/controller.md, "Security
  #                      model"). Without it such tasks stop at the end of
  #                      their grace, and the controller says so once.
  capabilities = ["list-jobs", "read-job", "scale-job", "submit-job", "alloc-lifecycle", "csi-mount-volume", "read-fs"]

  variables {
    # nomad/jobs/<job>: the job's record, shown in its Variables tab and
    # read by its tasks. Steward merges its steward_* keys with
    # check-and-set, which needs read as well as write; jobs may keep other
    # items there, which this read can see (see docs/reference/controller.md,
    # "Security model"). Drop this rule with -job-records=false.
    path "nomad/jobs/*" {
      capabilities = ["read", "write"]
    }
    # steward/requests/<job>: pause and resume requests tenants leave in
    # their own namespace. Read them, list them, delete each once carried
    # out. Never written: a request acts only on a job of its own namespace.
    path "steward/requests/*" {
      capabilities = ["read", "list", "destroy"]
    }
    # steward/status: the namespace's own view of the status (its jobs
    # and its tenant's figures only), which its team reads with
    # `steward status -namespace NS` and `steward queue -namespace NS`.
    # Written check-and-set only when it changed, which needs read for the
    # index; its content is never trusted.
    path "steward/status" {
      capabilities = ["read", "write"]
    }
  }
}

# Host volumes: re-registering a job (its priority reset to its tier's, a
# pool move, a count with its scaling policy, a resume ahead of Nomad's
# queue; a scale while a deployment runs) needs the right to mount each
# host volume the job mounts, read-write unless the job's volume is
# read-only: without it Nomad refuses with a 403, and a tenant keeps a
# priority Steward would reset by adding any volume to its job. Steward
# mounts nothing itself: it registers tenants' jobs as their owners wrote
# them. (A plain scale needs no volume right.)
host_volume "*" {
  policy = "write"
}

# CSI volumes: with csi-mount-volume above, Nomad also wants plugin read
# to register a job that mounts one.
plugin {
  policy = "read"
}

# Client nodes, their GPUs and GPU activity (node stats).
node {
  policy = "read"
}

# Nomad's scheduler configuration, read only: whether Nomad's system
# scheduler preempts allocations on its own (without a checkpoint signal),
# which the controller reports in /healthz and its log (docs/reference/controller.md,
# "What Nomad does"). Without it the controller warns once and says
# "unknown".
operator {
  policy = "read"
}
