# train-docker: preemptible GPU training in a container, with Steward's
# checkpoint contract (docs/reference/driver.md, "The checkpoint contract"), which
# holds for any driver:
#
#   - signal and grace: when Steward preempts the job, the task gets the
#     checkpoint signal (STEWARD_CHECKPOINT_SIGNAL, SIGUSR1 here), and is
#     stopped with its kill signal after the policy's grace;
#   - checkpoint written: once the checkpoint is saved, the task touches
#     ${NOMAD_TASK_DIR}/steward-checkpoint-written (/local/... in the
#     container); Steward's controller reads it through Nomad's allocation
#     filesystem API and stops the task at once instead of at the end of
#     its grace;
#   - resumed: the template below renders STEWARD_RESUMED and
#     STEWARD_RESUME_COUNT from the job's own record (the variable
#     nomad/jobs/<job>, which the task's workload identity may read);
#   - checkpoints: STEWARD_CHECKPOINT_DIR, on the tenant's host volume,
#     which every GPU client of the tenant mounts from the same shared
#     storage (NFS or the like), so the job resumes on any of them.
#
# It runs jobs/trainer in the image images/trainer.Dockerfile builds
# (`make image` tags it steward/trainer:<version> and steward/trainer:local
# in DOCKER_HOST's daemon; nothing is pulled):
#
#   nomad job run -var namespace=ml -var checkpoint_volume=checkpoints-ml \
#     -var user=81001 jobs/train-docker.nomad.hcl
#
# The client's docker plugin must allow the GPU's device mounts and the
# host volume (Nomad's own mounts); it needs neither privileged containers
# nor docker's `volumes` option, which should stay off.

variable "namespace" {
  description = "The tenant's namespace."
  type        = string
  default     = "default"
}

variable "image" {
  description = "The trainer's image: images/trainer.Dockerfile, which `make image` tags steward/trainer:local (and the version)."
  type        = string
  default     = "steward/trainer:local"
}

variable "checkpoint_volume" {
  description = "The tenant's host volume for checkpoints (client config host_volume), the same shared directory on every GPU client; only this namespace's jobs may mount it (ACL host_volume rule)."
  type        = string
  default     = "checkpoints-default"
}

variable "user" {
  description = "The uid:gid the container runs as, the owner of the tenant's checkpoint directory (mode 0700); \"\": the image's user (root in the container: then only the volume and its ACL keep tenants apart)."
  type        = string
  default     = ""
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

variable "kill_timeout" {
  description = "Time between the kill signal and SIGKILL (capped by the client's max_kill_timeout, 30s by default)."
  type        = string
  default     = "20s"
}

job "train-docker" {
  namespace = var.namespace
  type      = "batch"

  meta = {
    "steward.tier" = "training"
    # The signal the controller sends, and the task traps (env below).
    "steward.checkpoint_signal" = "SIGUSR1"
  }

  group "train" {
    # The tenant's checkpoints: a preempted job resumes in a new
    # allocation, perhaps on another client, and finds them here.
    volume "checkpoints" {
      type      = "host"
      source    = var.checkpoint_volume
      read_only = false
    }

    task "train" {
      driver       = "docker"
      user         = var.user
      kill_signal  = "SIGTERM"
      kill_timeout = var.kill_timeout

      config {
        image        = var.image
        network_mode = "none"
        args = [
          "-steps", "${var.steps}",
          "-step-time", var.step_time,
          "-checkpoint-every", "${var.checkpoint_every}",
        ]
      }

      volume_mount {
        volume      = "checkpoints"
        destination = "/checkpoints"
      }

      env {
        # One directory per job, group and task in the tenant's volume.
        STEWARD_CHECKPOINT_DIR    = "/checkpoints/${NOMAD_JOB_ID}/${NOMAD_GROUP_NAME}/${NOMAD_TASK_NAME}"
        STEWARD_CHECKPOINT_SIGNAL = "SIGUSR1"
        # Where the task says its checkpoint is written (the trainer's
        # default too): the controller reads this file, and only it.
        STEWARD_CHECKPOINT_WRITTEN = "${NOMAD_TASK_DIR}/steward-checkpoint-written"
      }

      # Resumed? From the job's record, which Steward writes before it
      # signals: steward_resumed and steward_resume_count once it has asked
      # the job to checkpoint, nothing before (then 0). Rendered once, at
      # the task's start (change_mode noop: a preemption's record must not
      # restart the running task).
      template {
        destination = "secrets/steward-resume.env"
        env         = true
        change_mode = "noop"
        data        = <<-EOT
          {{- $path := printf "nomad/jobs/%s" (env "NOMAD_JOB_ID") }}
          {{- $resumed := "0" }}{{ $count := "0" }}
          {{- if nomadVarExists $path }}{{ with nomadVar $path }}
          {{- $resumed = or (index . "steward_resumed").Value "0" }}
          {{- $count = or (index . "steward_resume_count").Value "0" }}
          {{- end }}{{ end }}
          STEWARD_RESUMED={{ $resumed }}
          STEWARD_RESUME_COUNT={{ $count }}
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
