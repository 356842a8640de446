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
#
# With -var steward_bin=$PWD/bin/steward it also carries Steward's actions
# for the Nomad UI (pause, resume, keep-my-notebook) in a control group of
# their own. The job is a batch job, and that group runs until the job is
# stopped: stop it once training has ended (nomad job stop trainer).

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
