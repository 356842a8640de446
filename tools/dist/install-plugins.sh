#!/usr/bin/env bash
# install-plugins.sh -dir PLUGIN_DIR [-archive FILE] [-keyring FILE]
#
# Installs Steward's Nomad plugins (steward-gpu, steward-exec) from a
# release into a Nomad client's plugin_dir, verifying before it writes
# anything: SHA256SUMS's signature (gpgv), then the archive's sum. It is
# shipped next to the archives (`make dist` copies it into dist/), and run
# from there:
#
#   ./install-plugins.sh -dir /opt/nomad/plugins
#
# -archive  the archive to install from (default: the one in this
#           directory for this machine's platform)
# -keyring  the release's public key, as gpgv reads it (default:
#           steward-release-key.gpg next to this script). A key that comes
#           with the files it vouches for proves only that they are
#           unchanged since they were signed: for a release, pass the key
#           you obtained from the maintainers (docs/install.md).
#
# Each plugin is written beside its final name and renamed into place, so
# that a running Nomad client holding the old file is not disturbed ("text
# file busy"); the client loads the new one when it restarts.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
dir= archive= keyring=$here/steward-release-key.gpg
usage() { sed -n '2,2s/^# //p' "$0" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    -dir | --dir) dir=${2:?-dir needs a directory}; shift 2 ;;
    -archive | --archive) archive=${2:?-archive needs a file}; shift 2 ;;
    -keyring | --keyring) keyring=${2:?-keyring needs a file}; shift 2 ;;
    -h | -help | --help) usage ;;
    *) echo "install-plugins: unknown argument $1" >&2; usage ;;
  esac
done
[ -n "$dir" ] || { echo "install-plugins: -dir PLUGIN_DIR is required (the plugin_dir of the Nomad client's config)" >&2; usage; }
fail() { echo "install-plugins: $*" >&2; exit 1; }
for tool in gpgv sha256sum tar; do
  command -v $tool >/dev/null || fail "$tool is needed to verify the release (Debian: apt-get install gpgv coreutils tar)"
done

if [ -z "$archive" ]; then
  os=$(uname -s | tr '[:upper:]' '[:lower:]')
  case $(uname -m) in
    x86_64 | amd64) arch=amd64 ;;
    aarch64 | arm64) arch=arm64 ;;
    *) fail "no release archive for $(uname -m): pass -archive" ;;
  esac
  shopt -s nullglob
  found=("$here"/steward_*_"${os}_${arch}".tar.gz)
  shopt -u nullglob
  [ ${#found[@]} = 1 ] || fail "want one steward_*_${os}_${arch}.tar.gz in $here, found ${#found[@]}: pass -archive"
  archive=${found[0]}
fi
[ -f "$archive" ] || fail "no archive $archive"
sums=$here/SHA256SUMS
[ -f "$sums" ] && [ -f "$sums.sig" ] || fail "$sums and $sums.sig are needed next to this script"
[ -f "$keyring" ] || fail "no public key $keyring (-keyring)"

# 1. The sums are the ones the release key signed.
keyring=$(cd "$(dirname "$keyring")" && pwd)/$(basename "$keyring") # gpgv reads a bare name from ~/.gnupg
if ! out=$(gpgv --keyring "$keyring" "$sums.sig" "$sums" 2>&1); then
  echo "$out" >&2
  fail "the signature of $sums does not verify against $keyring: nothing installed"
fi
echo "$out" | grep -m1 'Good signature' || true

# 2. The archive is the one the sums name (its own line, by file name).
name=$(basename "$archive")
line=$(awk -v n="$name" '$2 == n || $2 == "*" n' "$sums")
[ -n "$line" ] || fail "$sums has no line for $name: nothing installed"
want=${line%% *}
got=$(sha256sum "$archive" | cut -d' ' -f1)
[ "$want" = "$got" ] || fail "$name: sha256 $got, but $sums says $want: nothing installed"

# 3. Unpack the two plugins and rename them into the plugin_dir.
base=${name%.tar.gz}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -xzf "$archive" -C "$work" "$base/steward-gpu" "$base/steward-exec" ||
  fail "$name lacks $base/steward-gpu or $base/steward-exec"
mkdir -p "$dir"
for p in steward-gpu steward-exec; do
  install -m 0755 "$work/$base/$p" "$dir/.$p.tmp"
  mv -f "$dir/.$p.tmp" "$dir/$p"
  echo "installed $dir/$p ($(sha256sum "$dir/$p" | cut -d' ' -f1), from $name)"
done
echo "Restart the Nomad client to load them; each needs its plugin block in the client's config (docs/install.md)."
