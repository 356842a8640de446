# The Steward controller (the steward binary, built without cgo) in an
# image of its own: FROM scratch, nothing pulled (`make image`). It runs
# as an unprivileged uid, 65532, named "steward" in the image's
# /etc/passwd (images/passwd), as "nobody" is 65534: a job's `user` names
# one of them, which Docker resolves here and Nomad on the host (to chown
# the task's token file to it), so the host's user of that name must have
# the same uid. jobs/steward-controller.nomad.hcl runs it.
FROM scratch
COPY steward /bin/steward
COPY passwd /etc/passwd
COPY group /etc/group
USER 65532:65532
ENTRYPOINT ["/bin/steward"]
