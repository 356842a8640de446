# steward-controller: the Steward controller as a Nomad service job.
#
# Two copies run; a Nomad variable lock (steward/leader) lets one act while
# the other waits to take over. The policy lives in a Nomad variable the
# job's tasks can read, and is rendered to a file; changing the variable
# re-renders it and sends SIGHUP, which reloads the policy (a bad one is
# logged and the last good one kept):
#
#   nomad var put -force nomad/jobs/steward-controller policy=@example.hcl
#   nomad job run -var steward_bin=/usr/local/bin/steward jobs/steward-controller.nomad.hcl
#
# With ACLs on, give the job its rights through workload identity (no token
# to distribute; see acl/steward-controller.policy.hcl):
#
#   nomad acl policy apply -namespace default -job steward-controller \
#     steward-controller acl/steward-controller.policy.hcl
#
# The task talks to Nomad through its task API socket with that identity.

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
  type     = "service"
  priority = 100

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

      identity {
        env = true # NOMAD_TOKEN for the task API socket
      }

      config {
        command = var.steward_bin
        args = [
          "controller",
          "-policy", "${NOMAD_TASK_DIR}/policy.hcl",
          "-listen", "${NOMAD_ADDR_metrics}",
          "-id", "${NOMAD_ALLOC_ID}",
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
