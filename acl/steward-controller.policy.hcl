# The Nomad ACL policy the Steward controller needs, and nothing more.
#
#   nomad acl policy apply -description "Steward controller" steward-controller acl/steward-controller.policy.hcl
#   nomad acl token create -name steward-controller -policy steward-controller -type client
#
# Then run the controller with NOMAD_TOKEN set to the token's secret ID.
# What each capability is for:
#   list-jobs, read-job  read jobs, allocations, evaluations and job summaries
#                        (and their events in the event stream)
#   scale-job            hold and resume work (scale a group down and up again)
#   submit-job           set a job's priority to its tier's (re-register the job)
#   alloc-lifecycle      send the checkpoint signal and stop victim allocations
#   variables            nomad/jobs/<job>: the job's record shown in the UI;
#                        steward/*: the controller's own state, requests,
#                        status and leader lock
#   node read            client nodes, their GPUs and GPU activity (node stats)

namespace "*" {
  capabilities = ["list-jobs", "read-job", "scale-job", "submit-job", "alloc-lifecycle"]

  variables {
    path "nomad/jobs/*" {
      capabilities = ["read", "write", "list"]
    }
    path "steward/*" {
      capabilities = ["read", "write", "list", "destroy"]
    }
  }
}

node {
  policy = "read"
}
