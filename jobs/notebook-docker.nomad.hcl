# notebook-docker: an interactive GPU notebook in a container. Steward
# gives it its tier's priority (interactive: it preempts training), and
# reclaims its GPU when it idles (the policy's idle rule for the tier: its
# GPU utilisation, as the client's device plugin reports it, under the
# threshold for the rule's time; a warning first with warn_before). The
# container needs nothing of Steward's: idleness is read from the device
# plugin's stats, not from the task.
#
# The default image is Steward's shell (images/shell.Dockerfile, `make
# image` tags it steward/shell:local; nothing is pulled) running a stand-in
# that reports GPU activity to simulated GPUs; for a real notebook give a
# Jupyter image and its command, and a network to reach it:
#
#   nomad job run -var namespace=ml jobs/notebook-docker.nomad.hcl
#   nomad job run -var namespace=ml -var image=quay.io/jupyter/pytorch-notebook:latest \
#     -var 'command=["start-notebook.py"]' -var network_mode=bridge jobs/notebook-docker.nomad.hcl
#
# (A real notebook also wants a port and a service in the group; without a
# network it is unreachable, which is what Steward's tests run.)

variable "namespace" {
  description = "The tenant's namespace."
  type        = string
  default     = "default"
}

variable "name" {
  description = "The job's name."
  type        = string
  default     = "notebook-docker"
}

variable "image" {
  description = "The notebook's image."
  type        = string
  default     = "steward/shell:local"
}

variable "command" {
  description = "The container's arguments (the image's entrypoint runs them). The default is a stand-in for a notebook: busy (80% on simulated GPUs) while /alloc/busy exists, idle otherwise."
  type        = list(string)
  default = ["-c", <<-EOT
    trap 'exit 0' TERM INT
    touch /alloc/busy
    while true; do
      u=0; [ -e /alloc/busy ] && u=80
      for f in $(echo "$STEWARD_SIM_ACTIVITY_FILES" | tr , ' '); do echo $u > "$f"; done
      sleep 1
    done
  EOT
  ]
}

variable "network_mode" {
  description = "The container's network: \"none\" (the default: nothing to reach or be reached by), \"bridge\" for a notebook people open."
  type        = string
  default     = "none"
}

variable "gpus" {
  description = "GPUs the notebook holds."
  type        = number
  default     = 1
}

job "notebook" {
  name      = var.name
  namespace = var.namespace
  type      = "service"

  meta = {
    "steward.tier" = "interactive"
  }

  group "notebook" {
    task "notebook" {
      driver      = "docker"
      kill_signal = "SIGTERM"

      config {
        image        = var.image
        network_mode = var.network_mode
        args         = var.command
      }

      resources {
        cpu    = 100
        memory = 128

        device "nvidia/gpu" {
          count = var.gpus
        }
      }
    }
  }
}
