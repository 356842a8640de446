# What a team (a tenant: one Nomad namespace) needs from Steward, and
# nothing else of Steward's. A template: the team here is "research";
# for another team, replace "research" with its namespace and apply it once
# per team:
#
#   sed 's/"research"/"ml"/' acl/steward-user.policy.hcl > steward-user-ml.hcl
#   nomad acl policy apply -description "Steward for team ml" steward-user-ml steward-user-ml.hcl
#   nomad acl token create -name alice -policy team-ml -policy steward-user-ml -type client
#
# The same file, bound to the team's namespace, is what the jobspecs'
# actions in the Nomad UI (pause, resume, move-to-top, keep-my-notebook;
# docs/users.md, "Actions in the Nomad UI") act with, through each job's
# workload identity. Once per namespace (every job there, later ones too):
#
#   nomad acl policy apply -namespace ml steward-user-ml steward-user-ml.hcl
#
# or, for one job only, add -job nb (and -group steward -task actions for
# its control task alone).
#
# It gives:
#   - the team's job records (nomad/jobs/<job>: steward_state, steward_reason
#     ...) in its namespace, read only;
#   - pause, resume and snooze of the team's own jobs (`steward pause|resume
#     -namespace research JOB`, `steward snooze ... JOB 2h`): the request
#     variable steward/requests/<job>
#     in its own namespace. The controller acts on the job of that name in
#     the namespace the request is in, and no other, so this right reaches
#     no other team's work;
#   - `steward status -namespace research` and `steward queue -namespace
#     research`: the view of the status the leader publishes in the team's
#     namespace (steward/status there: its own jobs, its tenant's figures,
#     its queue), read only. Not the whole cluster's status in Steward's
#     namespace, which names every team's jobs and reasons: operators only.
#
# `steward job check` also needs what submitting the job needs: the team's
# usual submit-job (and parse-job) in its namespace, which its own policy
# (team-ml above) grants, not this one. The controller answers only if
# Nomad's plan endpoint accepts the caller's token; from this policy it
# needs only steward/controller in Steward's namespace, where the leader
# publishes its address (there, and not in the team's namespace, where
# whoever may write variables could point teammates' checks, and their
# tokens, at an address of their own).
#
# Combining it with the team's own policy (Nomad merges policies per rule
# name, then picks the closest rule):
#   - name the namespace exactly as the team's own policy does. If that
#     policy says namespace "*" or "research-*", this exact "research"
#     block wins over it for job capabilities in research; copy the team's
#     capabilities in here, or rename this block to match;
#   - variables go to the closest path glob: if the team's policy grants
#     path "*" with write, this read-only "nomad/jobs/*" rule is closer and
#     takes write on nomad/jobs/* away. Such a team can already read its
#     records: drop the "nomad/jobs/*" rule below;
#   - no team may write in namespace steward (see docs/reference/controller.md,
#     "Security model"). The "steward" block below is exact, so a team policy
#     on namespace "*" gives no job capability there; and its "*" deny is a
#     closer variables glob than any "*" namespace's, so such a policy's
#     variables rules do not reach Steward's state either.

namespace "research" {
  variables {
    # The team's job records, as the job's Variables tab shows them.
    path "nomad/jobs/*" {
      capabilities = ["read"]
    }
    # Pause, resume and snooze requests for the team's own jobs.
    path "steward/requests/*" {
      capabilities = ["write"]
    }
    # The team's view of Steward's status: `steward status` and
    # `steward queue` with -namespace research.
    path "steward/status" {
      capabilities = ["read"]
    }
  }
}

namespace "steward" {
  variables {
    # Where the leading controller answers `steward job check`.
    path "steward/controller" {
      capabilities = ["read"]
    }
    # Nothing else of Steward's: its state, leader lock, the whole
    # cluster's status and anything a broader policy of the team's might
    # otherwise reach here.
    path "*" {
      capabilities = ["deny"]
    }
  }
}
