# steward-controller: the Steward controller as a Nomad service job, in
# Steward's own namespace (steward), where no tenant's token may write.
#
# Two copies run, on different nodes; a lease Steward keeps in a Nomad
# variable (steward/leader, -election lease with a 3 s TTL) lets one act
# while the other waits to take over, within about 6 s of the leader's
# death (Nomad's own variable lock takes 17-21 s: var.election). The
# policy lives in a Nomad variable the job's tasks can read
# (nomad/jobs/steward-controller in namespace steward), and is rendered to
# a file; changing the variable re-renders it and sends SIGHUP, which
# reloads the policy (a bad one is logged and the last good one kept) and
# re-reads the token file:
#
#   nomad namespace apply -description "Steward's state" steward
#   nomad var put -namespace steward -force nomad/jobs/steward-controller policy=@example.hcl
#   nomad job run -var image=steward/controller:local jobs/steward-controller.nomad.hcl
#
# or all of it (the ACL policy below too) in one idempotent command, which
# registers this file (built into the binary) with the same variables:
#
#   steward operator setup -policy example.hcl -var image=steward/controller:local
#
# The variables below can also come from a file (`nomad job run -var-file
# steward.vars.hcl`, `steward operator setup -var-file steward.vars.hcl`).
#
# Two variants (var.driver):
#
#   docker (the default): the controller image (`make image`: the steward
#     binary FROM scratch), never pulled (force_pull off; load it on the
#     controller's nodes), with network_mode "none". Its loopback is the
#     container's own: /healthz and /metrics are reached by nothing outside
#     it, so there is no Nomad service or check (see docs/install.md, "The
#     controller in a container"), and `steward job check` has no
#     controller to ask.
#   exec or raw_exec: the steward binary on the host (var.steward_bin),
#     listening on the node's loopback, where the node's Prometheus and
#     Nomad's health check reach it, and tenants' job checks over TLS.
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
# would see it); the controller reads it with -token-file. Under docker the
# secrets directory is mounted at /secrets, the socket with it.
#
# The task runs as a user of its own (var.user, "steward" by default:
# create it on the nodes of the controller's pool, with no login and no
# sudo; for docker with uid 65532, the uid the image gives "steward").
# Only then does Nomad write secrets/nomad_token 0600 for that user alone
# (it looks the name up on the host and chowns the file to that uid);
# without a `user`, or with one the host does not know (a bare uid such as
# "65532"), it writes it 0666 (0644 after the umask), where any other task
# on the node could take the controller's rights, and the controller
# refuses to start with a token file others may read. Docker resolves the
# same name in the image's /etc/passwd: the host's uid and the image's must
# be the same, or the container cannot read its own token.
#
# Under exec and raw_exec, /metrics and /healthz listen on the node's
# loopback (the node's own Prometheus and Nomad's health check reach them
# there). `steward job check` sends the caller's Nomad token, so checks are
# served off loopback only over TLS, with the operator's certificate and
# key (files on the nodes, readable by var.user alone): give
# -var tls_cert=... -var tls_key=...; without them checks are served on
# the node's loopback only.

variable "driver" {
  description = "Task driver: \"docker\" (the controller image), or \"exec\" or \"raw_exec\" (the steward binary on the host, var.steward_bin)."
  type        = string
  default     = "docker"

  validation {
    condition     = contains(["docker", "exec", "raw_exec"], var.driver)
    error_message = "The driver must be \"docker\", \"exec\" or \"raw_exec\"."
  }
}

variable "image" {
  description = "The controller image under docker, already on the controller's nodes (`make image` tags steward/controller:local and :<version>); never pulled. Not \":latest\", which Nomad always pulls."
  type        = string
  default     = "steward/controller:local"
}

variable "steward_bin" {
  description = "Path of the steward binary on the clients (exec and raw_exec)."
  type        = string
  default     = "/usr/local/bin/steward"
}

variable "nomad_addr" {
  description = "Nomad address for the controller; empty: the task API socket."
  type        = string
  default     = ""
}

