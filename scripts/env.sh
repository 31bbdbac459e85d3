# Sourced by the scripts: one place for the paths every script and CI agree on.
# Cargo's target dir lives outside the clone so fresh clones (CI) reuse the build cache.
export VF_CACHE="${VF_CACHE:-$HOME/.cache/videoflow}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$VF_CACHE/target}"
# Test tools (nats-server from its PyPI wheel) live in a private virtualenv.
export VF_TOOLS_VENV="${VF_TOOLS_VENV:-$VF_CACHE/tools/venv}"
export PATH="$VF_TOOLS_VENV/bin:$HOME/.cargo/bin:$PATH"
# Pinned versions of what the tests start.
export VF_NATS_SERVER_VERSION="2.15.1"
