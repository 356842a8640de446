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
#
# The task runs as a host user of its own (var.user, "steward" by default:
# create it on the nodes of the controller's pool, with no login and no
# sudo). Only then does Nomad write secrets/nomad_token 0600 for that user
# alone; without a `user` it writes it 0666 (0644 after the umask), where
# any other task on the node could take the controller's rights, and the
# controller refuses to start with a token file others may read.
#
# /metrics and /healthz listen on loopback (the node's own Prometheus and
# Nomad's health check reach them there). `steward job check` sends the
# caller's Nomad token, so checks are served off loopback only over TLS,
# with the operator's certificate and key (files on the nodes, readable by
# var.user alone): give -var tls_cert=... -var tls_key=...; without them
# checks are served on the node's loopback only.

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

variable "user" {
  description = "Host user the controller runs as (its own: never root, never a tenant's)."
  type        = string
  default     = "steward"
}

variable "tls_cert" {
  description = "PEM certificate file on the nodes for the job-check listener; empty: checks on loopback only."
  type        = string
  default     = ""
}

variable "tls_key" {
  description = "PEM key file of tls_cert, readable by var.user alone."
  type        = string
  default     = ""
}

variable "node_pool" {
  description = "Node pool of the controller's nodes, of their own (see docs/install.md); the controller holds any tenant job that can run there."
  type        = string
  default     = "default"
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
  node_pool = var.node_pool

  group "controller" {
    count = var.count

    # The copies on different nodes: one node lost must not take both.
    constraint {
      operator = "distinct_hosts"
      value    = "true"
    }

    network {
      port "metrics" {}
      port "check" {}
    }

    service {
      name     = "steward-controller"
      provider = "nomad"
      port     = "metrics"
      # /healthz names the leader and its last error: loopback only.
      address = "127.0.0.1"

      check {
        type     = "http"
        path     = "/healthz"
        interval = "10s"
        timeout  = "2s"
      }
    }

    task "controller" {
      driver = "raw_exec"
      user   = var.user

      # The workload identity as a file, ${NOMAD_SECRETS_DIR}/nomad_token,
      # read by -token-file below.
      identity {
        file = true
      }

      config {
        command = var.steward_bin
        # -id is published where tenants read it (the leader's name):
        # the allocation's name, never its ID, which with the node would
        # say where the token file lies.
        args = concat([
          "controller",
          "-policy", "${NOMAD_TASK_DIR}/policy.hcl",
          "-listen", "127.0.0.1:${NOMAD_PORT_metrics}",
          "-id", "${NOMAD_ALLOC_NAME}",
          "-token-file", "${NOMAD_SECRETS_DIR}/nomad_token",
          "-log-json",
          ], var.tls_cert == "" ? ["-check-listen", "127.0.0.1:${NOMAD_PORT_check}"] : [
          "-check-listen", "${NOMAD_ADDR_check}", "-tls-cert", var.tls_cert, "-tls-key", var.tls_key,
          ],
          # Nomad CE lets any token that may submit jobs name this pool (or
          # "all"): the controller holds every tenant job that can run here
          # (docs/controller.md, "Security model").
          var.node_pool == "default" ? [] : ["-controller-pool", var.node_pool],
        )
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
