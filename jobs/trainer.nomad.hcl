# trainer: preemptible GPU training with the steward-exec driver.
#
# It runs jobs/trainer (`make trainer` builds it into bin/trainer), which
# trains step by step, checkpoints every few steps and on the checkpoint
# signal, and resumes from its checkpoint when it runs again. When Steward
# preempts it, the driver forwards the checkpoint signal (an event on the
# allocation says so, with the reason), Nomad stops it with the kill signal
# after the controller's grace, and the job's next allocation starts with
# STEWARD_RESUMED=1 and continues from the checkpoint in
# STEWARD_CHECKPOINT_DIR (persistent when the client's steward-exec plugin
# has a checkpoint_root).
#
#   nomad job run -var trainer_bin=$PWD/bin/trainer jobs/trainer.nomad.hcl

variable "trainer_bin" {
  description = "Absolute path of the trainer binary on the client."
  type        = string
  default     = "/usr/local/bin/steward-trainer"
}

variable "steps" {
  description = "Steps to train in all."
  type        = number
  default     = 3000
}

variable "step_time" {
  description = "Duration of one step."
  type        = string
  default     = "200ms"
}

variable "checkpoint_every" {
  description = "Checkpoint interval, in steps."
  type        = number
  default     = 10
}

variable "save_on_stop" {
  description = "Whether the trainer checkpoints when stopped (false shows what a kill without one costs: at most one interval)."
  type        = bool
  default     = true
}

variable "kill_timeout" {
  description = "Time between the kill signal and SIGKILL (capped by the client's max_kill_timeout, 30s by default)."
  type        = string
  default     = "20s"
}

job "trainer" {
  type = "batch"

  meta = {
    "steward.tier" = "training"
    # "steward.checkpoint_signal" = "SIGUSR1"   # the policy's by default; "none" opts out
  }

  group "train" {
    task "train" {
      driver       = "steward-exec"
      kill_timeout = var.kill_timeout
      kill_signal  = "SIGTERM"

      config {
        command = var.trainer_bin
        args = [
          "-steps", "${var.steps}",
          "-step-time", var.step_time,
          "-checkpoint-every", "${var.checkpoint_every}",
          "-save-on-stop=${var.save_on_stop}",
        ]
        # checkpoint_signal = "SIGUSR1"   # overrides the job meta and the plugin default
      }

      # What Steward's controller wrote about a preemption (the job's
      # variable nomad/jobs/<job>), for the driver to put in the
      # checkpoint event: "checkpoint requested (SIGUSR1): preemption in
      # 2m: <reason>".
      template {
        destination = "local/steward-preemption.env"
        change_mode = "noop"
        # Render within a second of a change (Nomad's default waits 5s):
        # the controller signals a second after it writes the record.
        wait {
          min = "100ms"
          max = "500ms"
        }
        data        = <<-EOT
          {{- $path := printf "nomad/jobs/%s" (env "NOMAD_JOB_ID") -}}
          {{- if nomadVarExists $path }}{{ with nomadVar $path -}}
          reason={{ .steward_reason }}
          grace={{ .steward_grace }}
          preemptions={{ .steward_preemptions }}
          idle_warning={{ .steward_idle_warning }}
          idle_warning_at={{ .steward_idle_warning_at }}
          idle_warning_allocs={{ .steward_idle_warning_allocs }}
          {{ end }}{{ end -}}
        EOT
      }

      resources {
        cpu    = 100
        memory = 64

        device "nvidia/gpu" {
          count = 1
        }
      }
    }
  }
}
