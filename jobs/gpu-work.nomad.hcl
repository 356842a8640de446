# gpu-work: a generic GPU job for Steward's stories, demo and tests, on
# simulated GPUs (the steward-gpu plugin with backend = "sim").
#
# Its tier, tenant (namespace), size and GPU activity are variables:
#
#   nomad job run -var name=train-a -var namespace=research -var tier=training \
#     -var gpus=3 jobs/gpu-work.nomad.hcl
#
# It reports busy_percent on its GPUs for busy_seconds, then idle_percent,
# and on its checkpoint signal (SIGUSR1 by default, as example.hcl says)
# prints "checkpoint" — the way a real trainer would save its state.

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

variable "checkpoint_signal" {
  description = "steward.checkpoint_signal: overrides the policy's checkpoint signal (\"\" keeps it)."
  type        = string
  default     = ""
}

job "gpu-work" {
  name      = var.name
  id        = var.name
  namespace = var.namespace
  type      = "service"
  priority  = var.priority
  node_pool = var.node_pool

  meta = {
    "steward.tier"              = var.tier
    "steward.gang"              = var.gang
    "steward.checkpoint_signal" = var.checkpoint_signal
  }

  group "work" {
    count = var.count

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
          report() {
            for f in $(echo "$STEWARD_SIM_ACTIVITY_FILES" | tr ',' ' '); do echo "$1" > "$f"; done
            echo "$(date -u +%FT%TZ) utilisation $1% on $NVIDIA_VISIBLE_DEVICES"
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
}
