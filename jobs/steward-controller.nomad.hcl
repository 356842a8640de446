# steward-controller: the Steward controller as a Nomad service job, in
# Steward's own namespace (steward), where no tenant's token may write.
#
# Two copies run; a Nomad variable lock (steward/leader) lets one act while
# the other waits to take over. The policy lives in a Nomad variable the
# job's tasks can read (nomad/jobs/steward-controller in namespace steward),
# and is rendered to a file; changing the variable re-renders it and sends
# SIGHUP, which reloads the policy (a bad one is logged and the last good
# one kept) and re-reads the token file:
#
#   nomad namespace apply -description "Steward's state" steward
#   nomad var put -namespace steward -force nomad/jobs/steward-controller policy=@example.hcl
#   nomad job run -var steward_bin=/usr/local/bin/steward jobs/steward-controller.nomad.hcl
#
# With ACLs on, give the job its rights through workload identity (no token
# to distribute; see acl/steward-controller.policy.hcl for each capability):
#
#   nomad acl policy apply -namespace steward -job steward-controller \
#     steward-controller acl/steward-controller.policy.hcl
#
# The task talks to Nomad through its task API socket with that identity,
# which Nomad writes to a file in the task's secrets directory (not into
# its environment, where every child process and `nomad alloc exec env`
# would see it); the controller reads it with -token-file.

variable "steward_bin" {
  description = "Path of the steward binary on the clients."
  type        = string
  default     = "/usr/local/bin/steward"
}

variable "nomad_addr" {
  description = "Nomad address for the controller; empty: the task API socket."
  type        = string
  default     = ""
}

variable "count" {
  description = "Copies (one leads)."
  type        = number
  default     = 2
}

job "steward-controller" {
  namespace = "steward"
  type      = "service"
  priority  = 100

  group "controller" {
    count = var.count

    network {
      port "metrics" {}
    }

    service {
      name     = "steward-controller"
      provider = "nomad"
      port     = "metrics"

      check {
        type     = "http"
        path     = "/healthz"
        interval = "10s"
        timeout  = "2s"
      }
    }

    task "controller" {
      driver = "raw_exec"

      # The workload identity as a file, ${NOMAD_SECRETS_DIR}/nomad_token,
      # read by -token-file below.
      identity {
        file = true
      }

      config {
        command = var.steward_bin
        args = [
          "controller",
          "-policy", "${NOMAD_TASK_DIR}/policy.hcl",
          "-listen", "${NOMAD_ADDR_metrics}",
          "-id", "${NOMAD_ALLOC_ID}",
          "-token-file", "${NOMAD_SECRETS_DIR}/nomad_token",
          "-log-json",
        ]
      }

      env {
        NOMAD_ADDR = var.nomad_addr != "" ? var.nomad_addr : "unix://${NOMAD_SECRETS_DIR}/api.sock"
      }

      template {
        destination   = "local/policy.hcl"
        change_mode   = "signal"
        change_signal = "SIGHUP"
        data          = <<-EOT
          {{- with nomadVar "nomad/jobs/steward-controller" }}{{ .policy }}{{ end }}
        EOT
      }

      resources {
        cpu    = 200
        memory = 128
      }
    }
  }
}
