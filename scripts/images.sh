#!/usr/bin/env bash
# Builds the two Corium Fleet container images (`make images` runs this from the repository root):
#
#   $IMAGE_PREFIX/corium-fleet-transactor:$IMAGE_TAG   entrypoint /usr/local/bin/corium-fleet-transactor
#   $IMAGE_PREFIX/corium-fleet-ingress:$IMAGE_TAG      entrypoint /usr/local/bin/corium-fleet-ingress
#
# With a Docker engine that answers (`docker info` succeeds), it runs the two `docker build`s of
# docker/Dockerfile, as `make images` always did. Without one (no daemon, or no registry to pull
# rust:1.95-bookworm and gcr.io/distroless/cc-debian12 from), it builds the same images daemonless
# with buildah, FROM SCRATCH: nothing is pulled. What the Dockerfile's runtime stage gets from the
# distroless base is copied from this host instead, which runs the same Debian 12 (bookworm) glibc:
#
#   - the three binaries of the host release build (`cargo build --release --locked`, the usual
#     target/), stripped, in /usr/local/bin;
#   - the shared libraries `ldd` lists for them and for /usr/bin/sleep (the chart's preStop hook
#     runs it), the dynamic loader at its exact path, and the host's merged-/usr symlinks;
#   - /etc/ssl/certs/ca-certificates.crt, an /etc/passwd and /etc/group with nonroot 65532, an
#     /etc/nsswitch.conf, /home/nonroot owned by 65532, /tmp with mode 1777;
#   - the config of the Dockerfile's stages: USER 65532:65532, WORKDIR /home/nonroot, the
#     entrypoint, EXPOSE, distroless's PATH and SSL_CERT_FILE, OCI labels (source, version,
#     revision = git HEAD).
#
# One layer (CLI, sleep, libraries, /etc) is shared by both images, as the Dockerfile's runtime
# stage is; each image adds its binary on top. Buildah runs as root with the vfs storage driver
# and chroot isolation (no overlay mounts, no OCI runtime, no network setup), and keeps its
# storage, run root, temporary files and network config under target/images/, nothing outside.
# Each image is also written to target/images/corium-fleet-{transactor,ingress}.oci.tar
# (oci-archive: `skopeo copy oci-archive:FILE ...`, `podman load -i FILE`).
#
# Every image is then checked for real, and the script fails on the first check that does not
# hold: its config (user, workdir, entrypoint, ports, labels), the ownership and modes of
# /home/nonroot and /tmp, its entrypoint run inside it (`buildah run`, as user 65532) with
# --version, `corium-fleet --help` and `/usr/bin/sleep 0` inside it, and the archive imported
# into a throwaway store, where it must be the same image.
#
# Environment: IMAGE_PREFIX (default corium-fleet), IMAGE_TAG (default: the workspace version),
# IMAGE_SOURCE (the source label; default: git remote origin, else the chart's `sources`),
# IMAGE_BUILDER=auto|docker|buildah (default auto: docker when `docker info` succeeds).
# Re-runnable: each run replaces the images, containers and archives of the previous one.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$PWD
IMAGE_PREFIX=${IMAGE_PREFIX:-corium-fleet}
IMAGE_TAG=${IMAGE_TAG:-$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)}
IMAGE_BUILDER=${IMAGE_BUILDER:-auto}
[[ -n $IMAGE_TAG ]] || { echo "images: no IMAGE_TAG and no version in Cargo.toml" >&2; exit 2; }

NODES=(transactor ingress)
declare -A PORTS=([transactor]="7001 9101" [ingress]="4334 4443 9102")
declare -A TITLES=([transactor]="Corium Fleet transactor node" [ingress]="Corium Fleet ingress")

say() { printf '\n==> %s\n' "$*"; }
note() { printf '    %s\n' "$*"; }
fail() {
  printf '\nimages: FAILED: %s\n' "$*" >&2
  exit 1
}

