#!/usr/bin/env bash
# Builds the previous release's three binaries (corium-fleet, corium-fleet-transactor,
# corium-fleet-ingress) for the rolling-upgrade test, into target/previous-release/bin.
#   scripts/previous-release.sh        -> builds them unless they are there for the commit named
#                                         in tests/previous-release; prints the directory
#   scripts/previous-release.sh --release
#                                      -> the same, built in release into
#                                         target/previous-release/release-bin (make bench compares
#                                         this build's moves with them, corium-fleet-bench moves)
# Built binaries are also kept in ~/.cache/corium-fleet/previous-release/COMMIT/ (PREVIOUS_RELEASE_CACHE).
# The source is the commit's tree from git (`git archive`; a shallow clone fetches the one commit
# from origin). It is built in a target directory of its own, then only the binaries are kept:
# cargo names a workspace crate's artifacts by its path relative to the workspace root, so the
# old tree's crates built in the workspace's own target directory would take the current tree's
# places (seen: the old transactor compiled against the current protocol crate). Dependencies
# build without debug info, as the current tree's do (Cargo.toml), which keeps that build small.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$root/target/previous-release
profile=debug
bin_dir=bin
if [ "${1:-}" = --release ]; then
  profile=release
  bin_dir=release-bin
fi
bins=(corium-fleet corium-fleet-transactor corium-fleet-ingress)
commit=$(grep -v '^#' "$root/tests/previous-release" | tr -d '[:space:]')
fail() {
  echo "previous-release.sh: $*" >&2
  exit 1
}
[[ $commit =~ ^[0-9a-f]{40}$ ]] || fail "tests/previous-release names no commit (40 hex digits): '$commit'"

have_all() {
  [ "$(cat "$out/$bin_dir/COMMIT" 2>/dev/null)" = "$commit" ] || return 1
  for bin in "${bins[@]}"; do [ -x "$out/$bin_dir/$bin" ] || return 1; done
}
if have_all; then
  echo "$out/$bin_dir"
  exit 0
fi
# Built once per machine: the binaries are kept outside target/ by commit and profile
# (PREVIOUS_RELEASE_CACHE), so a fresh clone or a cleaned target copies them.
cache=${PREVIOUS_RELEASE_CACHE:-$HOME/.cache/corium-fleet/previous-release}/$commit/$bin_dir
if [ "$(cat "$cache/COMMIT" 2>/dev/null)" = "$commit" ]; then
  mkdir -p "$out/$bin_dir"
  for bin in "${bins[@]}" COMMIT; do cp "$cache/$bin" "$out/$bin_dir/$bin"; done
  if have_all; then
    echo "previous release $commit copied from $cache" >&2
    echo "$out/$bin_dir"
    exit 0
  fi
fi

if ! git -C "$root" cat-file -e "$commit^{commit}" 2>/dev/null; then
  echo "previous-release.sh: $commit is not in this clone; fetching it from origin..." >&2
  timeout 300 git -C "$root" fetch --quiet --depth=1 origin "$commit" ||
    fail "cannot get commit $commit (named in tests/previous-release): not in this clone and origin did not give it"
fi

t0=$(date +%s)
# Only this profile's binaries are replaced (the other's, if built, stay).
rm -rf "${out:?}/src" "${out:?}/target" "${out:?}/$bin_dir"
mkdir -p "$out/src" "$out/$bin_dir"
git -C "$root" archive "$commit" | tar -x -C "$out/src"
echo "building the previous release ($commit) for the upgrade test..." >&2
(
  cd "$out/src"
  # A release that carries Corium patches applies them into its own tree first.
  if [ -f scripts/corium-patch.sh ]; then
    bash scripts/corium-patch.sh apply
  fi
  release=()
  [ "$profile" = release ] && release=(--release)
  cargo build --locked --bins "${release[@]}" \
    --target-dir "$out/target" \
    --config 'profile.dev.debug="line-tables-only"' \
    --config 'profile.dev.package."*".opt-level=1' \
    --config 'profile.dev.package."*".debug=false' \
    "${bins[@]/#/--bin=}"
) >&2 || fail "building commit $commit failed"
for bin in "${bins[@]}"; do
  cp "$out/target/$profile/$bin" "$out/$bin_dir/$bin"
done
echo "$commit" >"$out/$bin_dir/COMMIT"
mkdir -p "$cache.partial" && cp "$out/$bin_dir"/* "$cache.partial/" && rm -rf "$cache" && mv "$cache.partial" "$cache" ||
  echo "previous-release.sh: could not keep the binaries in $cache (built anyway)" >&2
# Only the binaries are kept (the build's gigabytes would sit on disk for nothing).
rm -rf "$out/src" "$out/target"
echo "previous release built in $(($(date +%s) - t0)) s" >&2
echo "$out/$bin_dir"
