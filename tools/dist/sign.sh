#!/usr/bin/env bash
# sign.sh DIR : signs DIR/SHA256SUMS for a release (dist.sh runs it).
#
# Writes DIR/SHA256SUMS.sig (a detached gpg signature) and the public key
# next to it: steward-release-key.gpg (binary, what gpgv --keyring reads)
# and steward-release-key.asc (armored, for gpg --import); then checks the
# signature with gpgv against the exported key alone, as a user will.
#
# DIST_GPG_KEY names the release key (its fingerprint, best: a user id may
# match several keys) in the maintainer's own keyring (GNUPGHOME,
# gpg-agent, a smartcard): the real release. Without it, a throwaway key is
# made in a temporary GNUPGHOME and deleted with it: the signature then
# proves only that the sums were not changed since the build (what the
# tests check), never who built them; the script says so. No secret key is
# ever in the repository.
set -euo pipefail

dir=${1:?usage: sign.sh DIR}
for tool in gpg gpgv gpgconf; do
  command -v $tool >/dev/null || { echo "sign: $tool is needed to sign the sums (Debian: apt-get install gnupg gpgv; make gpg)" >&2; exit 1; }
done
[ -f "$dir/SHA256SUMS" ] || { echo "sign: no $dir/SHA256SUMS" >&2; exit 1; }
cd "$dir"

gnupghome=
cleanup() {
  # gpg starts a gpg-agent for the temporary GNUPGHOME: stop it with it.
  if [ -n "$gnupghome" ]; then
    gpgconf --homedir "$gnupghome" --kill all 2>/dev/null || true
    rm -rf "$gnupghome"
  fi
}
trap cleanup EXIT

key=${DIST_GPG_KEY:-}
if [ -z "$key" ]; then
  # A short path of its own, not $TMPDIR: gpg-agent's socket lives in it,
  # and a socket's path has at most 107 bytes.
  gnupghome=$(mktemp -d /tmp/steward-dist-gpg.XXXXXX)
  export GNUPGHOME=$gnupghome
  key="Steward test release key, NOT a release key (made for one build) <release-test@steward.invalid>"
  gpg --batch --quiet --passphrase '' --quick-gen-key "$key" ed25519 sign 1d
  echo "sign: WARNING: signed with a throwaway key made for this build (DIST_GPG_KEY unset): the signature shows the sums are unchanged since the build, not who built them. Sign a release with DIST_GPG_KEY=<release key fingerprint> (CONTRIBUTING.md)." >&2
fi
fprs=$({ gpg --batch --quiet --with-colons --list-secret-keys "$key" 2>/dev/null || true; } | awk -F: '$1=="sec"{getline; if ($1=="fpr") print $10}')
[ -n "$fprs" ] || { echo "sign: no secret key $key in ${GNUPGHOME:-~/.gnupg}" >&2; exit 1; }
[ "$(echo "$fprs" | wc -l)" = 1 ] || { echo "sign: DIST_GPG_KEY=$key names several keys; give one fingerprint:" >&2; echo "$fprs" >&2; exit 1; }
gpg --batch --yes --quiet --local-user "$fprs" --detach-sign --output SHA256SUMS.sig SHA256SUMS
gpg --batch --yes --quiet --export "$fprs" >steward-release-key.gpg
gpg --batch --yes --quiet --armor --export "$fprs" >steward-release-key.asc
[ -s steward-release-key.gpg ] || { echo "sign: gpg exported no public key for $key" >&2; exit 1; }
gpgv --keyring "$PWD/steward-release-key.gpg" SHA256SUMS.sig SHA256SUMS
echo "==> $PWD/SHA256SUMS.sig, signed by $fprs"
