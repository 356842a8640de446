# The example trainer (jobs/trainer) in an image of its own: built FROM
# scratch with static binaries (`make image`), nothing pulled. busybox
# gives jobs a shell (/bin/sh) for their wrappers.
FROM scratch
COPY busybox /bin/busybox
COPY busybox /bin/sh
COPY trainer /bin/trainer
ENTRYPOINT ["/bin/trainer"]
