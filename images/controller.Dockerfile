# The Steward controller (the steward binary, built without cgo) in an
# image of its own: FROM scratch, nothing pulled (`make image`). It runs
# as an unprivileged uid; jobs/steward-controller.nomad.hcl runs it.
FROM scratch
COPY steward /bin/steward
USER 65532:65532
ENTRYPOINT ["/bin/steward"]
