# gpu-work: a generic GPU job for Steward's stories, demo and tests, on
# simulated GPUs (the steward-gpu plugin with backend = "sim").
#
# Its tier, tenant (namespace), size and GPU activity are variables:
#
#   nomad job run -var name=train-a -var namespace=research -var tier=training \
#     -var gpus=3 jobs/gpu-work.nomad.hcl
#
# It reports busy_percent on its GPUs for busy_seconds, then idle_percent
# (with -var type=batch it finishes then instead: a batch job's work),
# with gpu_memory_mib of GPU memory held throughout,
# and on its checkpoint signal (SIGUSR1 by default, as example.hcl says)
# prints "checkpoint" — the way a real trainer would save its state.
#
# With -var steward_bin=/usr/local/bin/steward it also carries Steward's
# actions for the Nomad UI (pause, resume, keep-my-notebook) in a control
# group of their own.

variable "name" {
  type    = string
  default = "gpu-work"
}

variable "namespace" {
  type    = string
  default = "default"
}

variable "tier" {
  type    = string
  default = "training"
}

variable "gpus" {
  description = "GPUs per allocation."
  type        = number
  default     = 1
}

variable "count" {
  description = "Allocations."
  type        = number
  default     = 1
}

variable "busy_percent" {
  type    = number
  default = 90
}

variable "busy_seconds" {
  type    = number
  default = 86400
}

variable "idle_percent" {
  type    = number
  default = 2
}

variable "gpu_memory_mib" {
  description = "GPU memory the work holds on each GPU, in MiB, busy or idle (a loaded model stays loaded): reported with its utilisation. 0: none reported."
  type        = number
  default     = 0
}

variable "type" {
  description = "The job's type: \"service\" (the default) works on after busy_seconds, idle; \"batch\" finishes then (exit 0)."
  type        = string
  default     = "service"
}

variable "priority" {
  description = "Nomad job priority. Steward sets it to the tier's anyway."
  type        = number
  default     = 50
}

variable "gang" {
  description = "steward.gang: true makes all allocations one gang."
  type        = string
  default     = "false"
}

variable "device" {
  description = "The device request: \"nvidia/gpu\" for any GPU, \"nvidia/gpu/<model>\" for one model."
  type        = string
  default     = "nvidia/gpu"
}

variable "min_memory" {
  description = "Only GPUs with at least this much memory (\"60 GiB\"): a constraint on the device's memory attribute. \"\" for none."
  type        = string
  default     = ""
}

variable "node_pool" {
  description = "The Nomad node pool to run in (\"all\": any)."
  type        = string
  default     = "default"
}

variable "node" {
  description = "Pin the group to this node (by $${node.unique.name}); \"\" for any node."
  type        = string
  default     = ""
}

variable "checkpoint_signal" {
  description = "steward.checkpoint_signal: overrides the policy's checkpoint signal (\"\" keeps it)."
  type        = string
  default     = ""
}

variable "steward_bin" {
  description = "Absolute path of the steward binary on the client. Set, the job gets a control group, \"steward\", whose actions (pause, resume, keep-my-notebook) a user runs from the job's page in the Nomad UI; \"\" (the default): no control group."
  type        = string
  default     = ""
}

variable "snooze" {
  description = "How long the keep-my-notebook action keeps the job's idle rule off it (at most the rule's max_snooze)."
  type        = string
  default     = "2h"
}

variable "control_driver" {
  description = "The control group's task driver: one with exec support that runs the steward binary on the client (raw_exec on a dev agent; exec, isolated, on production clients)."
  type        = string
  default     = "raw_exec"
}

