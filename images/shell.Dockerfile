# A shell and the usual tools (busybox, static) for example notebooks and
# GPU work in containers: FROM scratch, nothing pulled (`make image`).
FROM scratch
COPY busybox /bin/busybox
COPY busybox /bin/sh
ENTRYPOINT ["/bin/sh"]
