# Sourced by scripts/test and scripts/bench.
# The Python side of spawnkit (python/, crates/spawnkit-py) lives in a venv at .venv: made with
# PYTHON (default python3, which needs the venv module), with maturin and the test and bench
# tools, and the package built into it (maturin develop --release). `spawnkit bench` runs its
# Python rows with that venv's interpreter; the tests import the package from it.
ensure_venv() {
  local py="${PYTHON:-python3}"
  printf '\n== %s\n' "python: venv (.venv), maturin, the test and bench tools" >&2
  if [ ! -x .venv/bin/python ]; then
    "$py" -m venv .venv || return 1
  fi
  .venv/bin/python -m pip install -q --disable-pip-version-check \
    "maturin~=1.16.0" "pytest>=8" "hypothesis>=6" "mypy>=1.10" "psutil>=5.9" "uvloop>=0.19" \
    || return 1
  printf '\n== %s\n' "python: maturin develop --release (the spawnkit package into .venv)" >&2
  VIRTUAL_ENV="$PWD/.venv" PATH="$PWD/.venv/bin:$PATH" .venv/bin/maturin develop --release --locked -q
}
