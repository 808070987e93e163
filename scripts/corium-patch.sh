#!/usr/bin/env bash
# The Corium patches the fleet carries (patches/README.md): our own diffs against Corium's
# published crates, applied to the pristine .crate from crates.io into target/corium-patched/,
# which the workspace's [patch.crates-io] names. Nothing of Corium's is kept in the tree.
#
#   scripts/corium-patch.sh [apply]     apply every patches/NAME-VERSION.patch (make patch; every
#                                       make target that builds runs it first); a no-op when the
#                                       applied crates are current
#   scripts/corium-patch.sh check       exit 0 when every patch is applied and current, else say what
#   scripts/corium-patch.sh save NAME   write patches/NAME-VERSION.patch from the edited copy in
#                                       target/corium-patched/NAME-VERSION (fewest context lines
#                                       that apply cleanly)
#   scripts/corium-patch.sh test        run the patched crates' own tests (Corium's and the
#                                       patches'), each crate built on its own against our
#                                       Cargo.lock (make test runs it)
#
# Each pristine crate is checked against patches/SHA256SUMS (crates.io's checksum of the .crate,
# the one Cargo.lock held before the patch) before anything is applied to it: a patch is only
# ever applied to the exact bytes it was written against. The .crate comes from cargo's registry
# cache, or is fetched by cargo itself (no curl or patch(1) needed: git applies the diff).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
patches=$root/patches
out=$root/target/corium-patched
cargo_home=${CARGO_HOME:-$HOME/.cargo}

fail() {
  echo "corium-patch: $*" >&2
  exit 1
}

# NAME-VERSION of every patch, e.g. corium-log-0.1.90.
patched_crates() {
  local file
  for file in "$patches"/*.patch; do
    [ -e "$file" ] || continue
    basename "$file" .patch
  done
}
crate_name() { echo "${1%-*}"; }
crate_version() { echo "${1##*-}"; }

# Content hash of a crate tree, ignoring Cargo.lock (the test run puts ours there).
tree_hash() {
  (cd "$1" && find . -type f ! -name Cargo.lock ! -name .cargo-ok -print0 | LC_ALL=C sort -z |
    xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
}
file_hash() { sha256sum "$1" | cut -d' ' -f1; }

# The pristine .crate for NAME-VERSION, from cargo's cache or fetched by cargo into it.
pristine_crate() {
  local crate=$1 found
  found=$(ls "$cargo_home"/registry/cache/*/"$crate.crate" 2>/dev/null | head -1 || true)
  if [ -z "$found" ]; then
    local fetch=$out/.fetch
    rm -rf "$fetch"
    mkdir -p "$fetch/src"
    : >"$fetch/src/lib.rs"
    cat >"$fetch/Cargo.toml" <<EOF
