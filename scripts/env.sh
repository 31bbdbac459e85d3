# Sourced by the scripts: one place for the paths every script and CI agree on.
# Cargo's target dir lives outside the clone so fresh clones (CI) reuse the build cache.
export VF_CACHE="${VF_CACHE:-$HOME/.cache/videoflow}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$VF_CACHE/target}"
# Test tools (nats-server from its PyPI wheel) live in a private virtualenv.
export VF_TOOLS_VENV="${VF_TOOLS_VENV:-$VF_CACHE/tools/venv}"
# Go-built tools (the pinned helm the chart tests run) live in $VF_CACHE/tools/bin.
export VF_TOOLS_BIN="${VF_TOOLS_BIN:-$VF_CACHE/tools/bin}"
export PATH="$VF_TOOLS_BIN:$VF_TOOLS_VENV/bin:$HOME/.cargo/bin:$PATH"
# Pinned versions of what the tests start.
export VF_NATS_SERVER_VERSION="2.15.1"
# helm for the chart's lint and template tests (operator/tests/rbac.rs), built from its Go
# module; HELM_K8S_MINOR is the Kubernetes minor of its k8s.io modules (v0.37 -> 1.37).
export VF_HELM_VERSION="3.22.0"
export VF_HELM_K8S_MINOR="37"
export VF_HELM="${VF_HELM:-$VF_TOOLS_BIN/helm}"
# The Python reference (videoflow 1.0.4 from PyPI) the differential tests compare against,
# in its own private virtualenv (scripts/install-deps; tests fail with a remedy without it).
export VF_REF_VERSION="1.0.4"
export VF_REF_VENV="${VF_REF_VENV:-$VF_CACHE/refvenv}"
export VF_REF_PYTHON="${VF_REF_PYTHON:-$VF_REF_VENV/bin/python}"
# The Python component SDK (sdk/python) with protobuf and numpy, in its own private virtualenv
# (scripts/install-deps). Its bin comes first on PATH so `python3` in a Flow's exec command
# (config/samples/python-component.yaml) finds the SDK in a local run.
export VF_SDK_VENV="${VF_SDK_VENV:-$VF_CACHE/sdkvenv}"
export VF_SDK_PYTHON="${VF_SDK_PYTHON:-$VF_SDK_VENV/bin/python}"
export PATH="$VF_SDK_VENV/bin:$PATH"
# The e2e control plane (scripts/testenv, docs/TESTING.md): pinned etcd, Kubernetes
# (kube-apiserver, kube-controller-manager, kube-scheduler) and kwok, built from their Go
# modules into $VF_TESTENV_BIN (outside the clone, keyed by the versions). KEDA: its
# ScaledObject CRD (config/keda/, copied verbatim from the pinned release's module), and its
# operator and metrics API server built from that module (scripts/testenv build-keda).
export VF_TESTENV_K8S_VERSION="1.37.2"
export VF_TESTENV_ETCD_VERSION="3.7.3"
export VF_TESTENV_KWOK_VERSION="0.8.0"
export VF_TESTENV_KEDA_VERSION="2.21.0"
export VF_TESTENV_BIN="${VF_TESTENV_BIN:-$VF_CACHE/testenv/k8s-$VF_TESTENV_K8S_VERSION-etcd-$VF_TESTENV_ETCD_VERSION-kwok-$VF_TESTENV_KWOK_VERSION/bin}"
