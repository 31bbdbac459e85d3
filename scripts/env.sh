# Sourced by the scripts: one place for the paths every script and CI agree on.
# Cargo's target dir lives outside the clone so fresh clones (CI) reuse the build cache.
export VF_CACHE="${VF_CACHE:-$HOME/.cache/videoflow}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$VF_CACHE/target}"
# Test tools (nats-server from its PyPI wheel) live in a private virtualenv.
export VF_TOOLS_VENV="${VF_TOOLS_VENV:-$VF_CACHE/tools/venv}"
export PATH="$VF_TOOLS_VENV/bin:$HOME/.cargo/bin:$PATH"
# Pinned versions of what the tests start.
export VF_NATS_SERVER_VERSION="2.15.1"
# The Python reference (videoflow 1.0.4 from PyPI) the differential tests compare against,
# in its own private virtualenv (scripts/install-deps; tests fail with a remedy without it).
export VF_REF_VERSION="1.0.4"
export VF_REF_VENV="${VF_REF_VENV:-$VF_CACHE/refvenv}"
export VF_REF_PYTHON="${VF_REF_PYTHON:-$VF_REF_VENV/bin/python}"