# --- Docker engine: the Dockerfile, unchanged ------------------------------------------------
docker_engine() { command -v docker >/dev/null && timeout 30 docker info >/dev/null 2>&1; }

case $IMAGE_BUILDER in
  auto) if docker_engine; then IMAGE_BUILDER=docker; else IMAGE_BUILDER=buildah; fi ;;
  docker | buildah) ;;
  *) fail "IMAGE_BUILDER must be auto, docker or buildah, not '$IMAGE_BUILDER'" ;;
esac

if [[ $IMAGE_BUILDER == docker ]]; then
  docker_engine || fail "IMAGE_BUILDER=docker, but \`docker info\` fails (no engine answers)"
  say "Docker engine found: docker build -f docker/Dockerfile (BuildKit)"
  for node in "${NODES[@]}"; do
    docker build -f docker/Dockerfile --target "$node" \
      -t "$IMAGE_PREFIX/corium-fleet-$node:$IMAGE_TAG" .
  done
  say "Built (docker):"
  for node in "${NODES[@]}"; do note "$IMAGE_PREFIX/corium-fleet-$node:$IMAGE_TAG"; done
  exit 0
fi

# --- Daemonless: buildah from scratch -------------------------------------------------------
OUT=$REPO/target/images
STORE=$OUT/containers
STAGE=$OUT/stage

if [[ -z ${CORIUM_IMAGES_NAMESPACE:-} ]]; then
  say "No Docker engine answers (\`docker info\`): building daemonless with buildah, FROM scratch"
  if ! command -v buildah >/dev/null; then
    say "Installing buildah (Debian)"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q buildah >/dev/null
  fi
  for tool in buildah cargo git ldd strip stat unshare mount; do
    command -v "$tool" >/dev/null || fail "$tool is missing"
  done
  [[ $(id -u) == 0 ]] || fail "the daemonless build runs buildah as root (vfs storage, chroot isolation)"
  # Whatever --root says, buildah writes a few files at fixed host paths: its blob-info cache
  # (/var/lib/containers/cache), the short-name alias lock (/var/cache/containers), and an
  # oci-archive import unpacks in /var/tmp. So the rest runs in a private mount namespace in
  # which /var/lib, /var/cache and /var/tmp are directories under target/images/host (neither
  # buildah nor cargo needs what the host keeps there); the mounts end with the script.
  mkdir -p "$OUT/host/var-lib" "$OUT/host/var-cache" "$OUT/host/var-tmp"
  chmod 1777 "$OUT/host/var-tmp"
  CORIUM_IMAGES_NAMESPACE=1 IMAGE_BUILDER=buildah IMAGE_PREFIX=$IMAGE_PREFIX IMAGE_TAG=$IMAGE_TAG \
    exec unshare --mount --propagation private -- bash "${BASH_SOURCE[0]}"
fi
START=$SECONDS
for d in lib cache tmp; do mount --bind "$OUT/host/var-$d" "/var/$d"; done

mkdir -p "$STORE" "$OUT/runroot" "$OUT/tmp"
# Buildah's own files stay under target/images: storage and run root by flag, temporary files
# by TMPDIR, and a containers.conf whose network backend (unused: chroot isolation sets up no
# network) keeps its lock there instead of in /run/containers/networks.
cat >"$OUT/containers.conf" <<EOF
# Written by scripts/images.sh: buildah's config for make images.
[engine]
image_copy_tmp_dir = "$OUT/tmp"
[network]
network_backend = "cni"
network_config_dir = "$OUT/cni"
EOF
export CONTAINERS_CONF=$OUT/containers.conf TMPDIR=$OUT/tmp BUILDAH_ISOLATION=chroot
B=(buildah --root "$STORE" --runroot "$OUT/runroot" --storage-driver vfs)
note "$("${B[@]}" --version), storage $STORE (vfs), isolation chroot"

