"""Assertions on the manifests the corium-fleet chart renders.

Run by scripts/chart-test.sh (which installs helm and this venv); by hand:
    HELM=target/chart-tools/bin/helm target/chart-tools/venv/bin/pytest charts/tests
"""

from __future__ import annotations

import base64
import functools
import json
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from fake_kube_api import FakeKubeAPI

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "corium-fleet"
BAD = Path(__file__).resolve().parent / "bad"
HELM = os.environ.get("HELM", "helm")
RELEASE = "ci-release"
NS = "ci"
FULL = f"{RELEASE}-corium-fleet"
CI_FILES = sorted(CHART.glob("ci/*-values.yaml"))
BAD_FILES = sorted(BAD.glob("*.yaml"))
POSTGRES = ["--set", "storage.type=postgres", "--set", "storage.postgres.host=db",
            "--set", "storage.postgres.password=pw"]
SCHEMA_ERROR = "values don't meet the specifications of the schema(s)"
ZONE = "topology.kubernetes.io/zone"


# --- helpers -----------------------------------------------------------------------------------

def helm(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([HELM, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def template(*args: str, chart: Path = CHART) -> list[dict]:
    result = helm("template", RELEASE, str(chart), "--namespace", NS,
                  "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor", *args)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@functools.lru_cache(maxsize=None)
def _render_file(path: str) -> tuple:
    return tuple(template("-f", path))


def render(values_file: Path) -> list[dict]:
    return list(_render_file(str(values_file)))


def values_of(values_file: Path) -> dict:
    """values.yaml merged with the file (enough for the keys these tests read)."""
    def merge(base, over):
        for key, value in over.items():
            if isinstance(value, dict) and isinstance(base.get(key), dict):
                merge(base[key], value)
            elif value is None:
                base.pop(key, None)
            else:
                base[key] = value
        return base
    return merge(yaml.safe_load((CHART / "values.yaml").read_text()),
                 yaml.safe_load(values_file.read_text()) or {})


def public_tls_on(values: dict) -> bool:
    """ingress.publicTls.enabled as the chart reads it: null (the default) is on wherever there is
    a certificate for the client-facing port, i.e. in every tls.mode but existingSecret, and there
    with a secretName."""
    public = values["ingress"]["publicTls"]
    if public.get("enabled") is None:
        return bool(public["secretName"]) or values["tls"]["mode"] != "existingSecret"
    return public["enabled"]


TLS_DIR = "/etc/corium-fleet/tls"


def transactor_tls_files(mode: str) -> dict[str, str]:
    """The transactor's --tls-cert/--tls-key/--tls-client-ca by tls.mode: in selfSigned and
    certManager the volume holds every pod's certificate, named by node id, and Kubernetes expands
    $(CORIUM_FLEET_NODE_ID) (the pod name) in the arguments."""
    if mode in ("selfSigned", "certManager"):
        return {"--tls-cert": f"{TLS_DIR}/$(CORIUM_FLEET_NODE_ID).crt",
                "--tls-key": f"{TLS_DIR}/$(CORIUM_FLEET_NODE_ID).key",
                "--tls-client-ca": f"{TLS_DIR}/ca.crt"}
    return {"--tls-cert": f"{TLS_DIR}/tls.crt", "--tls-key": f"{TLS_DIR}/tls.key",
            "--tls-client-ca": f"{TLS_DIR}/ca.crt"}


def kind(docs: list[dict], name: str) -> list[dict]:
    return [d for d in docs if d["kind"] == name]


def one(docs: list[dict], kind_name: str, name: str | None = None) -> dict:
    found = [d for d in kind(docs, kind_name) if name is None or d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind_name} {name or ''}, found {len(found)}"
    return found[0]


def workloads(docs: list[dict]) -> list[dict]:
    return kind(docs, "Deployment") + kind(docs, "StatefulSet")


def pod_labels(workload: dict) -> dict:
    return workload["spec"]["template"]["metadata"]["labels"]


def selects(match_labels: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in match_labels.items())


def pool(docs: list[dict], component: str) -> dict:
    found = [w for w in workloads(docs)
             if pod_labels(w).get("app.kubernetes.io/component") == component]
    assert len(found) == 1, f"expected one {component} workload"
    return found[0]


def container(workload: dict, name: str) -> dict:
    return next(c for c in workload["spec"]["template"]["spec"]["containers"] if c["name"] == name)


def env_of(c: dict) -> dict:
    return {e["name"]: e for e in c.get("env", [])}


def arg_value(c: dict, flag: str) -> str | None:
    args = c.get("args", [])
    return args[args.index(flag) + 1] if flag in args else None


def toml_of(docs: list[dict], name: str) -> dict:
    return tomllib.loads(one(docs, "ConfigMap", name)["data"]["node.toml"])


def ids(paths):
    return [p.stem for p in paths]


def config_map_of(workload: dict) -> str:
    """The name of the ConfigMap mounted as the workload's `config` volume (its node.toml)."""
    return next(v["configMap"]["name"] for v in workload["spec"]["template"]["spec"]["volumes"]
                if v["name"] == "config")


# The keys each binary accepts in its --config file (both deny unknown keys).
TRANSACTOR_KEYS = {"zone", "weight", "listen", "admin_listen", "advertise", "storage", "data_dir",
                   "s3_endpoint", "s3_region", "lease_ttl_ms", "members", "replicas", "log",
                   "registry_ttl_ms", "registry_renew_ms", "placement_map", "drain_deadline_ms",
                   "max_inflight_calls", "max_queued_calls", "max_queue_wait_ms",
                   "max_inflight_per_database", "rate_limit_per_principal", "max_subscriptions",
                   "max_subscriptions_per_database", "storage_pool_size", "idle_evict_after_ms",
                   "memory_budget_mib", "hot_standbys", "max_request_bytes",
                   "max_subscriptions_per_principal", "warm_standby_mib", "max_replicas",
                   "replica_idle_ms"}
INGRESS_KEYS = {"listen", "admin_listen", "storage", "data_dir", "s3_endpoint", "s3_region",
                "members", "replicas", "placement_map", "owner_cache_ttl_ms",
                "owner_cache_capacity", "max_request_bytes", "max_deadline_ms", "log",
                "assign_request_ids", "drain_timeout_ms", "max_concurrent_requests",
                "rate_limit_per_client", "max_streams_per_client", "max_streams_per_connection",
                "body_progress_timeout_ms", "stream_stall_timeout_ms", "max_connection_idle_ms",
                "max_connection_age_ms", "adaptive_node_limit", "retry_budget_ratio",
                "retry_budget_min_per_second", "max_connections", "max_connections_per_client",
                "preface_timeout_ms", "storage_pool_size"}


# --- every CI values set ----------------------------------------------------------------------

@pytest.mark.parametrize("values_file", CI_FILES, ids=ids(CI_FILES))
def test_workload_selectors_match_their_pod_labels(values_file):
    docs = render(values_file)
    assert {pod_labels(w)["app.kubernetes.io/component"] for w in workloads(docs)} == {
        "transactor", "ingress"}
    for w in workloads(docs):
        assert selects(w["spec"]["selector"]["matchLabels"], pod_labels(w)), w["metadata"]["name"]
        others = [o for o in workloads(docs) if o is not w]
        assert not any(selects(w["spec"]["selector"]["matchLabels"], pod_labels(o)) for o in others)


@pytest.mark.parametrize("values_file", CI_FILES, ids=ids(CI_FILES))
def test_services_select_one_pool_and_their_ports_exist(values_file):
    docs = render(values_file)
    for svc in kind(docs, "Service"):
        matched = [w for w in workloads(docs) if selects(svc["spec"]["selector"], pod_labels(w))]
        assert len(matched) == 1, svc["metadata"]["name"]
        ports = {p["name"] for c in matched[0]["spec"]["template"]["spec"]["containers"]
                 for p in c.get("ports", [])}
        for port in svc["spec"]["ports"]:
            assert port["targetPort"] in ports, (svc["metadata"]["name"], port)
    client = one(docs, "Service", values_of(values_file)["fullnameOverride"] or FULL)
    assert client["spec"]["ports"][0]["port"] == 4334
    headless = one(docs, "StatefulSet")["spec"]["serviceName"]
    svc = one(docs, "Service", headless)
    assert svc["spec"]["clusterIP"] == "None"
    assert {p["port"] for p in svc["spec"]["ports"]} == {7001, 9101}


@pytest.mark.parametrize("values_file", CI_FILES, ids=ids(CI_FILES))
def test_each_pdb_matches_exactly_one_workload(values_file):
    docs = render(values_file)
    for pdb in kind(docs, "PodDisruptionBudget"):
        assert pdb["apiVersion"] == "policy/v1"
        matched = [w for w in workloads(docs)
                   if selects(pdb["spec"]["selector"]["matchLabels"], pod_labels(w))]
        assert len(matched) == 1, pdb["metadata"]["name"]
        assert ("minAvailable" in pdb["spec"]) != ("maxUnavailable" in pdb["spec"])
    values = values_of(values_file)
    expected = int(values["transactor"]["pdb"]["enabled"]) + int(values["ingress"]["pdb"]["enabled"])
    assert len(kind(docs, "PodDisruptionBudget")) == expected


@pytest.mark.parametrize("values_file", CI_FILES, ids=ids(CI_FILES))
def test_hpa_on_means_the_deployment_has_no_replicas(values_file):
    docs = render(values_file)
    deployment = one(docs, "Deployment")
    hpas = kind(docs, "HorizontalPodAutoscaler")
    autoscaled = values_of(values_file)["ingress"]["autoscaling"]["enabled"]
    assert len(hpas) == int(autoscaled)
    if autoscaled:
        assert "replicas" not in deployment["spec"]
        target = hpas[0]["spec"]["scaleTargetRef"]
        assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
        assert hpas[0]["spec"]["metrics"], "an HPA needs a metric"
    else:
        assert deployment["spec"]["replicas"] == values_of(values_file)["ingress"]["replicas"]


def test_hpa_toggle():
    on = template(*POSTGRES, "--set", "ingress.autoscaling.enabled=true")
    off = template(*POSTGRES, "--set", "ingress.autoscaling.enabled=false", "--set",
                   "ingress.replicas=4")
    assert "replicas" not in one(on, "Deployment")["spec"]
    assert one(on, "HorizontalPodAutoscaler")["spec"]["minReplicas"] == 2
    assert one(off, "Deployment")["spec"]["replicas"] == 4
    assert not kind(off, "HorizontalPodAutoscaler")


@pytest.mark.parametrize("values_file", CI_FILES, ids=ids(CI_FILES))
def test_zone_spread_on_both_pools(values_file):
    docs = render(values_file)
    for component in ("transactor", "ingress"):
        w = pool(docs, component)
        spec = w["spec"]["template"]["spec"]
        zone = [c for c in spec.get("topologySpreadConstraints", []) if c["topologyKey"] == ZONE]
        assert zone, f"{component}: no topology spread across zones"
        assert selects(zone[0]["labelSelector"]["matchLabels"], pod_labels(w))
    transactor = pool(docs, "transactor")
    anti = values_of(values_file)["transactor"]["podAntiAffinity"]
    affinity = transactor["spec"]["template"]["spec"].get("affinity", {}).get("podAntiAffinity")
    if anti == "none":
        assert affinity is None
    else:
        terms = (affinity.get("requiredDuringSchedulingIgnoredDuringExecution", [])
                 + [t["podAffinityTerm"] for t in
                    affinity.get("preferredDuringSchedulingIgnoredDuringExecution", [])])
        zone_terms = [t for t in terms if t["topologyKey"] == ZONE]
        assert zone_terms and selects(zone_terms[0]["labelSelector"]["matchLabels"],
                                      pod_labels(transactor))


def _covers(rule: dict, port: int, name: str) -> bool:
    ports = rule.get("ports")
    return not ports or any(p.get("port") in (port, name) for p in ports)


@pytest.mark.parametrize("values_file", CI_FILES, ids=ids(CI_FILES))
def test_network_policy_admits_7001_only_from_ingress_and_transactor_pods(values_file):
    docs = render(values_file)
    policies = kind(docs, "NetworkPolicy")
    if not values_of(values_file)["networkPolicy"]["enabled"]:
        assert not policies
        return
    transactor, ingress = pool(docs, "transactor"), pool(docs, "ingress")
    mine = [p for p in policies
            if selects(p["spec"]["podSelector"]["matchLabels"], pod_labels(transactor))]
    assert len(mine) == 1
    policy = mine[0]["spec"]
    assert "Ingress" in policy["policyTypes"]
    rules = [r for r in policy["ingress"] if _covers(r, 7001, "grpc")]
    assert rules, "port 7001 must be admitted from the ingress pods"
    admitted = set()
    for rule in rules:
        assert rule.get("from"), "a rule with no `from` admits everyone on 7001"
        for peer in rule["from"]:
            assert set(peer) == {"podSelector"}, f"7001 open to {peer}"
            labels = peer["podSelector"].get("matchLabels", {})
            assert peer["podSelector"].get("matchExpressions") is None
            matched = [w for w in workloads(docs) if selects(labels, pod_labels(w))]
            assert len(matched) == 1, f"peer {labels} must pick exactly one pool of this release"
            admitted.add(matched[0]["metadata"]["name"])
    assert ingress["metadata"]["name"] in admitted
    assert admitted <= {ingress["metadata"]["name"], transactor["metadata"]["name"]}
    # and the admin port is reachable for probes and scraping
    assert any(_covers(r, 9101, "admin") for r in policy["ingress"])


@pytest.mark.parametrize("values_file", CI_FILES, ids=ids(CI_FILES))
def test_transactor_config_and_identity(values_file):
    docs = render(values_file)
    values = values_of(values_file)
    sts = one(docs, "StatefulSet")
    name = sts["metadata"]["name"]
    c = container(sts, "transactor")
    env = env_of(c)
    assert env["CORIUM_FLEET_NODE_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert arg_value(c, "--config") == "/etc/corium-fleet/config/node.toml"
    cm_name = next(v["configMap"]["name"] for v in sts["spec"]["template"]["spec"]["volumes"]
                   if v["name"] == "config")
    config = toml_of(docs, cm_name)
    assert set(config) <= TRANSACTOR_KEYS, set(config) - TRANSACTOR_KEYS
    assert "node_id" not in config and "storage" not in config
    assert config["listen"] == "0.0.0.0:7001" and config["admin_listen"] == "0.0.0.0:9101"
    assert config["lease_ttl_ms"] == values["fleet"]["leaseTtlMs"]
    assert config["replicas"] == values["fleet"]["replicas"] <= sts["spec"]["replicas"]
    advertise = arg_value(c, "--advertise")
    assert advertise.startswith("https://$(CORIUM_FLEET_NODE_ID).")
    deployment = one(docs, "Deployment")
    ingress_config = toml_of(docs, config_map_of(deployment))
    assert ingress_config["replicas"] == config["replicas"]
    assert ingress_config["listen"] == "0.0.0.0:4334"
    assert ingress_config["admin_listen"] == "0.0.0.0:9102"
    assert set(ingress_config) <= INGRESS_KEYS, set(ingress_config) - INGRESS_KEYS
    if values["fleet"]["membership"] == "registry":
        # no member list anywhere: each transactor registers (with its --advertise) and both
        # pools follow the registry
        assert "members" not in config and "members" not in ingress_config
        assert config["registry_ttl_ms"] == values["fleet"]["registryTtlMs"]
        assert config["registry_renew_ms"] == values["fleet"]["registryRenewMs"]
        assert config["registry_renew_ms"] < config["registry_ttl_ms"]
        return
    assert values["fleet"]["membership"] == "static"
    assert "registry_ttl_ms" not in config and "registry_renew_ms" not in config
    # one member per pod; each pod's --advertise is exactly its own member endpoint
    assert len(config["members"]) == sts["spec"]["replicas"] == values["transactor"]["replicas"]
    for i, member in enumerate(config["members"]):
        node_id, endpoint = member.split("=", 1)
        assert node_id == f"{name}-{i}"
        assert endpoint == advertise.replace("$(CORIUM_FLEET_NODE_ID)", node_id)
        assert endpoint == f"https://{name}-{i}.{sts['spec']['serviceName']}.{NS}.svc:7001"
    # the ingress pool has the same members
    assert ingress_config["members"] == config["members"]


@pytest.mark.parametrize("values_file", CI_FILES, ids=ids(CI_FILES))
def test_zone_from_the_node_label(values_file):
    docs = render(values_file)
    values = values_of(values_file)
    sts = one(docs, "StatefulSet")
    pod = sts["spec"]["template"]["spec"]
    c = container(sts, "transactor")
    if not values["zoneLookup"]["enabled"]:
        assert not pod.get("initContainers") and arg_value(c, "--zone-file") is None
        assert not kind(docs, "ClusterRole")
        return
    assert arg_value(c, "--zone-file") == "/etc/corium-fleet/zone/zone"
    init = next(i for i in pod["initContainers"] if i["name"] == "zone-lookup")
    assert env_of(init)["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    script = init["command"][-1]
    assert "/api/v1/nodes/${NODE_NAME}" in script and ZONE.replace(".", "\\.") in script
    assert "> /etc/corium-fleet/zone/zone" in script
    zone_volume = next(v for v in pod["volumes"] if v["name"] == "zone")
    assert "emptyDir" in zone_volume
    # RBAC: get on nodes for the pod's ServiceAccount
    role = one(docs, "ClusterRole")
    assert {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]} in role["rules"]
    binding = one(docs, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert {"kind": "ServiceAccount", "name": pod["serviceAccountName"],
            "namespace": NS} in binding["subjects"]
    # only the initContainer gets an API token
    assert pod["automountServiceAccountToken"] is False
    assert "kube-api-access" in {m["name"] for m in init["volumeMounts"]}
    assert "kube-api-access" not in {m["name"] for m in c["volumeMounts"]}


@pytest.mark.parametrize("values_file", CI_FILES, ids=ids(CI_FILES))
def test_storage_from_values_and_secrets(values_file):
    docs = render(values_file)
    values = values_of(values_file)
    storage = values["storage"]
    rendered_secrets = {s["metadata"]["name"]: s for s in kind(docs, "Secret")}
    for w in workloads(docs):
        c = w["spec"]["template"]["spec"]["containers"][0]
        names = [e["name"] for e in c["env"]]
        env = env_of(c)
        url = env["CORIUM_FLEET_STORAGE"]["value"]
        refs = [e["valueFrom"]["secretKeyRef"] for e in c["env"]
                if "secretKeyRef" in e.get("valueFrom", {})]
        if storage["type"] == "postgres":
            pg = storage["postgres"]
            # $(PG_PASSWORD) expands only if PG_PASSWORD comes first
            assert names.index("PG_PASSWORD") < names.index("CORIUM_FLEET_STORAGE")
            expected = f"postgres://{pg['user']}:$(PG_PASSWORD)@{pg['host']}:{pg['port']}/{pg['database']}"
            assert url == expected + (f"?{pg['options']}" if pg["options"] else "")
            secret = env["PG_PASSWORD"]["valueFrom"]["secretKeyRef"]
            if pg["existingSecret"]:
                assert secret == {"name": pg["existingSecret"], "key": pg["existingSecretKey"]}
            else:
                data = rendered_secrets[secret["name"]]["data"]
                assert base64.b64decode(data[secret["key"]]).decode() == pg["password"]
        else:
            s3 = storage["s3"]
            assert url == f"s3://{s3['bucket']}/{s3['prefix']}"
            assert env["AWS_REGION"]["value"] == s3["region"]
            assert env.get("CORIUM_FLEET_S3_ENDPOINT", {}).get("value", "") == s3["endpoint"]
            if s3["credentials"] == "workloadIdentity":
                # no static keys anywhere: the AWS SDK's chain (IRSA, Pod Identity) provides them
                assert not {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} & set(env)
                assert f"{values['fullnameOverride'] or FULL}-storage" not in rendered_secrets
            else:
                for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
                    ref = env[var]["valueFrom"]["secretKeyRef"]
                    if s3["existingSecret"]:
                        assert ref["name"] == s3["existingSecret"]
                    else:
                        assert ref["key"] in rendered_secrets[ref["name"]]["data"]
        assert url and not url.startswith("file") and "filesystem" not in url
        for ref in refs:
            assert ref["name"] in rendered_secrets or ref["name"] in (
                storage["postgres"]["existingSecret"], storage["s3"]["existingSecret"],
                values["auth"]["existingSecret"], storage["readOnly"]["postgresUrlSecret"],
                storage["readOnly"]["s3Secret"])
        # storage_pool_size only when set, and only for PostgreSQL (S3 has no pool)
        component = pod_labels(w)["app.kubernetes.io/component"]
        pool_size = storage["postgres"]["poolSize"].get(component)
        config = toml_of(docs, config_map_of(w))
        if storage["type"] == "postgres" and pool_size is not None:
            assert config["storage_pool_size"] == pool_size
        else:
            assert "storage_pool_size" not in config


@pytest.mark.parametrize("values_file", CI_FILES, ids=ids(CI_FILES))
def test_security_probes_and_shutdown(values_file):
    docs = render(values_file)
    values = values_of(values_file)
    for w in workloads(docs):
        pod = w["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] == 65532
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
        for c in pod["containers"] + pod.get("initContainers", []):
            sc = c["securityContext"]
            assert sc["runAsNonRoot"] and sc["runAsUser"] == 65532, c["name"]
            assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"]["drop"] == ["ALL"]
            assert sc["seccompProfile"]["type"] == "RuntimeDefault"
            assert c["resources"].get("requests"), c["name"]
    for component, admin in (("transactor", 9101), ("ingress", 9102)):
        w = pool(docs, component)
        c = w["spec"]["template"]["spec"]["containers"][0]
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        assert ports["admin"] == admin
        assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "admin"}
        assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "admin"}
        assert "/etc/corium-fleet/tls" in {m["mountPath"] for m in c["volumeMounts"]}
        sleep = values[component]["preStopSleepSeconds"]
        grace = w["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        assert grace == values[component]["terminationGracePeriodSeconds"]
        if sleep:
            assert c["lifecycle"]["preStop"]["exec"]["command"] == ["/usr/bin/sleep", str(sleep)]
            assert grace > sleep
        else:
            assert "lifecycle" not in c
    transactor = container(pool(docs, "transactor"), "transactor")
    for flag, path in transactor_tls_files(values["tls"]["mode"]).items():
        assert arg_value(transactor, flag) == path, flag
    ingress = container(pool(docs, "ingress"), "ingress")
    for flag, path in (("--upstream-cert", "tls.crt"), ("--upstream-key", "tls.key"),
                       ("--upstream-ca", "ca.crt")):
        assert arg_value(ingress, flag) == f"/etc/corium-fleet/tls/{path}"
    assert (arg_value(ingress, "--tls-listen") == "0.0.0.0:4443") == public_tls_on(values)


def test_long_release_names_still_give_valid_node_ids_and_names():
    release = "a-very-long-release-name-for-a-fleet-in-production-eu"  # 53 characters
    result = helm("template", release, str(CHART), "--namespace", NS, *POSTGRES,
                  "--set", "transactor.replicas=12", "--set", "fleet.membership=static")
    assert result.returncode == 0, result.stderr
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    sts = one(docs, "StatefulSet")
    # the StatefulSet's pods are NAME-N and carry controller-revision-hash=NAME-HASH (63 max)
    assert len(sts["metadata"]["name"]) <= 52
    config = toml_of(docs, sts["metadata"]["name"])
    assert len(config["members"]) == 12
    for member in config["members"]:
        node_id = member.split("=", 1)[0]
        assert re.fullmatch(r"[A-Za-z0-9._-]{1,63}", node_id), node_id  # the transactor's rule
    for doc in docs:
        assert len(doc["metadata"]["name"]) <= 63, doc["metadata"]["name"]


def test_transactor_defaults():
    docs = template(*POSTGRES)
    sts = one(docs, "StatefulSet")
    assert sts["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 60
    assert container(sts, "transactor")["lifecycle"]["preStop"]["exec"]["command"] == [
        "/usr/bin/sleep", "5"]
    assert sts["spec"]["replicas"] == 3


@pytest.mark.parametrize("values_file", CI_FILES, ids=ids(CI_FILES))
def test_tls_secrets_are_mounted_and_provided(values_file):
    docs = render(values_file)
    values = values_of(values_file)
    mode = values["tls"]["mode"]
    provided = {s["metadata"]["name"] for s in kind(docs, "Secret")}
    provided |= {c["spec"]["secretName"] for c in kind(docs, "Certificate")}
    existing = set(values["tls"]["existingSecret"].values()) | {values["ingress"]["publicTls"]["secretName"]}
    for w in workloads(docs):
        component = pod_labels(w)["app.kubernetes.io/component"]
        # The user's own volumes, and the collector's and the storage keys' Secrets (the user's
        # too).
        extra = {v["name"] for v in values[component]["extraVolumes"]} | {"otlp-tls", "storage-keys"}
        for volume in w["spec"]["template"]["spec"]["volumes"]:
            if volume["name"] in extra:
                continue
            names = ([volume["secret"]["secretName"]] if "secret" in volume else
                     [s["secret"]["name"] for s in volume.get("projected", {}).get("sources", [])
                      if "secret" in s])
            for name in names:
                if mode == "existingSecret" or values["ingress"]["publicTls"]["secretName"] == name:
                    assert name in existing, name
                else:
                    assert name in provided, name
    if mode not in ("certManager", "certManagerCsi"):
        assert not kind(docs, "Certificate") and not kind(docs, "Issuer")
    if mode != "selfSigned":
        assert not [s for s in kind(docs, "Secret") if s["type"] == "kubernetes.io/tls"]
    tls = _tls_volume(one(docs, "StatefulSet"))
    if mode == "certManagerCsi":
        # no transactor certificate in a Secret at all: each pod gets its own from the CSI driver
        assert set(tls) == {"name", "csi"}
        assert not [c for c in kind(docs, "Certificate") if "-transactor" in c["spec"]["secretName"]]
    elif mode == "certManager":
        # one Secret per pod, all projected into the one volume
        assert set(tls) == {"name", "projected"}
    else:
        assert set(tls) == {"name", "secret"}


def test_cert_manager_certificates():
    values_file = CHART / "ci" / "s3-certmanager-values.yaml"
    docs = render(values_file)
    sts = one(docs, "StatefulSet")
    suffix = f"{sts['spec']['serviceName']}.{NS}.svc"
    certs = {c["spec"]["secretName"]: c for c in kind(docs, "Certificate")}
    # one Certificate per transactor pod, none shared (node identity: see below)
    assert f"{FULL}-transactor-tls" not in certs
    server = certs[f"{FULL}-transactor-0-tls"]["spec"]
    assert server["commonName"] == f"{FULL}-transactor-0"
    assert server["dnsNames"] == [f"{FULL}-transactor-0", f"{FULL}-transactor-0.{suffix}",
                                  f"{FULL}-transactor-0.{suffix}.cluster.local"]
    assert {"server auth", "client auth"} <= set(server["usages"])
    client = certs[f"{FULL}-ingress-tls"]["spec"]
    assert "client auth" in client["usages"]
    public = certs[f"{FULL}-public-tls"]["spec"]
    assert f"{FULL}.{NS}.svc" in public["dnsNames"] and "corium.example.com" in public["dnsNames"]
    # no issuerRef in values: the chart's self-signed Issuer -> CA Certificate -> CA Issuer chain
    issuers = {i["metadata"]["name"]: i["spec"] for i in kind(docs, "Issuer")}
    assert issuers[f"{FULL}-selfsigned"] == {"selfSigned": {}}
    ca = certs[f"{FULL}-ca"]["spec"]
    assert ca["isCA"] is True and ca["issuerRef"]["name"] == f"{FULL}-selfsigned"
    assert issuers[f"{FULL}-ca"]["ca"]["secretName"] == f"{FULL}-ca"
    for spec in (server, client, public):
        assert spec["issuerRef"] == {"name": f"{FULL}-ca", "kind": "Issuer", "group": "cert-manager.io"}
    # a given ClusterIssuer is used as is, and no chain is created
    docs = render(CHART / "ci" / "s3-clusterissuer-values.yaml")
    assert not kind(docs, "Issuer")
    for cert in kind(docs, "Certificate"):
        assert cert["spec"]["issuerRef"] == {"name": "internal-ca", "kind": "ClusterIssuer",
                                             "group": "cert-manager.io"}


# TLS modes: how each is selected in the tests below.
NODE_IDENTITY = "--verify-node-identity"
NODE = f"{FULL}-transactor"
CSI = ("--set", "tls.mode=certManagerCsi")
EXISTING_TLS = ("--set", "tls.mode=existingSecret",
                "--set", "tls.existingSecret.transactor=fleet-transactor-tls",
                "--set", "tls.existingSecret.ingress=fleet-ingress-tls")
TLS_MODES = {"selfSigned": (), "certManager": ("--set", "tls.mode=certManager"),
             "certManagerCsi": CSI, "existingSecret": EXISTING_TLS}
CHART_ISSUED = ("selfSigned", "certManager", "certManagerCsi")


# --- client-facing TLS: on by default wherever a certificate can be issued -----------------------

def _public_tls(docs: list[dict]) -> dict:
    """Where client-facing TLS shows in the rendering: the ingress's flags, port, mount and
    volume, the client Service's port, and the NetworkPolicy's."""
    deployment = pool(docs, "ingress")
    c = container(deployment, "ingress")
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    client = next(s for s in kind(docs, "Service") if "grpc" in {p["name"] for p in s["spec"]["ports"]}
                  and s["spec"].get("clusterIP") != "None")
    policy = [p for p in kind(docs, "NetworkPolicy") if p["metadata"]["name"].endswith("-ingress")]
    return {
        "listen": arg_value(c, "--tls-listen"),
        "files": (arg_value(c, "--tls-cert"), arg_value(c, "--tls-key")),
        "port": {p["name"]: p["containerPort"] for p in c["ports"]}.get("grpc-tls"),
        "mount": next((m["mountPath"] for m in c["volumeMounts"] if m["name"] == "public-tls"), None),
        "secret": volumes.get("public-tls", {}).get("secret", {}).get("secretName"),
        "service": {p["name"]: p["port"] for p in client["spec"]["ports"]}.get("grpc-tls"),
        "policy": bool(policy) and 4443 in {p["port"] for r in policy[0]["spec"]["ingress"]
                                            for p in r.get("ports", [])},
    }


PUBLIC_ON = {"listen": "0.0.0.0:4443", "port": 4443, "mount": "/etc/corium-fleet/public-tls",
             "service": 4443, "policy": True,
             "files": ("/etc/corium-fleet/public-tls/tls.crt", "/etc/corium-fleet/public-tls/tls.key")}


@pytest.mark.parametrize("mode", CHART_ISSUED)
def test_client_facing_tls_is_on_by_default_in_every_mode_that_can_issue_it(mode):
    docs = template(*POSTGRES, *TLS_MODES[mode])
    assert _public_tls(docs) == {**PUBLIC_ON, "secret": f"{FULL}-public-tls"}
    if mode == "selfSigned":
        public = one(docs, "Secret", f"{FULL}-public-tls")
        # clients fetch the CA from the same Secret (ca.crt), not from the CA's own (it has the key)
        assert public["data"]["ca.crt"] == one(docs, "Secret", f"{FULL}-ca")["data"]["tls.crt"]
    else:
        cert = next(c["spec"] for c in kind(docs, "Certificate")
                    if c["spec"]["secretName"] == f"{FULL}-public-tls")
        assert cert["usages"] == ["digital signature", "key encipherment", "server auth"]
        assert f"{FULL}.{NS}.svc" in cert["dnsNames"]


def test_client_facing_tls_in_existing_secret_mode_follows_the_secret():
    off = template(*POSTGRES, *EXISTING_TLS)
    assert _public_tls(off) == {"listen": None, "files": (None, None), "port": None,
                                "mount": None, "secret": None, "service": None, "policy": False}
    on = template(*POSTGRES, *EXISTING_TLS, "--set", "ingress.publicTls.secretName=public")
    assert _public_tls(on) == {**PUBLIC_ON, "secret": "public"}
    assert "ingress.publicTls.secretName is required" in _render_error(
        *EXISTING_TLS, "--set", "ingress.publicTls.enabled=true")


def test_client_facing_tls_can_be_turned_off():
    docs = template(*POSTGRES, "--set", "ingress.publicTls.enabled=false")
    assert _public_tls(docs)["listen"] is None and _public_tls(docs)["service"] is None
    assert f"{FULL}-public-tls" not in {s["metadata"]["name"] for s in kind(docs, "Secret")}


# --- node identity: a certificate per transactor pod, or (existingSecret) the check turned off ---

def _tls_volume(workload: dict) -> dict:
    return next(v for v in workload["spec"]["template"]["spec"]["volumes"] if v["name"] == "tls")


def _pod_dns_names(node_id: str, domain: str = "cluster.local") -> list[str]:
    pod = f"{node_id}.{NODE}.{NS}.svc"
    return [node_id, pod, f"{pod}.{domain}"]


def _pod_file(c: dict, flag: str, node_id: str) -> str:
    """The file pod `node_id` reads for `flag`, relative to the TLS volume, as Kubernetes expands
    $(CORIUM_FLEET_NODE_ID) (the pod name, from the downward API)."""
    path = arg_value(c, flag)
    assert path.startswith(TLS_DIR + "/"), path
    return path.replace("$(CORIUM_FLEET_NODE_ID)", node_id).removeprefix(TLS_DIR + "/")


@pytest.mark.parametrize("values_file", CI_FILES, ids=ids(CI_FILES))
def test_node_identity_check_follows_the_tls_mode(values_file):
    docs = render(values_file)
    shared = values_of(values_file)["tls"]["mode"] == "existingSecret"
    for component, c in pool_containers(docs).items():
        if shared:
            assert c["args"].count(NODE_IDENTITY) == 1, component
            assert arg_value(c, NODE_IDENTITY) == "false", component
        else:
            # the binaries' default (on) applies: a member must present its own certificate
            assert not [a for a in c["args"] if a.startswith(NODE_IDENTITY)], component


@pytest.mark.parametrize("mode", CHART_ISSUED)
def test_every_chart_issued_mode_keeps_the_node_identity_check_on(mode):
    """Each transactor's certificate names its node id in every mode the chart issues, so neither
    pool turns the check off (the previous chart passed `--verify-node-identity false` in
    selfSigned and certManager)."""
    docs = template(*POSTGRES, *TLS_MODES[mode])
    for component, c in pool_containers(docs).items():
        assert not [a for a in c["args"] if a.startswith(NODE_IDENTITY)], (mode, component)
        assert "--dev-token-operator" not in c["args"], component


def test_a_shared_existing_certificate_turns_the_node_identity_check_off_on_both_pools():
    """One user-supplied certificate for *.<headless>.<namespace>.svc names no node id: both
    pools would refuse every transactor with the check on, so nodes fall back to the token."""
    docs = template(*POSTGRES, *EXISTING_TLS)
    for component, c in pool_containers(docs).items():
        args = c["args"]
        assert args.count(NODE_IDENTITY) == 1, component
        # two arguments, the value a string (clap's BOOL)
        assert args[args.index(NODE_IDENTITY) + 1] == "false", component
        assert _tls_volume(pool(docs, component))["secret"]["secretName"] == (
            "fleet-transactor-tls" if component == "transactor" else "fleet-ingress-tls")
    transactor = container(one(docs, "StatefulSet"), "transactor")
    for flag, path in transactor_tls_files("existingSecret").items():
        assert arg_value(transactor, flag) == path


def test_self_signed_gives_each_transactor_its_own_certificate():
    docs = template(*POSTGRES, "--set", "transactor.replicas=4")
    secrets = {s["metadata"]["name"]: s for s in kind(docs, "Secret")}
    # no shared transactor certificate any more
    assert f"{FULL}-transactor-tls" not in secrets
    node = secrets[f"{NODE}-node-tls"]
    assert node["type"] == "Opaque"
    ids_ = [f"{NODE}-{i}" for i in range(4)]
    assert set(node["data"]) == {"ca.crt"} | {f"{i}.crt" for i in ids_} | {f"{i}.key" for i in ids_}
    assert node["data"]["ca.crt"] == secrets[f"{FULL}-ca"]["data"]["tls.crt"]
    ca = _cert(node["data"]["ca.crt"])
    serials = set()
    for node_id in ids_:
        cert = _cert(node["data"][f"{node_id}.crt"])
        cert.verify_directly_issued_by(ca)
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == node_id
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        # the node id itself (what a peer verifies) and the pod's own DNS names, no wildcard
        assert sans.get_values_for_type(x509.DNSName) == _pod_dns_names(node_id)
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        # a node serves with it and presents it to its peers
        assert ExtendedKeyUsageOID.SERVER_AUTH in eku and ExtendedKeyUsageOID.CLIENT_AUTH in eku
        key = serialization.load_pem_private_key(base64.b64decode(node["data"][f"{node_id}.key"]), None)
        assert key.public_key().public_numbers() == cert.public_key().public_numbers()
        serials.add(cert.serial_number)
    assert len(serials) == 4
    # the whole Secret is mounted; each pod reads its own files, named by its node id
    sts = one(docs, "StatefulSet")
    assert _tls_volume(sts)["secret"]["secretName"] == f"{NODE}-node-tls"
    c = container(sts, "transactor")
    assert env_of(c)["CORIUM_FLEET_NODE_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    for flag, path in transactor_tls_files("selfSigned").items():
        assert arg_value(c, flag) == path
    for i in range(sts["spec"]["replicas"]):
        pod = f"{sts['metadata']['name']}-{i}"
        assert _pod_file(c, "--tls-cert", pod) == f"{pod}.crt" and f"{pod}.crt" in node["data"]
        assert _pod_file(c, "--tls-key", pod) == f"{pod}.key" and f"{pod}.key" in node["data"]
        assert _pod_file(c, "--tls-client-ca", pod) in node["data"]


def test_cert_manager_gives_each_transactor_a_certificate_of_its_own():
    docs = template(*POSTGRES, "--set", "tls.mode=certManager", "--set", "transactor.replicas=4",
                    "--set", "clusterDomain=corp.local")
    ids_ = [f"{NODE}-{i}" for i in range(4)]
    certs = {c["metadata"]["name"]: c["spec"] for c in kind(docs, "Certificate")}
    assert f"{FULL}-transactor-tls" not in certs
    for node_id in ids_:
        spec = certs[f"{node_id}-tls"]
        assert spec["secretName"] == f"{node_id}-tls"
        assert spec["commonName"] == node_id
        assert spec["dnsNames"] == _pod_dns_names(node_id, "corp.local")
        assert {"server auth", "client auth"} <= set(spec["usages"])
        assert spec["issuerRef"]["name"] == f"{FULL}-ca"
    assert len([n for n in certs if n.startswith(f"{NODE}-")]) == 4
    # every pod's Secret projected into the one volume, each pod's files named by its node id
    sts = one(docs, "StatefulSet")
    sources = [src["secret"] for src in _tls_volume(sts)["projected"]["sources"]]
    assert [src["name"] for src in sources] == [f"{i}-tls" for i in ids_]
    paths = [item["path"] for src in sources for item in src["items"]]
    assert len(paths) == len(set(paths)), "a projected volume refuses a path given twice"
    assert paths.count("ca.crt") == 1
    for node_id, src in zip(ids_, sources):
        assert {"key": "tls.crt", "path": f"{node_id}.crt"} in src["items"]
        assert {"key": "tls.key", "path": f"{node_id}.key"} in src["items"]
    c = container(sts, "transactor")
    for flag, path in transactor_tls_files("certManager").items():
        assert arg_value(c, flag) == path
    for i in range(sts["spec"]["replicas"]):
        pod = f"{sts['metadata']['name']}-{i}"
        for flag in ("--tls-cert", "--tls-key", "--tls-client-ca"):
            assert _pod_file(c, flag, pod) in paths, (pod, flag)
    mounts = [m for m in c["volumeMounts"] if m["name"] == "tls"]
    # a directory mount (no subPath): the kubelet updates it when cert-manager renews
    assert mounts == [{"name": "tls", "mountPath": TLS_DIR, "readOnly": True}]


CSI_VALUES = CHART / "ci" / "postgres-certmanagercsi-values.yaml"


def test_cert_manager_csi_gives_each_transactor_a_certificate_named_by_its_pod():
    docs = render(CSI_VALUES)
    values = values_of(CSI_VALUES)
    assert values["tls"]["mode"] == "certManagerCsi"
    sts = one(docs, "StatefulSet")
    suffix = f"{sts['spec']['serviceName']}.{NS}.svc"
    volume = _tls_volume(sts)
    assert set(volume) == {"name", "csi"}
    assert volume["csi"]["driver"] == "csi.cert-manager.io"
    assert volume["csi"]["readOnly"] is True
    # no issuerRef in values: the chart's CA Issuer, the one that signs the ingress's Certificates
    assert volume["csi"]["volumeAttributes"] == {
        "csi.cert-manager.io/issuer-name": f"{FULL}-ca",
        "csi.cert-manager.io/issuer-kind": "Issuer",
        "csi.cert-manager.io/issuer-group": "cert-manager.io",
        # the driver expands ${POD_NAME}: the pod name is the node id
        "csi.cert-manager.io/common-name": "${POD_NAME}",
        "csi.cert-manager.io/dns-names":
            f"${{POD_NAME}},${{POD_NAME}}.{suffix},${{POD_NAME}}.{suffix}.cluster.local",
        "csi.cert-manager.io/key-usages":
            "server auth,client auth,digital signature,key encipherment",
        "csi.cert-manager.io/key-encoding": "PKCS8",
        "csi.cert-manager.io/duration": values["tls"]["certManager"]["duration"],
        "csi.cert-manager.io/renew-before": values["tls"]["certManager"]["renewBefore"],
        "csi.cert-manager.io/certificate-file": "tls.crt",
        "csi.cert-manager.io/privatekey-file": "tls.key",
        "csi.cert-manager.io/ca-file": "ca.crt",
        # files are 0440 root-owned without it: the non-root container's group must own them
        "csi.cert-manager.io/fs-group": "65532",
    }
    # mounted where the unchanged arguments read it
    transactor = container(sts, "transactor")
    assert [m for m in transactor["volumeMounts"] if m["name"] == "tls"] == [
        {"name": "tls", "mountPath": TLS_DIR, "readOnly": True}]
    for flag, path in (("--tls-cert", "tls.crt"), ("--tls-key", "tls.key"),
                       ("--tls-client-ca", "ca.crt")):
        assert arg_value(transactor, flag) == f"{TLS_DIR}/{path}"
    # the certificates name node ids: the check stays on (the default) in both pools
    for component, c in pool_containers(docs).items():
        assert NODE_IDENTITY not in c["args"], component
    # the ingress keeps its cert-manager Certificates (client identity, client-facing port)
    certs = {c["spec"]["secretName"]: c["spec"] for c in kind(docs, "Certificate")}
    assert set(certs) == {f"{FULL}-ca", f"{FULL}-ingress-tls", f"{FULL}-public-tls"}
    assert "client auth" in certs[f"{FULL}-ingress-tls"]["usages"]
    assert certs[f"{FULL}-ingress-tls"]["commonName"] == arg_value(transactor, "--ingress-identity")
    for name in (f"{FULL}-ingress-tls", f"{FULL}-public-tls"):
        assert certs[name]["issuerRef"] == {"name": f"{FULL}-ca", "kind": "Issuer",
                                            "group": "cert-manager.io"}
    ingress = pool(docs, "ingress")
    volumes = {v["name"]: v for v in ingress["spec"]["template"]["spec"]["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == f"{FULL}-ingress-tls"
    assert volumes["public-tls"]["secret"]["secretName"] == f"{FULL}-public-tls"
    issuers = {i["metadata"]["name"]: i["spec"] for i in kind(docs, "Issuer")}
    assert issuers[f"{FULL}-ca"] == {"ca": {"secretName": f"{FULL}-ca"}}
    assert not [s for s in kind(docs, "Secret") if s["type"] == "kubernetes.io/tls"]


def test_cert_manager_csi_follows_the_issuer_lifetimes_and_domain():
    docs = template(*POSTGRES, *CSI, "--set", "tls.certManager.issuerRef.name=internal-ca",
                    "--set", "tls.certManager.issuerRef.kind=ClusterIssuer",
                    "--set", "tls.certManager.duration=48h",
                    "--set", "tls.certManager.renewBefore=12h", "--set", "clusterDomain=corp.local",
                    "--set", "securityContext.runAsGroup=2000")
    attrs = _tls_volume(one(docs, "StatefulSet"))["csi"]["volumeAttributes"]
    assert (attrs["csi.cert-manager.io/issuer-name"], attrs["csi.cert-manager.io/issuer-kind"],
            attrs["csi.cert-manager.io/issuer-group"]) == ("internal-ca", "ClusterIssuer",
                                                           "cert-manager.io")
    assert attrs["csi.cert-manager.io/duration"] == "48h"
    assert attrs["csi.cert-manager.io/renew-before"] == "12h"
    assert attrs["csi.cert-manager.io/dns-names"].split(",")[-1] == (
        f"${{POD_NAME}}.{T}.{NS}.svc.corp.local")
    assert attrs["csi.cert-manager.io/fs-group"] == "2000"
    # a named issuer: no chain, and only the ingress's Certificates (client identity, client port)
    assert not kind(docs, "Issuer")
    assert [c["spec"]["secretName"] for c in kind(docs, "Certificate")] == [
        f"{FULL}-ingress-tls", f"{FULL}-public-tls"]
    for cert in kind(docs, "Certificate"):
        assert cert["spec"]["issuerRef"] == {
            "name": "internal-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}


def test_cert_manager_csi_pod_templates_are_stable():
    """Nothing generated at render time (no checksum of certificates on the pod templates), so an
    upgrade that changes nothing restarts no pod."""
    first, second = template(*POSTGRES, *CSI), template(*POSTGRES, *CSI)
    for kind_name in ("StatefulSet", "Deployment"):
        assert one(first, kind_name) == one(second, kind_name), kind_name
        assert "checksum/tls" not in one(first, kind_name)["spec"]["template"]["metadata"][
            "annotations"]


# --- selfSigned: generated certificates and keeping them across upgrades -------------------------

def _tls_secrets(docs: list[dict]) -> dict[str, dict]:
    """selfSigned's Secrets by name (their data): the CA, every transactor pod's certificate (one
    Opaque Secret), the ingress's and the client-facing one."""
    return {s["metadata"]["name"]: s["data"] for s in kind(docs, "Secret")
            if s["type"] == "kubernetes.io/tls" or s["metadata"]["name"] == f"{NODE}-node-tls"}


def _store(api: FakeKubeAPI, docs: list[dict]) -> None:
    """What an install of `docs` leaves in the cluster: every Secret."""
    for secret in kind(docs, "Secret"):
        api.secrets[(NS, secret["metadata"]["name"])] = {"type": secret["type"],
                                                         "data": secret["data"]}


def _cert(b64: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate(base64.b64decode(b64))


def test_self_signed_certificates_chain_and_names():
    docs = template(*POSTGRES)
    secrets = _tls_secrets(docs)
    # the client-facing certificate is issued by default (ingress.publicTls.enabled null)
    assert set(secrets) == {f"{FULL}-ca", f"{NODE}-node-tls", f"{FULL}-ingress-tls",
                            f"{FULL}-public-tls"}
    ca = _cert(secrets[f"{FULL}-ca"]["tls.crt"])
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    for name, data in secrets.items():
        assert data["ca.crt"] == secrets[f"{FULL}-ca"]["tls.crt"]
        for key, value in data.items():
            if key.endswith(".crt") and key != "ca.crt":
                _cert(value).verify_directly_issued_by(ca)
    client = _cert(secrets[f"{FULL}-ingress-tls"]["tls.crt"])
    eku = client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.CLIENT_AUTH in eku
    public = _cert(secrets[f"{FULL}-public-tls"]["tls.crt"])
    names = public.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"{FULL}.{NS}.svc" in names.get_values_for_type(x509.DNSName)


def _render_against(api: FakeKubeAPI, tmp_path: Path, *args: str) -> list[dict]:
    kubeconfig = api.kubeconfig(tmp_path, NS)
    return template(*POSTGRES, "--dry-run=server", "--kubeconfig", str(kubeconfig), *args)


def test_self_signed_ca_and_certificates_are_kept_when_their_secrets_exist(tmp_path):
    """Exercises the chart's real `lookup` against a fake API server (fake_kube_api.py):
    `helm template --dry-run=server` performs lookups, plain `helm template` cannot."""
    installed = template(*POSTGRES)
    first = _tls_secrets(installed)
    second = _tls_secrets(template(*POSTGRES))
    # offline, nothing can be looked up, so every render makes a new CA ...
    assert first[f"{FULL}-ca"]["tls.crt"] != second[f"{FULL}-ca"]["tls.crt"]
    with FakeKubeAPI() as api:
        # ... but an upgrade, where the Secrets of the first install exist, keeps them all
        _store(api, installed)
        upgraded_docs = _render_against(api, tmp_path)
        again_docs = _render_against(api, tmp_path)
        assert f"/api/v1/namespaces/{NS}/secrets/{FULL}-ca" in api.requests
        assert f"/api/v1/namespaces/{NS}/secrets/{NODE}-node-tls" in api.requests
    assert _tls_secrets(upgraded_docs) == first
    # ... and the pods are not restarted by it: their templates are the same on every upgrade,
    # and the same as at install (the checksum is the CA's, computed once per rendering)
    for kind_name in ("StatefulSet", "Deployment"):
        assert one(upgraded_docs, kind_name) == one(again_docs, kind_name)
        annotations = one(upgraded_docs, kind_name)["spec"]["template"]["metadata"]["annotations"]
        assert annotations["checksum/tls"] == one(installed, kind_name)["spec"]["template"][
            "metadata"]["annotations"]["checksum/tls"]


def test_self_signed_new_certificates_are_signed_by_the_kept_ca(tmp_path):
    first = _tls_secrets(template(*POSTGRES))
    other = _tls_secrets(template(*POSTGRES))
    with FakeKubeAPI() as api:
        # the CA exists; the transactors' certificates are from another CA (stale); no ingress cert
        api.secrets[(NS, f"{FULL}-ca")] = {"type": "kubernetes.io/tls", "data": first[f"{FULL}-ca"]}
        api.secrets[(NS, f"{NODE}-node-tls")] = {"data": other[f"{NODE}-node-tls"]}
        upgraded = _tls_secrets(_render_against(api, tmp_path))
    assert upgraded[f"{FULL}-ca"] == first[f"{FULL}-ca"]
    ca = _cert(first[f"{FULL}-ca"]["tls.crt"])
    for name in (f"{NODE}-node-tls", f"{FULL}-ingress-tls"):
        assert upgraded[name]["ca.crt"] == first[f"{FULL}-ca"]["tls.crt"]
    _cert(upgraded[f"{FULL}-ingress-tls"]["tls.crt"]).verify_directly_issued_by(ca)
    for i in range(3):
        key = f"{NODE}-{i}.crt"
        _cert(upgraded[f"{NODE}-node-tls"][key]).verify_directly_issued_by(ca)
        assert upgraded[f"{NODE}-node-tls"][key] != other[f"{NODE}-node-tls"][key]


def test_self_signed_scaling_issues_the_new_pods_certificates_and_restarts_no_pod(tmp_path):
    """Scaling the transactors (registry membership) adds a certificate per new pod from the kept
    CA, keeps every other one, and changes no pod template: the Secret is mounted whole, and the
    pods' checksum/tls is the CA's."""
    installed = template(*POSTGRES)
    with FakeKubeAPI() as api:
        _store(api, installed)
        three = _render_against(api, tmp_path)
        five = _render_against(api, tmp_path, "--set", "transactor.replicas=5")
    before = _tls_secrets(three)[f"{NODE}-node-tls"]
    after = _tls_secrets(five)[f"{NODE}-node-tls"]
    assert before == _tls_secrets(installed)[f"{NODE}-node-tls"]
    assert {k: v for k, v in after.items() if k in before} == before
    assert set(after) - set(before) == {f"{NODE}-{i}.{ext}" for i in (3, 4) for ext in ("crt", "key")}
    ca = _cert(before["ca.crt"])
    for i in (3, 4):
        _cert(after[f"{NODE}-{i}.crt"]).verify_directly_issued_by(ca)
    for kind_name in ("StatefulSet", "Deployment"):
        assert one(three, kind_name)["spec"]["template"] == one(five, kind_name)["spec"]["template"]


# --- membership and the placement map ------------------------------------------------------------

PLACEMENT_PATH = "/etc/corium-fleet/placement/placement-map"
T = f"{FULL}-transactor"


def _configs(docs: list[dict]) -> tuple[dict, dict]:
    """(transactor node.toml, ingress node.toml) as the workloads mount them."""
    return (toml_of(docs, config_map_of(one(docs, "StatefulSet"))),
            toml_of(docs, config_map_of(one(docs, "Deployment"))))


def _with_map(tmp_path: Path, text: str, *args: str) -> list[dict]:
    values = tmp_path / "map-values.yaml"
    values.write_text(yaml.safe_dump({"fleet": {"placementMap": text}}))
    return template(*POSTGRES, "-f", str(values), *args)


def test_default_membership_is_the_registry():
    docs = template(*POSTGRES)
    transactor, ingress = _configs(docs)
    assert "members" not in transactor and "members" not in ingress
    assert transactor["registry_ttl_ms"] == 10000 and transactor["registry_renew_ms"] == 3000
    # the ingress has no registry settings (it would refuse the keys); it follows the registry
    assert "registry_ttl_ms" not in ingress and "registry_renew_ms" not in ingress
    # what each transactor registers: its pod name, its own endpoint and its node's zone
    c = container(one(docs, "StatefulSet"), "transactor")
    assert env_of(c)["CORIUM_FLEET_NODE_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert arg_value(c, "--advertise") == f"https://$(CORIUM_FLEET_NODE_ID).{T}.{NS}.svc:7001"
    assert arg_value(c, "--zone-file") == "/etc/corium-fleet/zone/zone"
    # no placement map unless one is given
    assert "placement_map" not in transactor and "placement_map" not in ingress
    assert not [d for d in kind(docs, "ConfigMap") if d["metadata"]["name"].endswith("placement-map")]
    for w in workloads(docs):
        assert "placement-map" not in {v["name"] for v in w["spec"]["template"]["spec"]["volumes"]}


def test_the_ingress_assigns_request_ids_unless_told_not_to():
    _, ingress = _configs(template(*POSTGRES))
    assert ingress["assign_request_ids"] is True
    _, ingress = _configs(template(*POSTGRES, "--set", "ingress.assignRequestIds=false"))
    assert ingress["assign_request_ids"] is False


def test_registry_settings_follow_the_values():
    transactor, _ = _configs(template(*POSTGRES, "--set", "fleet.registryTtlMs=20000",
                                      "--set", "fleet.registryRenewMs=19999"))
    assert (transactor["registry_ttl_ms"], transactor["registry_renew_ms"]) == (20000, 19999)


def test_static_membership_renders_the_member_list():
    docs = template(*POSTGRES, "--set", "fleet.membership=static", "--set", "transactor.replicas=4")
    transactor, ingress = _configs(docs)
    suffix = f"{T}.{NS}.svc:7001"
    assert transactor["members"] == [f"{T}-{i}=https://{T}-{i}.{suffix}" for i in range(4)]
    assert ingress["members"] == transactor["members"]
    assert "registry_ttl_ms" not in transactor and "registry_renew_ms" not in transactor


def test_changing_transactor_replicas_rolls_the_pools_only_in_static_mode():
    def checksums(*args):
        docs = template(*POSTGRES, "--set", "tls.mode=certManager", *args)
        return [w["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
                for w in (one(docs, "StatefulSet"), one(docs, "Deployment"))]
    assert checksums("--set", "transactor.replicas=3") == checksums("--set", "transactor.replicas=5")
    static = ("--set", "fleet.membership=static")
    before = checksums(*static, "--set", "transactor.replicas=3")
    after = checksums(*static, "--set", "transactor.replicas=5")
    assert before[0] != after[0] and before[1] != after[1]


@pytest.mark.parametrize("membership", ["registry", "static"])
def test_placement_map_is_mounted_into_both_pools(tmp_path, membership):
    text = f"# hot tenants\norders = {T}-2, {T}-0\ninvoices = {T}-1,{T}-0  # comment\n"
    docs = _with_map(tmp_path, text, "--set", f"fleet.membership={membership}")
    cm = one(docs, "ConfigMap", f"{FULL}-placement-map")
    assert cm["data"] == {"placement-map": text}
    mount_dir, key = PLACEMENT_PATH.rsplit("/", 1)
    assert key == "placement-map"
    for config in _configs(docs):
        assert config["placement_map"] == PLACEMENT_PATH
        assert ("members" in config) == (membership == "static")
    for component in ("transactor", "ingress"):
        w = pool(docs, component)
        pod = w["spec"]["template"]["spec"]
        volume = next(v for v in pod["volumes"] if v["name"] == "placement-map")
        assert volume["configMap"]["name"] == cm["metadata"]["name"]
        mounts = [m for m in container(w, component)["volumeMounts"] if m["name"] == "placement-map"]
        # a directory mount (no subPath): only those receive the kubelet's ConfigMap updates
        assert mounts == [{"name": "placement-map", "mountPath": mount_dir, "readOnly": True}]


def test_editing_the_placement_map_does_not_roll_the_pods(tmp_path):
    """The binaries re-read the map live: no checksum of it on the pod templates."""
    first = _with_map(tmp_path, f"orders = {T}-0, {T}-1\n", "--set", "tls.mode=certManager")
    second = _with_map(tmp_path, f"orders = {T}-2, {T}-1\n", "--set", "tls.mode=certManager")
    assert one(first, "ConfigMap", f"{FULL}-placement-map") != one(
        second, "ConfigMap", f"{FULL}-placement-map")
    for kind_name in ("StatefulSet", "Deployment"):
        assert one(first, kind_name) == one(second, kind_name), kind_name


def _render_error(*args: str) -> str:
    result = helm("template", RELEASE, str(CHART), "--namespace", NS, *POSTGRES, *args)
    assert result.returncode != 0, "rendered"
    return result.stderr


def test_registry_renew_must_be_below_the_ttl():
    assert ("fleet.registryRenewMs (5000) must be below fleet.registryTtlMs (5000)"
            in _render_error("--set", "fleet.registryTtlMs=5000", "--set", "fleet.registryRenewMs=5000"))
    template(*POSTGRES, "--set", "fleet.registryTtlMs=5000", "--set", "fleet.registryRenewMs=4999")


def test_unknown_membership_is_refused():
    assert ('fleet.membership must be one of the following: "registry", "static"'
            in _render_error("--set", "fleet.membership=gossip"))


@pytest.mark.parametrize("text, message", [
    (f"orders {T}-0, {T}-1", "line 1: expected `database = node, node`"),
    (f"# c\nor ders = {T}-0, {T}-1", 'line 2: invalid database name "or ders"'),
    (f"orders = {T}-0, {T}-3", f'line 1: "orders" names "{T}-3", which is not a transactor pod'),
    (f"orders = {T}-0", 'line 1: "orders" names 1 node(s); placement needs fleet.replicas (2)'),
    (f"orders = {T}-0, {T}-0", f'line 1: node "{T}-0" is listed twice for "orders"'),
    (f"orders = {T}-0,, {T}-1", 'line 1: empty node id in the list for "orders"'),
    (f"orders = {T}-0, {T}-1\n\norders = {T}-1, {T}-2",
     'line 3: database "orders" is already mapped on line 1'),
])
def test_bad_placement_maps_fail_rendering_with_the_line(tmp_path, text, message):
    values = tmp_path / "map-values.yaml"
    values.write_text(yaml.safe_dump({"fleet": {"placementMap": text}}))
    assert f"fleet.placementMap {message}" in _render_error("-f", str(values))


def test_placement_map_follows_transactor_replicas(tmp_path):
    text = f"orders = {T}-3, {T}-0\n"
    values = tmp_path / "map-values.yaml"
    values.write_text(yaml.safe_dump({"fleet": {"placementMap": text}}))
    assert "which is not a transactor pod" in _render_error("-f", str(values))
    docs = template(*POSTGRES, "-f", str(values), "--set", "transactor.replicas=4")
    assert one(docs, "ConfigMap", f"{FULL}-placement-map")["data"]["placement-map"] == text


# --- authentication: stock Corium's flags, identical on both pools --------------------------------

# The binaries' authentication flags (common/src/auth/flags.rs): valued ones, then switches.
AUTH_VALUED = {"--serve-token", "--operator-role", "--oidc-issuer", "--oidc-jwks-file",
               "--oidc-audience"}
AUTH_SWITCHES = {"--require-auth", "--serve-open"}
JWKS_DIR = "/etc/corium-fleet/oidc"
POOLS = ("transactor", "ingress")


def auth_args(c: dict) -> list[tuple[str, ...]]:
    """The container's authentication flags, in order, each with its value."""
    args, found = c.get("args", []), []
    for i, arg in enumerate(args):
        flag = arg.split("=", 1)[0]
        if flag in AUTH_VALUED:
            found.append((flag, arg.split("=", 1)[1] if "=" in arg else args[i + 1]))
        elif flag in AUTH_SWITCHES:
            found.append((flag,))
    return found


def pool_containers(docs: list[dict]) -> dict[str, dict]:
    return {component: container(pool(docs, component), component) for component in POOLS}


def jwks_volumes(docs: list[dict]) -> dict[str, list]:
    return {component: [v for v in pool(docs, component)["spec"]["template"]["spec"]["volumes"]
                        if "configMap" in v and v["name"] not in ("config", "placement-map")]
            for component in POOLS}


TOKEN_SECRET = f"{FULL}-token"
GENERATED = {"secretKeyRef": {"name": TOKEN_SECRET, "key": "token"}}
# The flags that would undo the secure default (common/src/auth/flags.rs and the binaries' dev
# switch): no rendering may pass any of them.
INSECURE_FLAGS = ("--serve-open", "--dev-token-operator", "--serve-token")


def _token_secret(docs: list[dict]) -> dict:
    return one(docs, "Secret", TOKEN_SECRET)


def test_default_auth_is_strict_with_a_generated_token():
    """No auth value set: the chart generates a token Secret and gives it to both pools as
    CORIUM_SERVE_TOKEN, so anonymous callers are refused and the public development token is not
    accepted. (The previous chart rendered no token at all: stock Corium's open default.)"""
    docs = template(*POSTGRES)
    secret = _token_secret(docs)
    assert secret["type"] == "Opaque"
    token = base64.b64decode(secret["data"]["token"]).decode()
    assert re.fullmatch(r"[A-Za-z0-9]{48}", token), "48 random letters and digits"
    assert token != "corium-dev-insecure-token"
    # kept across upgrades (lookup, below) and across an uninstall, marked as the chart's own
    assert secret["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep",
                                                  "corium-fleet.io/token-source": "generated"}
    for component, c in pool_containers(docs).items():
        assert env_of(c)["CORIUM_SERVE_TOKEN"] == {"name": "CORIUM_SERVE_TOKEN",
                                                   "valueFrom": GENERATED}, component
        assert "--require-auth" not in c["args"], component
        assert auth_args(c) == [("--operator-role", "fleet-operator")], component
        assert not [m for m in c["volumeMounts"] if m["mountPath"].startswith(JWKS_DIR)], component
    assert jwks_volumes(docs) == {"transactor": [], "ingress": []}


def test_offline_renders_differ_only_in_the_token_secret():
    """`helm template` cannot look up, so each rendering shows a fresh token, but the pods only
    name the Secret: their templates are the same (certManager, so no generated certificate)."""
    first = template(*POSTGRES, "--set", "tls.mode=certManager")
    second = template(*POSTGRES, "--set", "tls.mode=certManager")
    assert _token_secret(first)["data"] != _token_secret(second)["data"]
    assert [d for d in first if d["kind"] != "Secret"] == [d for d in second if d["kind"] != "Secret"]


def test_the_generated_token_is_kept_across_upgrades(tmp_path):
    """The chart's real `lookup` against the fake API server: an upgrade keeps the token the
    Secret holds (the generated one, or one an operator put there), and only an empty or missing
    value is generated anew."""
    installed = _token_secret(template(*POSTGRES))["data"]["token"]
    by_hand = base64.b64encode(b"rotated-by-hand-0123456789").decode()
    with FakeKubeAPI() as api:
        api.secrets[(NS, TOKEN_SECRET)] = {"data": {"token": installed}}
        assert _token_secret(_render_against(api, tmp_path))["data"]["token"] == installed
        assert f"/api/v1/namespaces/{NS}/secrets/{TOKEN_SECRET}" in api.requests
        api.secrets[(NS, TOKEN_SECRET)] = {"data": {"token": by_hand}}
        assert _token_secret(_render_against(api, tmp_path))["data"]["token"] == by_hand
        api.secrets[(NS, TOKEN_SECRET)] = {"data": {"token": ""}}
        fresh = _token_secret(_render_against(api, tmp_path))["data"]["token"]
    assert re.fullmatch(r"[A-Za-z0-9]{48}", base64.b64decode(fresh).decode())


AUTH_MODES = {
    "default": (),
    "requireAuth": ("--set", "auth.requireAuth=true"),
    "oidc": ("--set", "auth.oidc.issuer=https://idp.example.com", "--set",
             "auth.oidc.jwksConfigMap=idp-jwks"),
    "requireAuth+oidc": ("--set", "auth.requireAuth=true", "--set",
                         "auth.oidc.issuer=https://idp.example.com", "--set",
                         "auth.oidc.jwksConfigMap=idp-jwks"),
}


@pytest.mark.parametrize("existing", [False, True], ids=["generated", "existingSecret"])
@pytest.mark.parametrize("mode", sorted(AUTH_MODES))
def test_every_auth_mode_is_strict_behind_a_token_secret(mode, existing):
    """No value combination renders a fleet that admits anonymous callers or accepts the public
    development token: --require-auth and OIDC with no Secret of the user's get the generated
    token (the previous chart left them on the development token), and nothing passes
    --serve-open, --dev-token-operator or the token as an argument."""
    secret = ("--set", "auth.existingSecret=mine") if existing else ()
    docs = template(*POSTGRES, *AUTH_MODES[mode], *secret)
    expected = {"secretKeyRef": {"name": "mine", "key": "token"}} if existing else GENERATED
    for component, c in pool_containers(docs).items():
        assert env_of(c)["CORIUM_SERVE_TOKEN"]["valueFrom"] == expected, component
        assert not [a for a in c["args"] if a.split("=", 1)[0] in INSECURE_FLAGS], component
        assert ("--operator-role", "fleet-operator") in auth_args(c), component
    assert (TOKEN_SECRET in {s["metadata"]["name"] for s in kind(docs, "Secret")}) != existing


@pytest.mark.parametrize("key_args, key", [((), "token"),
                                           (("--set", "auth.existingSecretKey=bearer"), "bearer")])
def test_existing_secret_sets_the_serve_token_on_both_pools(key_args, key):
    docs = template(*POSTGRES, "--set", "auth.existingSecret=s", *key_args)
    for component, c in pool_containers(docs).items():
        assert env_of(c)["CORIUM_SERVE_TOKEN"] == {
            "name": "CORIUM_SERVE_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": "s", "key": key}}}, component
        # from the Secret only: never as an argument (visible in the pod spec and `ps`)
        assert not [f for f in auth_args(c) if f[0] == "--serve-token"], component
        assert "--require-auth" not in c["args"], component
    # the Secret is the user's: the chart neither creates nor reads it, nor generates one
    assert not {"s", TOKEN_SECRET} & {d["metadata"]["name"] for d in kind(docs, "Secret")}


def test_require_auth_on_both_pools():
    on = pool_containers(template(*POSTGRES, "--set", "auth.requireAuth=true"))
    off = pool_containers(template(*POSTGRES, "--set", "auth.requireAuth=false"))
    for component in POOLS:
        assert on[component]["args"].count("--require-auth") == 1, component
        assert "--require-auth" not in off[component]["args"], component
        # never the development token: the generated one is what is required
        assert env_of(on[component])["CORIUM_SERVE_TOKEN"]["valueFrom"] == GENERATED, component


def test_operator_role_defaults_to_fleet_operator():
    """A fleet-operator role of its own, separate from Corium's data-admin role `admin` (the
    binaries' default too)."""
    assert yaml.safe_load((CHART / "values.yaml").read_text())["auth"]["operatorRole"] == "fleet-operator"
    for component, c in pool_containers(template(*POSTGRES)).items():
        assert [f for f in auth_args(c) if f[0] == "--operator-role"] == [
            ("--operator-role", "fleet-operator")], component


def test_operator_role_on_both_pools():
    for role in ("admin", "fleet-operator", "sre"):
        docs = template(*POSTGRES, "--set", f"auth.operatorRole={role}")
        for component, c in pool_containers(docs).items():
            assert [f for f in auth_args(c) if f[0] == "--operator-role"] == [
                ("--operator-role", role)], (component, role)


def test_oidc_on_both_pools():
    docs = template(*POSTGRES, "--set", "auth.oidc.issuer=https://idp.example.com/realm",
                    "--set", "auth.oidc.jwksConfigMap=idp-jwks",
                    "--set", "auth.oidc.jwksConfigMapKey=keys.json",
                    "--set", "auth.oidc.audiences={corium,ops}")
    for component, c in pool_containers(docs).items():
        oidc = [f for f in auth_args(c) if f[0].startswith("--oidc-")]
        assert oidc == [("--oidc-issuer", "https://idp.example.com/realm"),
                        ("--oidc-jwks-file", f"{JWKS_DIR}/keys.json"),
                        ("--oidc-audience", "corium"), ("--oidc-audience", "ops")], component
        mounts = [m for m in c["volumeMounts"] if m["mountPath"] == JWKS_DIR]
        assert len(mounts) == 1 and mounts[0]["readOnly"] is True, component
        volume = next(v for v in pool(docs, component)["spec"]["template"]["spec"]["volumes"]
                      if v["name"] == mounts[0]["name"])
        assert volume["configMap"]["name"] == "idp-jwks", component
        assert volume["configMap"]["items"] == [{"key": "keys.json", "path": "keys.json"}]
        # OIDC alone does not leave the static token at the development token
        assert env_of(c)["CORIUM_SERVE_TOKEN"]["valueFrom"] == GENERATED, component


@pytest.mark.parametrize("args, message", [
    (("--set", "auth.oidc.issuer=https://idp.example.com"),
     "auth.oidc.issuer needs auth.oidc.jwksConfigMap"),
    (("--set", "auth.oidc.jwksConfigMap=idp-jwks"),
     "auth.oidc.jwksConfigMap is set without auth.oidc.issuer"),
    (("--set", "auth.oidc.audiences={corium}"),
     "auth.oidc.audiences are set without auth.oidc.issuer"),
])
def test_half_configured_oidc_fails_rendering(args, message):
    assert message in _render_error(*args)


@pytest.mark.parametrize("values_file", CI_FILES, ids=ids(CI_FILES))
def test_auth_follows_the_values_and_is_identical_on_both_pools(values_file):
    docs = render(values_file)
    auth = values_of(values_file)["auth"]
    containers = pool_containers(docs)
    expected = [("--operator-role", auth["operatorRole"])]
    if auth["requireAuth"]:
        expected.append(("--require-auth",))
    if auth["oidc"]["issuer"]:
        expected += [("--oidc-issuer", auth["oidc"]["issuer"]),
                     ("--oidc-jwks-file", f"{JWKS_DIR}/{auth['oidc']['jwksConfigMapKey']}")]
        expected += [("--oidc-audience", a) for a in auth["oidc"]["audiences"]]
    full = values_of(values_file)["fullnameOverride"] or FULL
    token = ({"secretKeyRef": {"name": auth["existingSecret"], "key": auth["existingSecretKey"]}}
             if auth["existingSecret"] else
             {"secretKeyRef": {"name": f"{full}-token", "key": "token"}})
    for component, c in containers.items():
        assert auth_args(c) == expected, component
        assert env_of(c).get("CORIUM_SERVE_TOKEN", {}).get("valueFrom") == token, component
        assert not [a for a in c["args"] if a.split("=", 1)[0] in INSECURE_FLAGS], component
    volumes = jwks_volumes(docs)
    assert volumes["transactor"] == volumes["ingress"]
    assert len(volumes["ingress"]) == int(bool(auth["oidc"]["issuer"]))
    generated = [s for s in kind(docs, "Secret") if s["metadata"]["name"] == f"{full}-token"]
    assert len(generated) == int(not auth["existingSecret"])


def test_a_ci_values_set_exercises_auth():
    """Keeps the CI matrix (Kubernetes schemas, lint) covering the auth rendering: a Secret of the
    user's with OIDC, and the strict modes with the generated token."""
    sets = [values_of(f)["auth"] for f in CI_FILES]
    assert any(a["existingSecret"] and a["oidc"]["issuer"] for a in sets)
    assert any(not a["existingSecret"] and a["requireAuth"] and a["oidc"]["issuer"]
               and a["operatorRole"] == "fleet-operator" for a in sets)


@pytest.mark.parametrize("pool_name", POOLS)
@pytest.mark.parametrize("arg", ["--serve-open", "--dev-token-operator", "--serve-token",
                                 "--serve-token=corium-dev-insecure-token"])
def test_extra_args_cannot_undo_the_secure_default(pool_name, arg):
    flag = arg.split("=", 1)[0]
    extra = [arg] if "=" in arg else [arg, "x"] if flag == "--serve-token" else [arg]
    values = ("--set-json", f"{pool_name}.extraArgs={json.dumps(extra)}")
    assert f"{pool_name}.extraArgs: {flag} is refused" in _render_error(*values)


@pytest.mark.parametrize("pool_name", POOLS)
def test_extra_env_cannot_replace_the_token(pool_name):
    values = ("--set-json", f'{pool_name}.extraEnv=[{{"name":"CORIUM_SERVE_TOKEN","value":"corium-dev-insecure-token"}}]')
    assert f'{pool_name}.extraEnv: name "CORIUM_SERVE_TOKEN" is already used' in _render_error(*values)


# --- policy authorization: stock Corium's --authz-db, transactors only ----------------------------

BREAK_GLASS = "--authz-break-glass-role"


def _flag_values(c: dict, flag: str) -> list[str]:
    args = c.get("args", [])
    return [args[i + 1] for i, arg in enumerate(args) if arg == flag]


def test_no_policy_authorization_by_default():
    for component, c in pool_containers(template(*POSTGRES)).items():
        assert "CORIUM_AUTHZ_DB" not in env_of(c), component
        assert not [a for a in c["args"] if a.startswith("--authz")], component


def test_authz_db_is_set_on_the_transactors_only():
    containers = pool_containers(template(*POSTGRES, "--set", "auth.authzDb=fleet-policy"))
    assert env_of(containers["transactor"])["CORIUM_AUTHZ_DB"] == {
        "name": "CORIUM_AUTHZ_DB", "value": "fleet-policy"}
    # the ingress forwards and authorizes nothing (and has no such flag)
    assert "CORIUM_AUTHZ_DB" not in env_of(containers["ingress"])
    for component, c in containers.items():
        # through the flag's environment variable only, and no break-glass role unless given
        assert not [a for a in c["args"] if a.startswith("--authz")], component


def test_break_glass_roles_render_one_flag_each_on_the_transactors():
    containers = pool_containers(template(*POSTGRES, "--set", "auth.authzDb=fleet-policy",
                                          "--set", "auth.authzBreakGlassRoles={sre,on-call}"))
    assert _flag_values(containers["transactor"], BREAK_GLASS) == ["sre", "on-call"]
    assert not [a for a in containers["ingress"]["args"] if a.startswith("--authz")]


def test_break_glass_roles_without_authz_db_fail_rendering():
    assert "auth.authzBreakGlassRoles needs auth.authzDb" in _render_error(
        "--set", "auth.authzBreakGlassRoles={sre}")


@pytest.mark.parametrize("name", ["has space", "a/b", "x" * 129])
def test_authz_db_must_be_a_database_name(name):
    assert "auth.authzDb: Does not match pattern" in _render_error("--set", f"auth.authzDb={name}")


@pytest.mark.parametrize("values_file", CI_FILES, ids=ids(CI_FILES))
def test_authz_follows_the_values(values_file):
    containers = pool_containers(render(values_file))
    auth = values_of(values_file)["auth"]
    transactor = containers["transactor"]
    assert env_of(transactor).get("CORIUM_AUTHZ_DB", {}).get("value") == (auth["authzDb"] or None)
    assert _flag_values(transactor, BREAK_GLASS) == auth["authzBreakGlassRoles"]
    assert "CORIUM_AUTHZ_DB" not in env_of(containers["ingress"])
    assert not [a for a in containers["ingress"]["args"] if a.startswith("--authz")]


def test_a_ci_values_set_exercises_authz_and_per_pod_certificates():
    """Keeps the CI matrix (Kubernetes schemas, lint) covering these renderings."""
    sets = [values_of(f) for f in CI_FILES]
    assert any(v["auth"]["authzDb"] and v["auth"]["authzBreakGlassRoles"] for v in sets)
    assert any(v["tls"]["mode"] == "certManagerCsi" for v in sets)


# --- operator knobs: the request size both pools share, the transactors' caps -------------------

# value path -> (node.toml key, the pool whose node.toml has it, a value in range). The node.toml
# key is the flag's name in snake_case: the binaries read the --config file with the same names as
# their flags (a flag in extraArgs still wins over it).
TRANSACTOR_KNOBS = {
    "transactor.limits.maxSubscriptionsPerPrincipal": ("max_subscriptions_per_principal", 100),
    "transactor.capacity.maxReplicas": ("max_replicas", 8),
    "transactor.capacity.replicaIdleMs": ("replica_idle_ms", 60000),
    "transactor.capacity.warmStandbyMib": ("warm_standby_mib", 128),
}
KNOB_FLAGS = ("--max-request-bytes", "--max-subscriptions-per-principal", "--max-replicas",
              "--replica-idle-ms", "--warm-standby-mib")


def _pool_config(docs: list[dict], component: str) -> dict:
    """The node.toml the pool's container reads (its --config, from the `config` volume)."""
    workload = pool(docs, component)
    c = container(workload, component)
    assert arg_value(c, "--config") == "/etc/corium-fleet/config/node.toml"
    mount = next(m for m in c["volumeMounts"] if m["name"] == "config")
    assert mount["mountPath"] == "/etc/corium-fleet/config"
    return toml_of(docs, config_map_of(workload))


def test_operator_knobs_are_not_rendered_unless_set():
    # unset: each binary's own default (4 MiB requests in both; 5000 subscriptions a principal;
    # 64 replicas, evicted after 5 minutes idle; 64 MiB of warm standbys)
    docs = template(*POSTGRES)
    keys = {"max_request_bytes"} | {key for key, _ in TRANSACTOR_KNOBS.values()}
    for component in ("transactor", "ingress"):
        assert not keys & set(_pool_config(docs, component)), component
        args = container(pool(docs, component), component)["args"]
        assert not set(KNOB_FLAGS) & set(args), component


@pytest.mark.parametrize("size", [1024, 8388608, 268435456])
def test_max_request_bytes_is_one_value_for_both_pools(size):
    docs = template(*POSTGRES, "--set", f"fleet.maxRequestBytes={size}")
    configs = {c: _pool_config(docs, c) for c in ("transactor", "ingress")}
    assert configs["transactor"]["max_request_bytes"] == size
    assert configs["ingress"]["max_request_bytes"] == size
    for component in configs:
        # in node.toml only, so `extraArgs: [--max-request-bytes, N]` can still override it
        assert "--max-request-bytes" not in container(pool(docs, component), component)["args"]


@pytest.mark.parametrize("path", sorted(TRANSACTOR_KNOBS), ids=lambda p: p.rsplit(".", 1)[1])
def test_transactor_knobs_reach_the_transactors_only(path):
    key, value = TRANSACTOR_KNOBS[path]
    docs = template(*POSTGRES, "--set", f"{path}={value}")
    assert _pool_config(docs, "transactor")[key] == value
    assert key not in _pool_config(docs, "ingress")
    # the other knobs stay the binary's defaults
    others = {k for p, (k, _) in TRANSACTOR_KNOBS.items() if p != path} | {"max_request_bytes"}
    assert not others & set(_pool_config(docs, "transactor"))


def test_zero_turns_replicas_and_warm_standbys_off_rather_than_meaning_unset():
    docs = template(*POSTGRES, "--set", "transactor.capacity.maxReplicas=0",
                    "--set", "transactor.capacity.warmStandbyMib=0")
    config = _pool_config(docs, "transactor")
    assert config["max_replicas"] == 0 and config["warm_standby_mib"] == 0


@pytest.mark.parametrize("path, value, message", [
    ("fleet.maxRequestBytes", 1023, "fleet.maxRequestBytes: Must be greater than or equal to 1024"),
    # 268435456, as helm's schema validator prints it
    ("fleet.maxRequestBytes", 268435457,
     "fleet.maxRequestBytes: Must be less than or equal to 2.68435456e+08"),
    ("transactor.limits.maxSubscriptionsPerPrincipal", -1,
     "transactor.limits.maxSubscriptionsPerPrincipal: Must be greater than or equal to 0"),
    ("transactor.capacity.maxReplicas", -1,
     "transactor.capacity.maxReplicas: Must be greater than or equal to 0"),
    ("transactor.capacity.replicaIdleMs", 0,
     "transactor.capacity.replicaIdleMs: Must be greater than or equal to 1"),
    ("transactor.capacity.warmStandbyMib", -1,
     "transactor.capacity.warmStandbyMib: Must be greater than or equal to 0"),
], ids=["request-bytes-low", "request-bytes-high", "subscriptions-per-principal", "max-replicas",
        "replica-idle", "warm-standby"])
def test_operator_knobs_outside_the_binaries_ranges_are_refused(path, value, message):
    result = helm("template", RELEASE, str(CHART), "--namespace", NS, *POSTGRES,
                  "--set", f"{path}={value}")
    assert result.returncode != 0, f"{path}={value} rendered"
    assert message in result.stderr, result.stderr


def test_a_ci_values_set_exercises_the_operator_knobs():
    """Keeps the CI matrix (Kubernetes schemas, lint) covering these renderings."""
    def get(values, path):
        for part in path.split("."):
            values = (values or {}).get(part)
        return values
    sets = [values_of(f) for f in CI_FILES]
    assert any(all(get(v, p) is not None for p in ["fleet.maxRequestBytes", *TRANSACTOR_KNOBS])
               for v in sets)


# --- bad values ----------------------------------------------------------------------------------

def _expected(path: Path) -> list[str]:
    messages = [line.removeprefix("# expect:").strip()
                for line in path.read_text().splitlines() if line.startswith("# expect:")]
    assert messages, f"{path.name} has no '# expect:' line"
    return messages


@pytest.mark.parametrize("bad_file", BAD_FILES, ids=ids(BAD_FILES))
def test_bad_values_fail_with_the_promised_message(bad_file):
    result = helm("template", RELEASE, str(CHART), "--namespace", NS, "-f", str(bad_file))
    assert result.returncode != 0, f"{bad_file.name} rendered"
    for message in _expected(bad_file):
        assert message in result.stderr, result.stderr
    if SCHEMA_ERROR in result.stderr:
        # schema failures fail `helm lint --strict` too (template `fail`s only fail rendering)
        lint = helm("lint", "--strict", str(CHART), "-f", str(bad_file))
        assert lint.returncode != 0
        for message in _expected(bad_file):
            assert message in lint.stdout + lint.stderr


def test_no_values_means_no_store_rather_than_a_filesystem_default():
    result = helm("template", RELEASE, str(CHART))
    assert result.returncode != 0
    assert 'storage.type must be one of the following: "postgres", "s3"' in result.stderr


# --- NOTES and README ----------------------------------------------------------------------------

def _notes(tmp_path: Path, *args: str) -> str:
    # helm template does not render NOTES.txt, and helm install needs a cluster: render it via
    # `tpl` in a scratch copy of the chart.
    chart = tmp_path / "corium-fleet"
    if not chart.exists():
        shutil.copytree(CHART, chart)
        (chart / "notes.txt").write_text((CHART / "templates" / "NOTES.txt").read_text())
        (chart / "templates" / "zz-notes.yaml").write_text(
            'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n  notes: |\n'
            '{{ tpl (.Files.Get "notes.txt") . | indent 4 }}\n')
    docs = template(*POSTGRES, *args, chart=chart)
    return one(docs, "ConfigMap", "notes")["data"]["notes"]


def test_notes_say_how_clients_authenticate(tmp_path):
    default = _notes(tmp_path)
    # always strict: how to read the generated token and use it with the CLI
    assert (f"presents the token in\nsecret {FULL}-token (key token, generated at install and kept "
            "across upgrades).") in default
    assert ("export CORIUM_TOKEN=$(kubectl get secret --namespace ci ci-release-corium-fleet-token "
            "-o jsonpath='{.data.token}' | base64 -d)") in default
    assert "corium-fleet status --endpoint http://127.0.0.1:4334" in default
    assert "Anonymous callers\nand the public development token are refused" in default
    assert "anonymous callers are admitted" not in default
    assert "corium-dev-insecure-token" not in default
    assert 'needs role "fleet-operator": the token holds it' in default
    strict = _notes(tmp_path, "--set", "auth.existingSecret=fleet-token",
                    "--set", "auth.existingSecretKey=api.token")
    assert ("export CORIUM_TOKEN=$(kubectl get secret --namespace ci fleet-token "
            "-o jsonpath='{.data.api\\.token}' | base64 -d)") in strict
    assert "generated at install" not in strict
    role = _notes(tmp_path, "--set", "auth.operatorRole=sre", "--set",
                  "auth.oidc.issuer=https://idp.example.com", "--set",
                  "auth.oidc.jwksConfigMap=idp-jwks")
    assert 'needs role "sre"' in role and 'a JWT needs "sre" among its roles' in role
    assert "(key token, generated at install and kept across upgrades)\nor a JWT of https://idp.example.com." in role


def test_notes_give_the_client_address_and_the_status_command(tmp_path):
    notes = _notes(tmp_path)
    assert f"http://{FULL}.{NS}.svc:4334" in notes
    # client-facing TLS by default, and how clients get its CA
    assert f"https://{FULL}.{NS}.svc:4443" in notes
    assert (f"kubectl get secret --namespace {NS} {FULL}-public-tls "
            "-o jsonpath='{.data.ca\\.crt}' | base64 -d > corium-fleet-ca.crt") in notes
    assert "corium-fleet status --endpoint http://127.0.0.1:4334" in notes
    assert f"kubectl port-forward --namespace {NS} pod/{FULL}-transactor-0 7001:7001" in notes
    # every chart-issued transactor certificate names the pod, not localhost
    for args in ((), ("--set", "tls.mode=certManager"), CSI):
        per_pod = _notes(tmp_path, *args)
        assert (f"--ca ca.crt --cert tls.crt --key tls.key --tls-name {FULL}-transactor-0"
                in per_pod), args
        assert "--tls-name localhost" not in per_pod
    shared = _notes(tmp_path, *EXISTING_TLS)
    assert ("corium-fleet status --endpoint https://127.0.0.1:7001 --ca ca.crt --cert tls.crt "
            "--key tls.key --tls-name localhost") in shared
    assert f"https://{FULL}.{NS}.svc:4443" not in shared and "Client-facing TLS is off" in shared


# Objects documented as one row (their fields are Kubernetes' own or listed in the description).
OBJECT_KEYS = {"resources", "podSecurityContext", "securityContext", "livenessProbe",
               "readinessProbe", "startupProbe", "labels"}


def _leaves(node, prefix=""):
    for key, value in node.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and key not in OBJECT_KEYS:
            yield from _leaves(value, path + ".")
        else:
            yield path


def test_readme_documents_every_value():
    readme = (CHART / "README.md").read_text()
    rows = set(re.findall(r"^\| `([^`]+)` \|", readme, flags=re.M))
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    missing = [p for p in _leaves(values) if p not in rows]
    assert not missing, f"README.md has no row for: {missing}"
    schema_keys = set()

    def walk(schema, prefix=""):
        for key, sub in schema.get("properties", {}).items():
            path = f"{prefix}{key}"
            schema_keys.add(path)
            if key not in OBJECT_KEYS:
                walk(sub, path + ".")
    walk(yaml.safe_load((CHART / "values.schema.json").read_text()))
    undocumented = sorted(k for k in schema_keys if k not in rows and k != "global"
                          and not any(r.startswith(k + ".") for r in rows))
    assert not undocumented, f"in the schema but not in README.md: {undocumented}"


# --- backups -------------------------------------------------------------------------------------

BACKUP = [*POSTGRES, "--set", "storage.readOnly.postgresUrlSecret=corium-read-only",
          "--set", "backup.enabled=true", "--set", "backup.persistentVolumeClaim=corium-backups"]


def test_no_backup_cronjob_unless_enabled():
    assert not kind(template(*POSTGRES), "CronJob")


def test_the_backup_cronjob_backs_up_through_the_client_service_with_the_fleets_token():
    docs = template(*BACKUP, "--set", "backup.databases={orders,ledger}")
    job = one(docs, "CronJob", f"{FULL}-backup")["spec"]
    assert job["concurrencyPolicy"] == "Forbid", "two runs would append to the same archives"
    spec = job["jobTemplate"]["spec"]
    assert spec["activeDeadlineSeconds"] >= 3600
    pod = spec["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    (c,) = pod["containers"]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    command = c["command"]
    assert command[:4] == ["/usr/local/bin/corium-fleet", "backup", "orders", "ledger"]
    assert command[command.index("--dir") + 1] == "/backups"
    assert command[command.index("--endpoint") + 1] == f"http://{FULL}.{NS}.svc:4334"
    assert command[command.index("--timeout-secs") + 1] == "3600"
    token = env_of(c)["CORIUM_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert token == {"name": f"{FULL}-token", "key": "token"}
    # The job holds no storage credentials: the fleet describes read-only access.
    assert not {"PG_PASSWORD", "AWS_ACCESS_KEY_ID", "CORIUM_FLEET_STORAGE"} & set(env_of(c))
    mount = next(m for m in c["volumeMounts"] if m["mountPath"] == "/backups")
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["persistentVolumeClaim"]["claimName"] == "corium-backups"


def test_read_only_access_reaches_the_transactors_only():
    docs = template(*BACKUP)
    transactor, ingress = pool(docs, "transactor"), pool(docs, "ingress")
    ref = env_of(container(transactor, "transactor"))["CORIUM_POSTGRES_READ_ONLY_URL"]
    assert ref["valueFrom"]["secretKeyRef"] == {"name": "corium-read-only", "key": "url"}
    assert "CORIUM_POSTGRES_READ_ONLY_URL" not in env_of(container(ingress, "ingress"))
    s3 = template("--set", "storage.type=s3", "--set", "storage.s3.bucket=bucket",
                  "--set", "storage.s3.accessKeyId=a", "--set", "storage.s3.secretAccessKey=b",
                  "--set", "storage.readOnly.s3Secret=s3-read-only")
    env = env_of(container(pool(s3, "transactor"), "transactor"))
    assert env["CORIUM_S3_READ_ONLY_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"]["name"] == "s3-read-only"
    assert "CORIUM_S3_READ_ONLY_SECRET_ACCESS_KEY" in env
    assert "CORIUM_POSTGRES_READ_ONLY_URL" not in env


def test_a_restricted_client_port_still_admits_the_backup_pods():
    docs = template(*BACKUP, "--set-json",
                    'networkPolicy.clientFrom=[{"namespaceSelector":{"matchLabels":{"team":"apps"}}}]')
    ingress = pool(docs, "ingress")
    policy = next(p for p in kind(docs, "NetworkPolicy")
                  if selects(p["spec"]["podSelector"]["matchLabels"], pod_labels(ingress)))
    client_rule = next(r for r in policy["spec"]["ingress"] if _covers(r, 4334, "grpc"))
    job_labels = one(docs, "CronJob")["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
    assert any(selects(peer.get("podSelector", {}).get("matchLabels", {"x": "never"}), job_labels)
               for peer in client_rule["from"]), client_rule


# --- storage keys (encrypted databases): stock Corium's --storage-key, transactors only -----------

KEYS_DIR = "/etc/corium-fleet/storage-keys"
TWO_KEYS = ("--set", "transactor.storageKeys[0].id=prod-2026",
            "--set", "transactor.storageKeys[0].secretName=corium-kek-2026",
            "--set", "transactor.storageKeys[0].secretKey=key",
            "--set", "transactor.storageKeys[1].id=prod-2025",
            "--set", "transactor.storageKeys[1].secretName=corium-kek-2025",
            "--set", "transactor.storageKeys[1].secretKey=kek.hex")


def _pod_spec(docs: list[dict], component: str) -> dict:
    return pool(docs, component)["spec"]["template"]["spec"]


def test_storage_keys_are_file_ids_of_read_only_mounts_on_the_transactors():
    docs = template(*POSTGRES, *TWO_KEYS)
    containers = pool_containers(docs)
    # one flag per key, in the order given; the key id is the file's path, made of the id alone
    assert _flag_values(containers["transactor"], "--storage-key") == [
        f"file:{KEYS_DIR}/prod-2026/key", f"file:{KEYS_DIR}/prod-2025/key"]
    assert "CORIUM_STORAGE_KEY" not in env_of(containers["transactor"])
    mounts = [m for m in containers["transactor"]["volumeMounts"] if m["name"] == "storage-keys"]
    assert mounts == [{"name": "storage-keys", "mountPath": KEYS_DIR, "readOnly": True}]
    volume = next(v for v in _pod_spec(docs, "transactor")["volumes"] if v["name"] == "storage-keys")
    assert volume["projected"]["defaultMode"] == 0o400
    # only the named key of each Secret, at <id>/key
    assert volume["projected"]["sources"] == [
        {"secret": {"name": "corium-kek-2026", "items": [{"key": "key", "path": "prod-2026/key"}]}},
        {"secret": {"name": "corium-kek-2025", "items": [{"key": "kek.hex", "path": "prod-2025/key"}]}}]
    # the ingress never reads a database: no key, no flag, no volume
    assert "--storage-key" not in containers["ingress"]["args"]
    assert all(v["name"] != "storage-keys" for v in _pod_spec(docs, "ingress")["volumes"])
    assert all(m["name"] != "storage-keys" for m in containers["ingress"]["volumeMounts"])


def test_no_storage_keys_means_no_flag_and_no_volume():
    docs = template(*POSTGRES)
    for component, c in pool_containers(docs).items():
        assert not [a for a in c["args"] if a.startswith("--storage-key")], component
        assert "CORIUM_STORAGE_KEY" not in env_of(c), component
        assert all(m["name"] != "storage-keys" for m in c["volumeMounts"]), component
        assert all(v["name"] != "storage-keys" for v in _pod_spec(docs, component)["volumes"])


def test_a_storage_keys_id_is_what_its_key_id_depends_on():
    """A database records the key id (`file:<path>`) it was created under and every open looks the
    key up by it: moving the key to another Secret or key keeps it, only the id changes it."""
    def key_ids(*args: str) -> list[str]:
        return _flag_values(pool_containers(template(*POSTGRES, *TWO_KEYS, *args))["transactor"],
                            "--storage-key")
    moved = key_ids("--set", "transactor.storageKeys[0].secretName=vault-sync",
                    "--set", "transactor.storageKeys[0].secretKey=storage.key")
    assert moved == key_ids()
    renamed = key_ids("--set", "transactor.storageKeys[0].id=prod-2026b")
    assert renamed[0] == f"file:{KEYS_DIR}/prod-2026b/key"


def test_storage_keys_cannot_share_an_id():
    error = _render_error(*TWO_KEYS, "--set", "transactor.storageKeys[1].id=prod-2026")
    assert ('transactor.storageKeys.1: id "prod-2026" is already used by '
            "transactor.storageKeys.0") in error
    assert f"file:{KEYS_DIR}/prod-2026/key" in error


def test_corium_storage_key_in_extra_env_is_refused_only_beside_storage_keys():
    env = ("--set", "transactor.extraEnv[0].name=CORIUM_STORAGE_KEY",
           "--set", "transactor.extraEnv[0].value=env:OTHER_KEY")
    assert "CORIUM_STORAGE_KEY is ignored while transactor.storageKeys is set" in _render_error(
        *TWO_KEYS, *env)
    # without storageKeys it is the binary's own variable, an escape hatch like any other
    transactor = pool_containers(template(*POSTGRES, *env))["transactor"]
    assert env_of(transactor)["CORIUM_STORAGE_KEY"]["value"] == "env:OTHER_KEY"


def test_a_ci_values_set_exercises_storage_keys():
    """Keeps the projected key volume under the CI matrix (Kubernetes schemas, lint)."""
    assert any(len(values_of(f)["transactor"]["storageKeys"]) >= 2 for f in CI_FILES)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _cluster_render(api: FakeKubeAPI, tmp_path: Path) -> subprocess.CompletedProcess:
    kubeconfig = api.kubeconfig(tmp_path, NS)
    return helm("template", RELEASE, str(CHART), "--namespace", NS, *POSTGRES, *TWO_KEYS,
                "--dry-run=server", "--kubeconfig", str(kubeconfig))


def test_storage_keys_secrets_are_checked_when_the_cluster_can_be_read(tmp_path):
    """Exercises the chart's real `lookup` (fake_kube_api.py). Plain `helm template` sees no
    Secret, so it renders; against a cluster (kube-root-ca.crt is there) an entry whose Secret or
    key is missing, or holds no 256-bit key, is refused naming the id, the key id and the Secret."""
    assert _flag_values(pool_containers(template(*POSTGRES, *TWO_KEYS))["transactor"],
                        "--storage-key")
    with FakeKubeAPI() as api:
        # a server that is not a cluster Helm can read (no kube-root-ca.crt): no check
        assert _cluster_render(api, tmp_path).returncode == 0
        api.configmaps[(NS, "kube-root-ca.crt")] = {"data": {"ca.crt": "(the cluster's CA)"}}
        result = _cluster_render(api, tmp_path)
        assert result.returncode != 0
        assert (f'transactor.storageKeys.0 (id "prod-2026", key id file:{KEYS_DIR}/prod-2026/key): '
                f'Secret "corium-kek-2026" does not exist in namespace "{NS}"') in result.stderr
        # 32 raw bytes
        api.secrets[(NS, "corium-kek-2026")] = {"data": {"key": _b64(os.urandom(32))}}
        api.secrets[(NS, "corium-kek-2025")] = {"data": {"other": _b64(b"x")}}
        result = _cluster_render(api, tmp_path)
        assert ('transactor.storageKeys.1 (id "prod-2025", key id '
                f'file:{KEYS_DIR}/prod-2025/key): Secret "corium-kek-2025" has no key "kek.hex" '
                "(it has: other)") in result.stderr
        # 40 hex digits, 33 raw bytes, nothing, 32 hex digits and a newline, 66 hex digits
        for material in (os.urandom(20).hex().encode(), os.urandom(33), b"",
                         os.urandom(16).hex().encode() + b"\n",
                         os.urandom(32).hex().encode() + b"00"):
            api.secrets[(NS, "corium-kek-2025")] = {"data": {"kek.hex": _b64(material)}}
            result = _cluster_render(api, tmp_path)
            assert (f'Secret "corium-kek-2025" key "kek.hex" holds {len(material)} bytes, neither '
                    "32 raw bytes nor 64 hex digits") in result.stderr, material
        # 64 hex digits, with the newline `openssl rand -hex 32 >file` leaves
        api.secrets[(NS, "corium-kek-2025")] = {"data": {"kek.hex": _b64(
            os.urandom(32).hex().upper().encode() + b"\n")}}
        result = _cluster_render(api, tmp_path)
        assert result.returncode == 0, result.stderr
        assert f"/api/v1/namespaces/{NS}/secrets/corium-kek-2025" in api.requests
    # and the key material never reaches the rendered manifests
    material = api.secrets[(NS, "corium-kek-2025")]["data"]["kek.hex"]
    assert material not in result.stdout
    assert base64.b64decode(material).decode().strip() not in result.stdout


# --- span export over TLS ------------------------------------------------------------------------

def test_an_https_collector_gets_the_ca_and_the_client_certificate_in_both_pools():
    docs = template(*POSTGRES, "--set", "tracing.otlpEndpoint=https://collector.obs.svc:4317",
                    "--set", "tracing.tls.secret=otel-client-tls",
                    "--set", "tracing.tls.clientCertificate=true")
    for component, name in (("transactor", "transactor"), ("ingress", "ingress")):
        workload = pool(docs, component)
        env = env_of(container(workload, name))
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"]["value"] == "https://collector.obs.svc:4317"
        files = {key: env[key]["value"] for key in ("OTEL_EXPORTER_OTLP_CERTIFICATE",
                                                     "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
                                                     "OTEL_EXPORTER_OTLP_CLIENT_KEY")}
        mount = next(m for m in container(workload, name)["volumeMounts"] if m["name"] == "otlp-tls")
        assert mount["readOnly"] is True
        assert all(path.startswith(mount["mountPath"] + "/") for path in files.values()), files
        volume = next(v for v in workload["spec"]["template"]["spec"]["volumes"]
                      if v["name"] == "otlp-tls")
        assert volume["secret"]["secretName"] == "otel-client-tls"
    # Without the Secret: the system's roots, nothing mounted.
    plain = template(*POSTGRES, "--set", "tracing.otlpEndpoint=https://collector.obs.svc:4317")
    env = env_of(container(pool(plain, "ingress"), "ingress"))
    assert "OTEL_EXPORTER_OTLP_CERTIFICATE" not in env
    assert all(v["name"] != "otlp-tls" for v in pool(plain, "ingress")["spec"]["template"]["spec"]["volumes"])


# --- rollouts ------------------------------------------------------------------------------------

def test_rollouts_wait_between_pods_and_a_partition_holds_pods_back():
    docs = template(*POSTGRES)
    sts = one(docs, "StatefulSet")["spec"]
    assert sts["minReadySeconds"] == 10
    assert sts["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}
    deployment = one(docs, "Deployment")["spec"]
    assert deployment["minReadySeconds"] == 5
    assert deployment["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    canary = one(template(*POSTGRES, "--set", "transactor.updatePartition=2"), "StatefulSet")["spec"]
    assert canary["updateStrategy"]["rollingUpdate"]["partition"] == 2


def test_the_otlp_protocol_reaches_both_pools():
    docs = template(*POSTGRES, "--set", "tracing.otlpEndpoint=http://collector.obs.svc:4318",
                    "--set", "tracing.protocol=http/protobuf")
    for component in ("transactor", "ingress"):
        env = env_of(container(pool(docs, component), component))
        assert env["OTEL_EXPORTER_OTLP_PROTOCOL"]["value"] == "http/protobuf"