variable "user" {
  description = "User the controller runs as (its own: never root, never a tenant's), by a name the host knows (and, under docker, the image, with the same uid)."
  type        = string
  default     = "steward"
}

variable "tls_cert" {
  description = "PEM certificate file on the nodes for the job-check listener (exec and raw_exec); empty: checks on loopback only."
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

variable "pprof" {
  description = "Serve Go's profiler at /debug/pprof/ beside /metrics, on the same loopback listener (for `steward operator debug`)."
  type        = bool
  default     = false
}

variable "election" {
  description = "How the copies elect their leader: \"lease\" (a lease in the variable steward/leader, any TTL of 1s or more: fails over in about 2×lock_ttl) or \"lock\" (Nomad's variable lock, whose TTL must be 10s at least: 17-21 s). Both copies must use the same."
  type        = string
  default     = "lease"

  validation {
    condition     = contains(["lease", "lock"], var.election)
    error_message = "The election must be \"lease\" or \"lock\"."
  }
}

variable "lock_ttl" {
  description = "The leader's lease or lock TTL (-lock-ttl): 3s fails over within 10 s under the lease; give 10s or more with election = \"lock\"."
  type        = string
  default     = "3s"
}

variable "count" {
  description = "Copies (one leads)."
  type        = number
  default     = 2
}

locals {
  docker = var.driver == "docker"

  # The controller's arguments under every driver (the image's entrypoint
  # is the steward binary; under exec and raw_exec, var.steward_bin). Nomad
  # gives ${NOMAD_TASK_DIR} and ${NOMAD_SECRETS_DIR} as
  # the task sees them: /local and /secrets in a container.
  #
  # -id is published where tenants read it (the leader's name): the
  # allocation's name, never its ID, which with the node would say where
  # the token file lies.
  args = concat([
    "controller",
    "-policy", "$${NOMAD_TASK_DIR}/policy.hcl",
    "-id", "$${NOMAD_ALLOC_NAME}",
    "-token-file", "$${NOMAD_SECRETS_DIR}/nomad_token",
    "-log-json",
    # A follower takes over 2×TTL after the leader's last renewal; the
    # lease renews every TTL/3 (one Raft write a second at 3s).
    "-election", var.election,
    "-lock-ttl", var.lock_ttl,
    ],
    # In a container of network_mode "none", loopback is the container's
    # own: /metrics, /healthz and job checks there reach no one outside
    # (`nomad alloc exec` does).
    local.docker ? ["-listen", "127.0.0.1:9646"] : concat(
      ["-listen", "127.0.0.1:$${NOMAD_PORT_metrics}"],
      var.tls_cert == "" ? ["-check-listen", "127.0.0.1:$${NOMAD_PORT_check}"] : [
        "-check-listen", "$${NOMAD_ADDR_check}", "-tls-cert", var.tls_cert, "-tls-key", var.tls_key,
    ]),
    # Nomad CE lets any token that may submit jobs name this pool (or
    # "all"): the controller holds every tenant job that can run here
    # (docs/reference/controller.md, "Security model").
    var.node_pool == "default" ? [] : ["-controller-pool", var.node_pool],
    var.pprof ? ["-pprof"] : [],
  )
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

    # Exec and raw_exec: ports on the node's loopback for /metrics and
    # /healthz (the service and its check) and for job checks. Under
    # docker (network_mode "none") nothing outside the container reaches
    # its loopback: no ports, no service (Nomad's own checks are http or
    # tcp from the node, never inside the task).
    dynamic "network" {
      for_each = local.docker ? [] : [1]
      content {
        port "metrics" {}
        port "check" {}
      }
    }

    dynamic "service" {
      for_each = local.docker ? [] : [1]
      content {
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
    }

    task "controller" {
      driver = var.driver
      # Under docker, the name resolves twice: on the host, where Nomad
      # chowns secrets/nomad_token to it, and in the image's /etc/passwd,
      # where Docker finds the uid the process runs as.
      user = var.user

      # The workload identity as a file, ${NOMAD_SECRETS_DIR}/nomad_token,
      # read by -token-file below.
      identity {
        file = true
      }

      dynamic "config" {
        for_each = local.docker ? [1] : []
        content {
          image = var.image
          # Never pulled: the image is loaded on the nodes (`make image`).
          force_pull = false
          # No interface but the container's own loopback.
          network_mode = "none"
          args         = local.args
        }
      }

      dynamic "config" {
        for_each = local.docker ? [] : [1]
        content {
          command = var.steward_bin
          args    = local.args
        }
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

      # The notify blocks' secrets (url_env, headers_from_env): each item of
      # the Nomad variable nomad/jobs/steward-controller/controller/controller
      # in namespace steward becomes one environment variable of the task,
      # so that webhook URLs and tokens stay out of the policy. The task's
      # workload identity reads that path (its own job, group and task)
      # without any rule; tenants have no rule in namespace steward, so they
      # can neither read nor write it. Put it with
      #
      #   nomad var put -namespace steward nomad/jobs/steward-controller/controller/controller \
      #     STEWARD_HOOK_URL=@hook-url.txt STEWARD_HOOK_AUTH=@hook-auth.txt
      #
      # or `steward operator setup -notify-env-file FILE`.
      #
      # nomadVarList, not nomadVar: a template on a variable that does not
      # exist waits for it, and the task with it; the list is empty, the
      # file has no items and the controller starts (a policy that needs
      # one says which is not set). Each value is quoted as a JSON string,
      # whose escapes are exactly those of the double-quoted values Nomad
      # parses (go-envparse), so a value arrives byte for byte, whatever
      # its quotes, backslashes, newlines, "$" or "=". An item whose name is
      # not an environment variable's ([A-Za-z_][A-Za-z0-9_]*), or is one
      # Nomad sets (NOMAD_*: it would replace the task's own, the API
      # address among them), or whose value holds a NUL byte (no
      # environment can carry one), is skipped, never renamed: its name is
      # listed in STEWARD_NOTIFY_ENV_SKIPPED, which the controller logs as a
      # warning at start, and names in the error when the policy needs it.
      #
      # A change restarts the task: a process's environment is fixed when
      # it starts, so a signal could not give it the new values. The other
      # copy leads meanwhile. The file is the client's alone (0400): Nomad
      # reads it, the task does not need to.
      template {
        destination = "secrets/notify.env"
        env         = true
        perms       = "0400"
        change_mode = "restart"
        data        = <<-EOT
          {{- $path := "nomad/jobs/steward-controller/controller/controller" }}
          {{- $skipped := "" }}
          {{- range nomadVarList $path }}{{ if eq .Path $path }}{{ with nomadVar .Path }}{{ range $name, $item := . }}
          {{- if and (regexMatch "^[A-Za-z_][A-Za-z0-9_]*$" $name) (not (regexMatch "^NOMAD_" $name)) (ne $name "STEWARD_NOTIFY_ENV_SKIPPED") (not (regexMatch "\x00" $item.Value)) }}
          {{ $name }}={{ toJSON $item.Value }}
          {{- else }}{{ $skipped = printf "%s %q" $skipped $name }}{{ end }}
          {{- end }}{{ end }}{{ end }}{{ end }}
          {{- if $skipped }}
          STEWARD_NOTIFY_ENV_SKIPPED={{ toJSON (trimSpace $skipped) }}
          {{- end }}
        EOT
      }

      # memory is Nomad's hard limit: a task above it is killed. The
      # controller's resident memory grows with the cluster it watches
      # (docs/evaluation.md, "At cluster scale": about 60 MiB on a few
      # nodes, 123 MiB at 250 nodes, 216 MiB at 1,000 under churn), so 512
      # leaves room up to about 1,000 nodes; raise it with the cluster.
      resources {
        cpu    = 200
        memory = 512
      }
    }
  }
}