job "gpu-work" {
  name      = var.name
  id        = var.name
  namespace = var.namespace
  type      = var.type
  priority  = var.priority
  node_pool = var.node_pool

  meta = {
    "steward.tier"              = var.tier
    "steward.gang"              = var.gang
    "steward.checkpoint_signal" = var.checkpoint_signal
  }

  group "work" {
    count = var.count

    dynamic "constraint" {
      for_each = var.node == "" ? [] : [var.node]
      content {
        attribute = "$${node.unique.name}"
        value     = constraint.value
      }
    }

    restart {
      attempts = 0
      mode     = "fail"
    }

    reschedule {
      attempts  = 0
      unlimited = false
    }

    task "work" {
      driver       = "raw_exec"
      kill_timeout = "5s"

      config {
        command = "/bin/sh"
        args    = ["${NOMAD_TASK_DIR}/work.sh"]
      }

      template {
        destination = "local/work.sh"
        perms       = "755"
        data        = <<-EOT
          #!/bin/sh
          set -eu
          : "$${STEWARD_SIM_ACTIVITY_FILES:?not set: is the steward-gpu plugin running with backend = \"sim\"?}"
          mem=${var.gpu_memory_mib}
          report() {
            line="$1"
            if [ "$mem" -gt 0 ]; then line="$1 $mem"; fi
            for f in $(echo "$STEWARD_SIM_ACTIVITY_FILES" | tr ',' ' '); do echo "$line" > "$f"; done
            echo "$(date -u +%FT%TZ) utilisation $1% and $mem MiB on $NVIDIA_VISIBLE_DEVICES"
          }
          trap 'echo "$(date -u +%FT%TZ) checkpoint requested: saving state"' USR1
          trap 'report 0; echo "$(date -u +%FT%TZ) stopping"; exit 0' TERM INT
          # Sleep in the background and wait for it, so that a signal's trap
          # runs at once rather than after the current sleep.
          nap() { sleep 1 & wait $! || true; }
          report ${var.busy_percent}
          end=$(( $(date +%s) + ${var.busy_seconds} ))
          while [ "$(date +%s)" -lt "$end" ]; do nap; done
          report ${var.idle_percent}
          if [ "${var.type}" = "batch" ]; then echo "$(date -u +%FT%TZ) done"; exit 0; fi
          while true; do nap; done
        EOT
      }

      resources {
        cpu    = 20
        memory = 16

        # A device block's name is its label: a dynamic block sets it from
        # a variable.
        dynamic "device" {
          for_each = [var.device]
          labels   = [device.value]
          content {
            count = var.gpus

            dynamic "constraint" {
              for_each = var.min_memory == "" ? [] : [var.min_memory]
              content {
                attribute = "$${device.attr.memory}"
                operator  = ">="
                value     = constraint.value
              }
            }
          }
        }
      }
    }
  }

  # Actions in the Nomad UI (the job's page, "Actions"): pause, resume and
  # keep-my-notebook, each the steward CLI run in this small control
  # group's task. Not in the GPU group: while Steward holds the job that
  # group runs no allocation to run "resume" in, and the steward-exec
  # driver runs no commands in its tasks. Steward never holds, preempts or
  # counts this group: it asks for no GPUs. The actions act with the task's
  # workload identity (NOMAD_TOKEN, through the task API socket) and what
  # the operator binds to the job: acl/steward-user.policy.hcl, adapted to
  # the namespace (docs/users.md, "Actions in the Nomad UI").
  dynamic "group" {
    for_each = var.steward_bin == "" ? [] : [var.steward_bin]
    labels   = ["steward"]
    content {
      count = 1

      task "actions" {
        driver = var.control_driver

        config {
          command = "/bin/sh"
          args    = ["-c", "trap 'kill $! 2>/dev/null; exit 0' TERM INT; while true; do sleep 3600 & wait $!; done"]
        }

        identity {
          env = true
        }

        env {
          STEWARD_BIN    = group.value
          STEWARD_SNOOZE = var.snooze
        }

        action "pause" {
          command = "/bin/sh"
          args    = ["-c", "exec \"$STEWARD_BIN\" pause -address \"$NOMAD_UNIX_ADDR\" -namespace \"$NOMAD_NAMESPACE\" \"$NOMAD_JOB_ID\""]
        }

        action "resume" {
          command = "/bin/sh"
          args    = ["-c", "exec \"$STEWARD_BIN\" resume -address \"$NOMAD_UNIX_ADDR\" -namespace \"$NOMAD_NAMESPACE\" \"$NOMAD_JOB_ID\""]
        }

        # While the job waits for GPUs: first among the team's own
        # waiting jobs (steward queue move -top; other teams keep their
        # places).
        action "move-to-top" {
          command = "/bin/sh"
          args    = ["-c", "exec \"$STEWARD_BIN\" queue move -address \"$NOMAD_UNIX_ADDR\" -namespace \"$NOMAD_NAMESPACE\" \"$NOMAD_JOB_ID\" -top"]
        }

        action "keep-my-notebook" {
          command = "/bin/sh"
          args    = ["-c", "exec \"$STEWARD_BIN\" snooze -address \"$NOMAD_UNIX_ADDR\" -namespace \"$NOMAD_NAMESPACE\" \"$NOMAD_JOB_ID\" \"$STEWARD_SNOOZE\""]
        }

        resources {
          cpu    = 20
          memory = 32
        }
      }
    }
  }
}