[package]
name = "corium-patch-fetch"
version = "0.0.0"
edition = "2021"
publish = false
[dependencies]
$(crate_name "$crate") = "=$(crate_version "$crate")"
[workspace]
EOF
    echo "corium-patch: fetching $crate from crates.io" >&2
    (cd "$fetch" && cargo fetch --quiet) >&2 || fail "cargo could not fetch $crate from crates.io"
    rm -rf "$fetch"
    found=$(ls "$cargo_home"/registry/cache/*/"$crate.crate" 2>/dev/null | head -1 || true)
    [ -n "$found" ] || fail "cargo fetched $crate but it is not in $cargo_home/registry/cache"
  fi
  local want got
  want=$(awk -v f="$crate.crate" '$2 == f { print $1 }' "$patches/SHA256SUMS")
  [ -n "$want" ] || fail "patches/SHA256SUMS has no checksum for $crate.crate"
  got=$(file_hash "$found")
  [ "$got" = "$want" ] || fail "$found is not the crate the patch was written against (sha256 $got, patches/SHA256SUMS says $want)"
  echo "$found"
}

# Extracts the pristine crate into DIR/NAME-VERSION.
extract() {
  tar -xzf "$(pristine_crate "$1")" -C "$2"
}

# Applies patches/CRATE.patch inside DIR (a pristine extraction), with git outside any repository.
git_apply() {
  local dir=$1 patch=$2
  [ -s "$patch" ] || return 0
  (cd "$dir" && GIT_CEILING_DIRECTORIES=$(dirname "$dir") git apply --whitespace=nowarn "$patch")
}

stamp_of() { echo "$out/$1.stamp"; }

# Whether the applied crate is exactly what the current patch makes.
current() {
  local crate=$1 stamp
  stamp=$(stamp_of "$crate")
  [ -f "$stamp" ] && [ -d "$out/$crate" ] || return 1
  [ "$(sed -n 1p "$stamp")" = "$(file_hash "$patches/$crate.patch")" ] || return 1
  [ "$(sed -n 2p "$stamp")" = "$(tree_hash "$out/$crate")" ]
}

apply_one() {
  local crate=$1 force=$2 stamp tmp
  stamp=$(stamp_of "$crate")
  if current "$crate"; then
    return 0
  fi
  if [ "$force" != force ] && [ -f "$stamp" ] && [ -d "$out/$crate" ] &&
    [ "$(sed -n 1p "$stamp")" = "$(file_hash "$patches/$crate.patch")" ]; then
    fail "target/corium-patched/$crate has edits the patch does not hold: keep them with \`scripts/corium-patch.sh save $(crate_name "$crate")\`, or drop them with \`scripts/corium-patch.sh apply --force\`"
  fi
  tmp=$(mktemp -d)
  extract "$crate" "$tmp"
  git_apply "$tmp/$crate" "$patches/$crate.patch" || {
    rm -rf "$tmp"
    fail "patches/$crate.patch does not apply to the pristine $crate"
  }
  mkdir -p "$out"
  rm -rf "${out:?}/$crate"
  mv "$tmp/$crate" "$out/$crate"
  rm -rf "$tmp"
  printf '%s\n%s\n' "$(file_hash "$patches/$crate.patch")" "$(tree_hash "$out/$crate")" >"$stamp"
  echo "corium-patch: applied patches/$crate.patch to the pristine $crate -> target/corium-patched/$crate" >&2
}

cmd_apply() {
  local force=${1:-}
  [ "$force" = --force ] && force=force
  command -v git >/dev/null || fail "git is needed to apply the patches"
  local crate
  for crate in $(patched_crates); do
    apply_one "$crate" "$force"
  done
}

cmd_check() {
  local crate stale=0
  for crate in $(patched_crates); do
    if ! current "$crate"; then
      echo "corium-patch: target/corium-patched/$crate is missing or not what patches/$crate.patch makes: run \`make patch\`" >&2
      stale=1
    fi
  done
  return $stale
}

cmd_save() {
  local name=${1:?usage: corium-patch.sh save NAME}
  local crate
  crate=$(patched_crates | while read -r c; do if [ "$(crate_name "$c")" = "$name" ]; then echo "$c"; fi; done)
  [ -n "$crate" ] || fail "no patches/$name-VERSION.patch (a new patch: create an empty one first)"
  [ -d "$out/$crate" ] || fail "target/corium-patched/$crate does not exist: run \`make patch\` and edit it there"
  local tmp context patch
  tmp=$(mktemp -d)
  extract "$crate" "$tmp"
  mv "$tmp/$crate" "$tmp/a"
  cp -a "$out/$crate" "$tmp/b"
  # Cargo.lock is not part of the patch (the test run puts ours there).
  cp "$tmp/a/Cargo.lock" "$tmp/b/Cargo.lock"
  for context in 1 2 3; do
    patch=$tmp/$crate.U$context.patch
    (cd "$tmp" && git diff --no-index --no-prefix -U"$context" a b >"$patch") || true
    rm -rf "$tmp/check"
    mkdir "$tmp/check"
    extract "$crate" "$tmp/check"
    if git_apply "$tmp/check/$crate" "$patch" 2>/dev/null &&
      diff -r "$tmp/check/$crate" "$tmp/b" >/dev/null; then
      cp "$patch" "$patches/$crate.patch"
      printf '%s\n%s\n' "$(file_hash "$patches/$crate.patch")" "$(tree_hash "$out/$crate")" >"$(stamp_of "$crate")"
      echo "corium-patch: wrote patches/$crate.patch ($context context line(s), $(grep -c '^@@' "$patch") hunks)" >&2
      rm -rf "$tmp"
      return 0
    fi
  done
  rm -rf "$tmp"
  fail "no diff of target/corium-patched/$crate applies cleanly with up to 3 context lines"
}

cmd_test() {
  cmd_apply
  local crate patch_args=()
  for crate in $(patched_crates); do
    patch_args+=(--config "patch.crates-io.$(crate_name "$crate").path=\"$out/$crate\"")
  done
  for crate in $(patched_crates); do
    echo "corium-patch: testing the patched $crate (its own tests and the patch's)" >&2
    # Our lock, so the crate builds against the versions the fleet links (and shares target/).
    cp "$root/Cargo.lock" "$out/$crate/Cargo.lock"
    # Two of Corium's own tests are skipped, the same with or without our patches:
    # conformance_corpus reads tests/conformance/, which the published crate does not ship; and
    # the_liveness_pass_runs_even_with_the_sweep_disabled fails about one run in ten on the
    # pristine 0.1.90 too (5 of 60 runs here; docs/upstream/README.md).
    (cd "$out/$crate" && CARGO_TARGET_DIR=$root/target cargo test --quiet "${patch_args[@]}" --lib --tests \
      -- --skip conformance_corpus --skip the_liveness_pass_runs_even_with_the_sweep_disabled)
  done
}

case ${1:-apply} in
  apply) cmd_apply "${2:-}" ;;
  check) cmd_check ;;
  save) cmd_save "${2:-}" ;;
  test) cmd_test ;;
  *) fail "unknown command '$1' (apply, check, save NAME, test)" ;;
esac
