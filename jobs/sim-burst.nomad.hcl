# sim-burst: a GPU job that is busy for a while and then idles, for demos
# and tests on simulated GPUs (the steward-gpu plugin with backend = "sim").
#
# It reports its activity only the way a simulated GPU learns it: the
# plugin's Reserve gives the task STEWARD_SIM_ACTIVITY_FILES (one file per
# GPU it was given); the task writes a utilisation percentage there, and
# the plugin reads it back in Stats, so the figures show up in
# `nomad alloc status -stats` and /v1/client/allocation/:id/stats.
#
#   nomad job run jobs/sim-burst.nomad.hcl
#   nomad job run -var busy_seconds=20 -var idle_seconds=60 jobs/sim-burst.nomad.hcl

variable "gpus" {
  description = "How many GPUs to ask for."
  type        = number
  default     = 1
}

variable "busy_seconds" {
  description = "How long the job keeps its GPUs busy."
  type        = number
  default     = 120
}

variable "busy_percent" {
  description = "GPU utilisation reported while busy."
  type        = number
  default     = 80
}

variable "idle_seconds" {
  description = "How long the job then sits idle on its GPUs before it exits."
  type        = number
  default     = 3600
}

variable "idle_percent" {
  description = "GPU utilisation reported while idle."
  type        = number
  default     = 5
}

job "sim-burst" {
  type = "batch"

  group "burst" {
    restart {
      attempts = 0
      mode     = "fail"
    }

    reschedule {
      attempts  = 0
      unlimited = false
    }

    task "burst" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["${NOMAD_TASK_DIR}/burst.sh"]
      }

      template {
        destination = "local/burst.sh"
        perms       = "755"
        data        = <<-EOT
          #!/bin/sh
          # Report GPU activity to the steward-gpu plugin's simulated GPUs.
          set -eu
          : "$${STEWARD_SIM_ACTIVITY_FILES:?not set: is the steward-gpu plugin running with backend = \"sim\"?}"

          report() {
            for f in $(echo "$STEWARD_SIM_ACTIVITY_FILES" | tr ',' ' '); do
              echo "$1" > "$f"
            done
            echo "$(date -u +%FT%TZ) utilisation $1% on $NVIDIA_VISIBLE_DEVICES"
          }

          echo "GPUs: $NVIDIA_VISIBLE_DEVICES"
          echo "activity files: $STEWARD_SIM_ACTIVITY_FILES"
          report ${var.busy_percent}
          sleep ${var.busy_seconds}
          report ${var.idle_percent}
          sleep ${var.idle_seconds}
          echo "done"
        EOT
      }

      resources {
        cpu    = 50
        memory = 32

        device "nvidia/gpu" {
          count = var.gpus
        }
      }
    }
  }
}