# Local storage names: a repository without a registry host is localhost/... (buildah stores it
# so anyway); with it spelled out, no name goes through registries.conf's short-name resolution.
image_name() { # NODE
  local repo=$IMAGE_PREFIX/corium-fleet-$1 host
  host=${repo%%/*}
  if [[ $host != *.* && $host != *:* && $host != localhost ]]; then repo=localhost/$repo; fi
  echo "$repo:$IMAGE_TAG"
}

REVISION=$(git rev-parse HEAD)
# Deterministic timestamps (created time, file times in the layers): the HEAD commit's.
EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct HEAD)}
if [[ -z ${IMAGE_SOURCE:-} ]]; then
  IMAGE_SOURCE=$(git config --get remote.origin.url || true)
  [[ -n $IMAGE_SOURCE ]] ||
    IMAGE_SOURCE=$(sed -n '/^sources:/{n;s/^ *- *//p;}' charts/corium-fleet/Chart.yaml | head -1)
fi
note "version $IMAGE_TAG, revision $REVISION, source ${IMAGE_SOURCE:-none}"
if [[ -n $(git status --porcelain --untracked-files=no) ]]; then
  note "(the work tree differs from HEAD: the binaries are built from the work tree as it is)"
fi

# Working containers this run made: removed on exit, also when a step fails.
CONTAINERS=()
cleanup() {
  local c
  for c in "${CONTAINERS[@]}"; do "${B[@]}" rm "$c" >/dev/null 2>&1 || true; done
  rm -rf "$OUT/verify" "$STAGE"
}
trap cleanup EXIT
new_container() { # IMAGE NAME (called directly, not in $(...), so that CONTAINERS keeps it)
  "${B[@]}" from --pull=never --quiet --name "$2" "$1" >/dev/null
  CONTAINERS+=("$2")
}
drop_container() {
  "${B[@]}" rm "$1" >/dev/null
  local kept=() c
  for c in "${CONTAINERS[@]}"; do [[ $c == "$1" ]] || kept+=("$c"); done
  CONTAINERS=("${kept[@]}")
}

say "cargo build --release --locked (target/release, incremental), the Corium patches applied first"
bash scripts/corium-patch.sh apply || fail "the Corium patches did not apply (patches/README.md)"
cargo build --release --locked \
  --bin corium-fleet-transactor --bin corium-fleet-ingress --bin corium-fleet ||
  fail "cargo build --release --locked (the previous images are left as they were)"

say "Stripped copies in $STAGE"
rm -rf "$STAGE"
mkdir -p "$STAGE"
for bin in corium-fleet-transactor corium-fleet-ingress corium-fleet; do
  strip -o "$STAGE/$bin" "target/release/$bin"
  chmod 0755 "$STAGE/$bin"
  note "$bin: $(stat -c %s "target/release/$bin") -> $(stat -c %s "$STAGE/$bin") bytes"
done

# Only now that the binaries are there: a failed build leaves the previous images alone.
say "Removing the previous run's containers and images from $STORE"
"${B[@]}" rm --all >/dev/null
BASE=localhost/corium-fleet-images/runtime:$IMAGE_TAG
# The images first, then the runtime image they are built on.
for node in "${NODES[@]}"; do
  img=$(image_name "$node")
  if "${B[@]}" inspect --type image "$img" >/dev/null 2>&1; then "${B[@]}" rmi "$img" >/dev/null; fi
done
# (Images of another IMAGE_PREFIX may still build on it: then the new one just takes its name.)
if "${B[@]}" inspect --type image "$BASE" >/dev/null 2>&1; then
  "${B[@]}" rmi "$BASE" >/dev/null 2>&1 || note "(the previous $BASE stays: other images build on it)"
fi
"${B[@]}" rmi --prune >/dev/null 2>&1 || true
rm -f "$OUT"/corium-fleet-*.oci.tar

# --- The runtime layer (the Dockerfile's `runtime` stage on distroless cc-debian12:nonroot) --

# Copies host file $1 into the root $2 at the same path. A symlink on the way is recreated as
# the same symlink, and its target copied too, so paths resolve inside the image as on the host
# (the loader's /lib64/ld-linux-x86-64.so.2 -> /lib/x86_64-linux-gnu/...). Only resolved
# directories are written under $2, so no symlink in $2 ever leads out of it.
copy_in() {
  local path=$1 root=$2 real dir link
  real=$(readlink -f "$path")
  [[ -f $real ]] || fail "$path: no such file on this host"
  mkdir -p "$root$(dirname "$real")"
  cp -L --preserve=mode "$real" "$root$real"
  while [[ -L $path ]]; do
    dir=$(readlink -f "$(dirname "$path")")
    link=$(readlink "$path")
    mkdir -p "$root$dir"
    ln -sfn "$link" "$root$dir/$(basename "$path")"
    if [[ $link == /* ]]; then path=$link; else path=$dir/$link; fi
  done
}

# The shared libraries (and the loader) `ldd` lists for a program.
libs_of() {
  local out
  out=$(ldd "$1") || fail "ldd $1 failed: $out"
  if grep -q 'not found' <<<"$out"; then fail "ldd $1: a library is missing: $out"; fi
  awk '$2 == "=>" && $3 ~ /^\// { print $3; next } $1 ~ /^\// { print $1 }' <<<"$out"
}

say "Runtime layer: libraries, loader, CA certificates, users, sleep, the CLI"
mapfile -t LIBS < <(
  for f in "$STAGE"/corium-fleet-transactor "$STAGE"/corium-fleet-ingress "$STAGE"/corium-fleet \
    /usr/bin/sleep; do libs_of "$f"; done | sort -u
)
[[ ${#LIBS[@]} -gt 0 ]] || fail "ldd found no libraries (are the binaries static?)"
ctr=corium-fleet-runtime-work
new_container scratch "$ctr"
root=$("${B[@]}" mount "$ctr")
# The host's merged /usr (bookworm: /lib -> usr/lib, /lib64 -> usr/lib64, ...), relative links.
for d in bin sbin lib lib64; do
  if [[ -L /$d ]]; then
    link=$(readlink "/$d")
    [[ $link != /* ]] || fail "/$d -> $link: expected a relative merged-/usr link"
    ln -sfn "$link" "$root/$d"
    mkdir -p "$root/$link"
  fi
done
for lib in "${LIBS[@]}"; do
  copy_in "$lib" "$root"
  note "$lib"
done
copy_in /usr/bin/sleep "$root"
copy_in /etc/ssl/certs/ca-certificates.crt "$root"
install -D -m 0755 "$STAGE/corium-fleet" "$root/usr/local/bin/corium-fleet"
mkdir -p "$root/etc" "$root/home/nonroot" "$root/tmp"
chown 65532:65532 "$root/home/nonroot"
chmod 0755 "$root" "$root/home/nonroot"
chmod 1777 "$root/tmp"
# As distroless's: root, nobody and nonroot, no shells, no passwords.
cat >"$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
EOF
cat >"$root/etc/group" <<'EOF'
root:x:0:
nobody:x:65534:
nonroot:x:65532:
EOF
cat >"$root/etc/nsswitch.conf" <<'EOF'
passwd: files
group: files
hosts: files dns
EOF
chmod 0644 "$root/etc/passwd" "$root/etc/group" "$root/etc/nsswitch.conf"
"${B[@]}" umount "$ctr" >/dev/null
LABELS=(
  --label "org.opencontainers.image.source=$IMAGE_SOURCE"
  --label "org.opencontainers.image.version=$IMAGE_TAG"
  --label "org.opencontainers.image.revision=$REVISION"
  --label "org.opencontainers.image.licenses=Apache-2.0 OR MIT"
)
"${B[@]}" config \
  --user 65532:65532 --workingdir /home/nonroot \
  --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
  "${LABELS[@]}" \
  --created-by "scripts/images.sh: runtime (glibc and CA certificates of the Debian 12 host, sleep, corium-fleet CLI, nonroot 65532)" \
  "$ctr"
"${B[@]}" commit --quiet --timestamp "$EPOCH" --identity-label=false "$ctr" "$BASE" >/dev/null
drop_container "$ctr"
note "committed $BASE"

# --- The two images --------------------------------------------------------------------------
for node in "${NODES[@]}"; do
  name=$(image_name "$node")
  bin=corium-fleet-$node
  say "Image $name"
  ctr=corium-fleet-$node-work
  new_container "$BASE" "$ctr"
  root=$("${B[@]}" mount "$ctr")
  install -D -m 0755 "$STAGE/$bin" "$root/usr/local/bin/$bin"
  "${B[@]}" umount "$ctr" >/dev/null
  ports=()
  for p in ${PORTS[$node]}; do ports+=(--port "$p/tcp"); done
  "${B[@]}" config \
    --entrypoint "[\"/usr/local/bin/$bin\"]" "${ports[@]}" \
    --label "org.opencontainers.image.title=${TITLES[$node]}" \
    --created-by "scripts/images.sh: /usr/local/bin/$bin" \
    "$ctr"
  "${B[@]}" commit --quiet --timestamp "$EPOCH" --identity-label=false "$ctr" "$name" >/dev/null
  drop_container "$ctr"
  note "committed $name"
  archive=$OUT/$bin.oci.tar
  "${B[@]}" push --quiet "$name" "oci-archive:$archive:$name" >/dev/null
  note "wrote $archive"
done

# --- Checks ----------------------------------------------------------------------------------
check() { # WHAT EXPECTED ACTUAL
  if [[ $2 == "$3" ]]; then
    note "ok  $1: $3"
  else
    fail "$1: expected '$2', got '$3'"
  fi
}

for node in "${NODES[@]}"; do
  name=$(image_name "$node")
  bin=corium-fleet-$node
  say "Checking $name"
  cfg() { "${B[@]}" inspect --type image --format "$1" "$name" || fail "buildah inspect $name"; }
  check "user" "65532:65532" "$(cfg '{{.OCIv1.Config.User}}')"
  check "workdir" "/home/nonroot" "$(cfg '{{.OCIv1.Config.WorkingDir}}')"
  check "entrypoint" "[/usr/local/bin/$bin]" "$(cfg '{{.OCIv1.Config.Entrypoint}}')"
  want_ports=$(for p in ${PORTS[$node]}; do echo "$p/tcp"; done | sort | xargs)
  # shellcheck disable=SC2016 # a Go template, not a shell expansion
  check "exposed ports" "$want_ports" \
    "$(cfg '{{range $p, $v := .OCIv1.Config.ExposedPorts}}{{$p}} {{end}}' | xargs -n1 | sort | xargs)"
  check "label revision" "$REVISION" "$(cfg '{{index .OCIv1.Config.Labels "org.opencontainers.image.revision"}}')"
  check "label version" "$IMAGE_TAG" "$(cfg '{{index .OCIv1.Config.Labels "org.opencontainers.image.version"}}')"
  check "label source" "$IMAGE_SOURCE" "$(cfg '{{index .OCIv1.Config.Labels "org.opencontainers.image.source"}}')"

  ctr=corium-fleet-$node-check
  new_container "$name" "$ctr"
  root=$("${B[@]}" mount "$ctr")
  check "/home/nonroot owner and mode" "65532:65532 755" "$(stat -c '%u:%g %a' "$root/home/nonroot")"
  check "/tmp mode" "1777" "$(stat -c '%a' "$root/tmp")"
  for f in "usr/local/bin/$bin" usr/local/bin/corium-fleet usr/bin/sleep \
    etc/ssl/certs/ca-certificates.crt; do
    [[ -f $root/$f ]] || fail "/$f is missing in $name"
  done
  "${B[@]}" umount "$ctr" >/dev/null
  # Run inside the image, as its user 65532 in its workdir: the entrypoint from the config.
  entry=$(cfg '{{index .OCIv1.Config.Entrypoint 0}}')
  out=$("${B[@]}" run "$ctr" -- "$entry" --version 2>&1) || fail "$entry --version in $name: $out"
  check "run $entry --version" "$("target/release/$bin" --version)" "$out"
  out=$("${B[@]}" run "$ctr" -- /usr/local/bin/corium-fleet --help 2>&1) ||
    fail "corium-fleet --help in $name: $out"
  grep -q '^Usage: corium-fleet <COMMAND>' <<<"$out" ||
    fail "corium-fleet --help in $name printed no usage: $out"
  note "ok  run corium-fleet --help: $(head -1 <<<"$out") / $(grep '^Usage:' <<<"$out")"
  out=$("${B[@]}" run "$ctr" -- /usr/bin/sleep 0 2>&1) || fail "/usr/bin/sleep 0 in $name: $out"
  note "ok  run /usr/bin/sleep 0: exit 0${out:+, output: $out}"
  # Who the image's processes run as: a sleep with an odd duration, found by its command line.
  "${B[@]}" run "$ctr" -- /usr/bin/sleep 4.321 >/dev/null 2>&1 &
  runner=$!
  pid=
  for _ in $(seq 50); do
    pid=$(pgrep -x -f '/usr/bin/sleep 4.321' | head -1) && break
    sleep 0.1
  done
  [[ -n $pid ]] || fail "/usr/bin/sleep 4.321 in $name did not start"
  check "running process uid:gid" "65532:65532" \
    "$(awk '/^Uid:/ { u = $2 } /^Gid:/ { g = $2 } END { print u ":" g }' "/proc/$pid/status")"
  check "running process cwd" "/home/nonroot" "$(readlink "/proc/$pid/cwd" | sed 's|.*/rootfs||')"
  wait "$runner" || fail "/usr/bin/sleep 4.321 in $name failed"
  drop_container "$ctr"

  # The archive imports as the same image (same config digest = same image ID).
  archive=$OUT/$bin.oci.tar
  rm -rf "$OUT/verify"
  mkdir -p "$OUT/verify"
  V=(buildah --root "$OUT/verify/root" --runroot "$OUT/verify/runroot" --storage-driver vfs)
  imported=$("${V[@]}" pull --quiet "oci-archive:$archive") || fail "$archive does not import"
  check "$bin.oci.tar imports as image" "$(cfg '{{.FromImageID}}')" "$imported"
  rm -rf "$OUT/verify"
done

# --- Summary ---------------------------------------------------------------------------------
"${B[@]}" rmi --prune >/dev/null 2>&1 || true
say "Built daemonless in $((SECONDS - START)) s (buildah, FROM scratch), all checks passed:"
# "ID, size" of the image named $1 (`buildah images NAME` lists every name of that image).
image_info() {
  "${B[@]}" images --noheading --format '{{.Name}}:{{.Tag}}|{{.ID}}|{{.Size}}' |
    awk -F'|' -v n="$1" '$1 == n { print "image " $2 ", " $3; exit }'
}
for node in "${NODES[@]}"; do
  name=$(image_name "$node")
  archive=target/images/corium-fleet-$node.oci.tar
  note "$name  $(image_info "$name")"
  note "    $archive  $(du -h "$archive" | cut -f1) (oci-archive)"
done
note "shared runtime layer: $BASE, $(image_info "$BASE")"
note "buildah storage: target/images/containers (vfs), $(du -sh "$STORE" | cut -f1)"
note "list:  buildah --root target/images/containers --runroot target/images/runroot --storage-driver vfs images"
note "push:  skopeo copy oci-archive:target/images/corium-fleet-transactor.oci.tar docker://REGISTRY/corium-fleet-transactor:$IMAGE_TAG"
note "load:  podman load -i target/images/corium-fleet-transactor.oci.tar"
