# Sourced by scripts/test and scripts/bench.
# `spawnkit ps` reads processes with a BPF task iterator that crates/spawnkit-observe/build.rs
# compiles with clang (without clang the build succeeds but has no BPF program, and ps reads
# /proc). The spawning crate (crates/spawnkit) needs no clang.
# As root, install Debian's clang when it is missing (CLANG, if set, names one to use instead).
ensure_clang() {
  if [ "$(id -u)" = 0 ] && [ -z "${CLANG:-}" ] && ! command -v clang >/dev/null 2>&1; then
    printf '\n== %s\n' "installing clang (for the BPF task iterator)" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang >/dev/null
  fi
}
