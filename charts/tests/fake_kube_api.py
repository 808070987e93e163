"""A test double of the Kubernetes API, just enough for Helm's `lookup` of Secrets and ConfigMaps.

`helm template --dry-run=server --kubeconfig KC` renders with lookup enabled: Helm asks
GET /api/v1 (discovery) and GET /api/v1/namespaces/NS/secrets/NAME (or configmaps/NAME) for each
lookup. This server answers those from in-memory dicts and 404s the rest, on 127.0.0.1 only, so
the chart's real lookup paths (keep the CA and certificates across upgrades; check the storage
keys' Secrets, once kube-root-ca.crt says the cluster can be read) run offline.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

_DISCOVERY_V1 = {
    "kind": "APIResourceList",
    "groupVersion": "v1",
    "resources": [
        {"name": "secrets", "singularName": "secret", "namespaced": True, "kind": "Secret",
         "verbs": ["get", "list"]},
        {"name": "configmaps", "singularName": "configmap", "namespaced": True,
         "kind": "ConfigMap", "verbs": ["get", "list"]},
    ],
}


class FakeKubeAPI:
    """Serves `secrets[(namespace, name)] = {"data": {...}}` as v1 Secrets and
    `configmaps[(namespace, name)] = {"data": {...}}` as v1 ConfigMaps."""

    def __init__(self) -> None:
        self.secrets: dict[tuple[str, str], dict] = {}
        self.configmaps: dict[tuple[str, str], dict] = {}
        self.requests: list[str] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                path = self.path.split("?", 1)[0]
                api.requests.append(path)
                parts = path.strip("/").split("/")
                body: dict | None = None
                if path == "/version":
                    body = {"major": "1", "minor": "33", "gitVersion": "v1.33.0"}
                elif path == "/api":
                    body = {"kind": "APIVersions", "versions": ["v1"],
                            "serverAddressByClientCIDRs": []}
                elif path == "/apis":
                    body = {"kind": "APIGroupList", "apiVersion": "v1", "groups": []}
                elif path == "/api/v1":
                    body = _DISCOVERY_V1
                elif (len(parts) == 6 and parts[:3] == ["api", "v1", "namespaces"]
                      and parts[4] == "secrets" and (parts[3], parts[5]) in api.secrets):
                    secret = api.secrets[(parts[3], parts[5])]
                    body = {"apiVersion": "v1", "kind": "Secret",
                            "metadata": {"name": parts[5], "namespace": parts[3]},
                            "type": secret.get("type", "Opaque"), "data": secret["data"]}
                elif (len(parts) == 6 and parts[:3] == ["api", "v1", "namespaces"]
                      and parts[4] == "configmaps" and (parts[3], parts[5]) in api.configmaps):
                    body = {"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": parts[5], "namespace": parts[3]},
                            "data": api.configmaps[(parts[3], parts[5])]["data"]}
                if body is None:
                    self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                     "reason": "NotFound", "code": 404})
                else:
                    self._send(200, body)

            def _send(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:  # quiet
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "FakeKubeAPI":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def kubeconfig(self, directory: Path, namespace: str) -> Path:
        path = directory / "kubeconfig"
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": "fake"}}],
            "contexts": [{"name": "fake",
                          "context": {"cluster": "fake", "user": "fake", "namespace": namespace}}],
            "current-context": "fake",
        }))
        path.chmod(0o600)
        return path
