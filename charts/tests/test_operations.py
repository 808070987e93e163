"""Assertions on the chart's operational values: the escape hatches of both pools, service-account
and workload identity, extraObjects, the `helm test` Pod, resource bounds, logging, tracing,
drain deadlines, the PostgreSQL pool size, and the monitoring resources (PrometheusRule, Grafana
dashboard).

Run with test_rendered.py by scripts/chart-test.sh (the bad values files in charts/tests/bad/
cover the refusals; check_monitoring.py runs promtool and compares metric names).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from test_rendered import (CHART, FULL, NS, POSTGRES, ROOT, _notes, arg_value, container, env_of,
                           kind, one, pool, render, template, toml_of, config_map_of)

sys.path.insert(0, str(ROOT / "scripts" / "chart-tools"))
import check_monitoring  # noqa: E402

CI = CHART / "ci"
POOLS = ("transactor", "ingress")
TRANSACTOR_LIMITS = {
    "maxInflightCalls": "max_inflight_calls", "maxQueuedCalls": "max_queued_calls",
    "maxQueueWaitMs": "max_queue_wait_ms", "maxInflightPerDatabase": "max_inflight_per_database",
    "rateLimitPerPrincipal": "rate_limit_per_principal", "maxSubscriptions": "max_subscriptions",
    "maxSubscriptionsPerDatabase": "max_subscriptions_per_database",
    "maxSubscriptionsPerPrincipal": "max_subscriptions_per_principal"}
TRANSACTOR_CAPACITY = {
    "idleEvictAfterMs": "idle_evict_after_ms", "memoryBudgetMib": "memory_budget_mib",
    "hotStandbys": "hot_standbys", "warmStandbyMib": "warm_standby_mib",
    "maxReplicas": "max_replicas", "replicaIdleMs": "replica_idle_ms"}
INGRESS_LIMITS = {
    "maxConcurrentRequests": "max_concurrent_requests",
    "rateLimitPerClient": "rate_limit_per_client", "maxStreamsPerClient": "max_streams_per_client",
    "maxStreamsPerConnection": "max_streams_per_connection",
    "bodyProgressTimeoutMs": "body_progress_timeout_ms",
    "streamStallTimeoutMs": "stream_stall_timeout_ms",
    "maxConnectionIdleMs": "max_connection_idle_ms", "maxConnectionAgeMs": "max_connection_age_ms",
    "adaptiveNodeLimit": "adaptive_node_limit", "retryBudgetRatio": "retry_budget_ratio",
    "retryBudgetMinPerSecond": "retry_budget_min_per_second", "maxConnections": "max_connections",
    "maxConnectionsPerClient": "max_connections_per_client", "prefaceTimeoutMs": "preface_timeout_ms"}


def main(docs, component):
    return container(pool(docs, component), component)


def pod_spec(docs, component):
    return pool(docs, component)["spec"]["template"]["spec"]


def configs(docs):
    return {c: toml_of(docs, config_map_of(pool(docs, c))) for c in POOLS}


def with_values(tmp_path: Path, values: dict, *args: str) -> list[dict]:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return template(*POSTGRES, "-f", str(path), *args)


def render_error(tmp_path: Path, values: dict) -> str:
    from test_rendered import helm, RELEASE
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    result = helm("template", RELEASE, str(CHART), "--namespace", NS, *POSTGRES, "-f", str(path))
    assert result.returncode != 0, "rendered"
    return result.stderr


# --- escape hatches --------------------------------------------------------------------------

def test_escape_hatches_are_empty_by_default():
    docs = template(*POSTGRES)
    for component in POOLS:
        spec = pod_spec(docs, component)
        assert [c["name"] for c in spec["containers"]] == [component]
        assert "envFrom" not in spec["containers"][0]
    assert [c["name"] for c in pod_spec(docs, "transactor")["initContainers"]] == ["zone-lookup"]
    assert "initContainers" not in pod_spec(docs, "ingress")
    assert one(docs, "ServiceAccount")["metadata"].get("annotations") is None


@pytest.mark.parametrize("component", POOLS)
def test_escape_hatches_reach_their_pool_only(tmp_path, component):
    other = "ingress" if component == "transactor" else "transactor"
    hardened = {"securityContext": {"runAsNonRoot": True}, "resources": {"requests": {"cpu": "1m"}}}
    docs = with_values(tmp_path, {component: {
        "extraEnv": [{"name": "EXTRA", "value": "1"},
                     {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
        "extraEnvFrom": [{"configMapRef": {"name": "env-cm"}}, {"secretRef": {"name": "env-secret"}}],
        "extraArgs": ["--owner-cache-ttl-ms", "1000"],
        "extraVolumes": [{"name": "extra", "secret": {"secretName": "extra-secret"}}],
        "extraVolumeMounts": [{"name": "extra", "mountPath": "/etc/extra", "readOnly": True}],
        "sidecars": [{"name": "proxy", "image": "proxy:1", **hardened}],
        "initContainers": [{"name": "prepare", "image": "prepare:1", **hardened}],
        "podLabels": {"example.com/tier": "db"},
        "podAnnotations": {"example.com/note": "hello"},
    }})
    spec = pod_spec(docs, component)
    c = spec["containers"][0]
    assert c["name"] == component
    env = env_of(c)
    assert env["EXTRA"]["value"] == "1"
    assert env["FROM_SECRET"]["valueFrom"]["secretKeyRef"] == {"name": "s", "key": "k"}
    assert list(env)[-2:] == ["EXTRA", "FROM_SECRET"]          # after the chart's own
    assert c["envFrom"] == [{"configMapRef": {"name": "env-cm"}}, {"secretRef": {"name": "env-secret"}}]
    assert c["args"][-2:] == ["--owner-cache-ttl-ms", "1000"]  # after the chart's own
    assert arg_value(c, "--config") == "/etc/corium-fleet/config/node.toml"
    assert {"name": "extra", "mountPath": "/etc/extra", "readOnly": True} in c["volumeMounts"]
    assert {"name": "extra", "secret": {"secretName": "extra-secret"}} in spec["volumes"]
    assert [x["name"] for x in spec["containers"]] == [component, "proxy"]
    inits = [x["name"] for x in spec["initContainers"]]
    assert inits == (["zone-lookup", "prepare"] if component == "transactor" else ["prepare"])
    meta = pool(docs, component)["spec"]["template"]["metadata"]
    assert meta["labels"]["example.com/tier"] == "db"
    assert meta["annotations"]["example.com/note"] == "hello"
    # and nothing of it on the other pool
    other_spec = pod_spec(docs, other)
    assert "EXTRA" not in env_of(other_spec["containers"][0])
    assert "extra" not in {v["name"] for v in other_spec["volumes"]}
    assert len(other_spec["containers"]) == 1


@pytest.mark.parametrize("component, values, message", [
    ("transactor", {"extraEnv": [{"name": "CORIUM_FLEET_STORAGE", "value": "x"}]},
     'transactor.extraEnv: name "CORIUM_FLEET_STORAGE" is already used'),
    ("ingress", {"extraEnv": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]},
     'ingress.extraEnv: name "A" is already used'),
    ("transactor", {"extraVolumes": [{"name": "tls", "emptyDir": {}}]},
     'transactor.extraVolumes: name "tls" is already used'),
    ("ingress", {"extraVolumeMounts": [{"name": "tmp", "mountPath": "/tmp"}]},
     'ingress.extraVolumeMounts: mountPath "/tmp" is already used'),
    ("transactor", {"initContainers": [{"name": "zone-lookup", "image": "x"}]},
     'transactor.initContainers: name "zone-lookup" is already used'),
    ("ingress", {"sidecars": [{"name": "ingress", "image": "x"}]},
     'ingress.sidecars: name "ingress" is already used'),
])
def test_escape_hatches_cannot_shadow_the_chart(tmp_path, component, values, message):
    assert message in render_error(tmp_path, {component: values})


def test_postgres_ca_example_mounts_the_ca_into_both_pools():
    docs = render(CI / "postgres-ca-escape-hatches-values.yaml")
    for component in POOLS:
        spec = pod_spec(docs, component)
        c = spec["containers"][0]
        assert env_of(c)["SSL_CERT_DIR"]["value"] == "/etc/ssl/certs:/etc/corium-fleet/postgres-ca"
        mount = next(m for m in c["volumeMounts"] if m["name"] == "postgres-ca")
        assert mount["mountPath"] == "/etc/corium-fleet/postgres-ca" and mount["readOnly"]
        volume = next(v for v in spec["volumes"] if v["name"] == "postgres-ca")
        assert volume["secret"]["secretName"] == "postgres-ca"
        assert env_of(c)["CORIUM_FLEET_STORAGE"]["value"].endswith("?sslmode=require")


# --- service account and workload identity ----------------------------------------------------

def test_service_account_annotations_labels_and_name():
    docs = render(CI / "postgres-ca-escape-hatches-values.yaml")
    sa = one(docs, "ServiceAccount")
    assert sa["metadata"]["name"] == "corium-fleet"
    assert sa["metadata"]["annotations"] == {
        "iam.gke.io/gcp-service-account": "corium-fleet@example-project.iam.gserviceaccount.com"}
    assert sa["metadata"]["labels"]["team"] == "storage"
    for component in POOLS:
        assert pod_spec(docs, component)["serviceAccountName"] == "corium-fleet"
    binding = one(docs, "ClusterRoleBinding")
    assert binding["subjects"][0]["name"] == "corium-fleet"


def test_an_existing_service_account_is_used_not_created(tmp_path):
    docs = with_values(tmp_path, {"serviceAccount": {"create": False, "name": "platform-sa"}})
    assert not kind(docs, "ServiceAccount")
    for component in POOLS:
        assert pod_spec(docs, component)["serviceAccountName"] == "platform-sa"


def test_s3_workload_identity_renders_no_keys():
    docs = render(CI / "s3-workload-identity-values.yaml")
    assert not kind(docs, "Secret") or all(not s["metadata"]["name"].endswith("-storage")
                                          for s in kind(docs, "Secret"))
    for component in POOLS:
        env = env_of(main(docs, component))
        assert env["CORIUM_FLEET_STORAGE"]["value"] == "s3://corium-fleet-prod/corium-fleet"
        assert env["AWS_REGION"]["value"] == "eu-west-1"
        assert "AWS_ACCESS_KEY_ID" not in env and "AWS_SECRET_ACCESS_KEY" not in env
    sa = one(docs, "ServiceAccount")
    assert sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].startswith("arn:aws:iam::")


# --- extraObjects ------------------------------------------------------------------------------

def test_extra_objects_are_rendered_through_tpl():
    docs = render(CI / "s3-workload-identity-values.yaml")
    headless = one(docs, "Service", f"{FULL}-ingress-pods")
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["metadata"]["namespace"] == NS
    ingress_pods = pool(docs, "ingress")["spec"]["template"]["metadata"]["labels"]
    assert all(ingress_pods[k] == v for k, v in headless["spec"]["selector"].items())
    route = one(docs, "Ingress", FULL)
    annotations = route["metadata"]["annotations"]
    assert annotations["nginx.ingress.kubernetes.io/upstream-hash-by"] == "$http_corium_database_route"
    assert annotations["nginx.ingress.kubernetes.io/backend-protocol"] == "GRPC"
    backend = route["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": FULL, "port": {"name": "grpc"}}
    one(docs, "Service", FULL)  # the client Service it names exists


def test_no_extra_objects_by_default():
    docs = template(*POSTGRES)
    assert not kind(docs, "Ingress")
    assert {s["metadata"]["name"] for s in kind(docs, "Service")} == {
        FULL, f"{FULL}-ingress-admin", f"{FULL}-transactor"}


# --- helm test ---------------------------------------------------------------------------------

def _test_pod(docs):
    pods = [d for d in kind(docs, "Pod") if d["metadata"]["annotations"].get("helm.sh/hook") == "test"]
    assert len(pods) == 1
    return pods[0]


def test_helm_test_pod_runs_the_cli_through_the_client_service():
    docs = template(*POSTGRES)
    pod = _test_pod(docs)
    assert pod["metadata"]["annotations"]["helm.sh/hook-delete-policy"] == "before-hook-creation"
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never" and spec["automountServiceAccountToken"] is False
    endpoint = f"http://{FULL}.{NS}.svc:4334"
    status, = spec["initContainers"]
    where, = spec["containers"]
    assert status["command"] == ["/usr/local/bin/corium-fleet", "status", "--endpoint", endpoint]
    assert where["command"] == ["/usr/local/bin/corium-fleet", "where", "corium-fleet-helm-test",
                                "--endpoint", endpoint]
    ingress_image = main(docs, "ingress")["image"]
    for c in (status, where):
        assert c["image"] == ingress_image              # the CLI ships in the ingress image
        # the fleet's own token (generated), never the CLI's default, the development token
        assert c["env"] == [{"name": "CORIUM_TOKEN", "valueFrom": {"secretKeyRef": {
            "name": f"{FULL}-token", "key": "token"}}}]
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
    # the client Service it calls exists and serves that port
    svc = one(docs, "Service", FULL)
    assert {p["port"] for p in svc["spec"]["ports"]} >= {4334}
    # and it is no pool's pod
    labels = pod["metadata"]["labels"]
    assert labels["app.kubernetes.io/component"] == "test"


@pytest.mark.parametrize("args, secret", [
    (("--set", "auth.existingSecret=fleet-token"), {"name": "fleet-token", "key": "token"}),
    (("--set", "auth.existingSecret=fleet-token", "--set", "test.existingSecret=ops",
      "--set", "test.existingSecretKey=jwt"), {"name": "ops", "key": "jwt"}),
])
def test_helm_test_presents_the_token_the_fleet_wants(args, secret):
    pod = _test_pod(template(*POSTGRES, *args))
    for c in pod["spec"]["initContainers"] + pod["spec"]["containers"]:
        assert env_of(c)["CORIUM_TOKEN"]["valueFrom"]["secretKeyRef"] == secret


def test_helm_test_image_database_and_switch():
    pod = _test_pod(template(*POSTGRES, "--set", "test.image.repository=registry/cli",
                             "--set", "test.image.tag=v9", "--set", "test.database=orders"))
    where = pod["spec"]["containers"][0]
    assert where["image"] == "registry/cli:v9" and where["command"][2] == "orders"
    assert not kind(template(*POSTGRES, "--set", "test.enabled=false"), "Pod")


def test_client_network_policy_admits_the_test_pod():
    docs = render(CI / "postgres-ca-escape-hatches-values.yaml")
    policy = one(docs, "NetworkPolicy", f"{FULL}-ingress")
    client_rule = next(r for r in policy["spec"]["ingress"]
                       if {p["port"] for p in r["ports"]} >= {4334})
    test_labels = _test_pod(docs)["metadata"]["labels"]
    admitted = [peer for peer in client_rule["from"] if "podSelector" in peer
                and all(test_labels.get(k) == v
                        for k, v in peer["podSelector"]["matchLabels"].items())]
    assert admitted, client_rule["from"]
    assert {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "apps"}}} in client_rule["from"]


def test_notes_say_how_to_run_helm_test(tmp_path):
    notes = _notes(tmp_path)
    assert f"helm test ci-release --namespace {NS} --logs" in notes
    assert "the test presents the fleet's token, which holds role \"fleet-operator\"" in notes
    assert "corium-dev-insecure-token" not in notes
    own = _notes(tmp_path, "--set", "test.existingSecret=ops", "--set", "test.existingSecretKey=jwt")
    assert 'the token in secret ops, key jwt, must hold role "fleet-operator"' in own
    assert "helm test" not in _notes(tmp_path, "--set", "test.enabled=false")


# --- resource bounds, logging, tracing, drain ------------------------------------------------

def test_limits_are_not_rendered_unless_set():
    config = configs(template(*POSTGRES))
    assert not set(TRANSACTOR_LIMITS.values()) & set(config["transactor"])
    # The one default: a connection age, so pods the HPA adds get traffic.
    assert not (set(INGRESS_LIMITS.values()) - {"max_connection_age_ms"}) & set(config["ingress"])
    assert config["ingress"]["max_connection_age_ms"] == 300000


def test_every_limit_reaches_its_config_key():
    path = CI / "monitoring-limits-values.yaml"
    values = yaml.safe_load(path.read_text())
    config = configs(render(path))
    for component, keys in (("transactor", TRANSACTOR_LIMITS), ("ingress", INGRESS_LIMITS)):
        assert set(values[component]["limits"]) == set(keys), "the CI set sets every limit"
        for key, toml_key in keys.items():
            assert config[component][toml_key] == values[component]["limits"][key], key
    assert isinstance(config["ingress"]["retry_budget_ratio"], float)
    assert config["ingress"]["adaptive_node_limit"] is False


def test_capacity_is_rendered_only_when_set():
    # unset: the binary's defaults (30 s idle eviction, a budget from the container's limit, 16)
    assert not set(TRANSACTOR_CAPACITY.values()) & set(configs(template(*POSTGRES))["transactor"])
    path = CI / "monitoring-limits-values.yaml"
    values = yaml.safe_load(path.read_text())["transactor"]["capacity"]
    assert set(values) == set(TRANSACTOR_CAPACITY), "the CI set sets every capacity value"
    config = configs(render(path))["transactor"]
    for key, toml_key in TRANSACTOR_CAPACITY.items():
        assert config[toml_key] == values[key], key


def test_a_whole_number_ratio_stays_a_float_and_big_numbers_stay_integers(tmp_path):
    config = configs(with_values(tmp_path, {
        "ingress": {"limits": {"retryBudgetRatio": 2, "maxConnectionAgeMs": 86400000}}}))
    assert config["ingress"]["retry_budget_ratio"] == 2.0
    assert isinstance(config["ingress"]["retry_budget_ratio"], float)
    assert config["ingress"]["max_connection_age_ms"] == 86400000


def test_limits_given_as_null_are_not_rendered(tmp_path):
    # a user's null removes the key from the merged values (e.g. a copy of values.yaml); it must
    # still mean "the binary's default", not 0 (refused) or an integer for a bool
    config = configs(with_values(tmp_path, {
        "transactor": {"limits": dict.fromkeys(TRANSACTOR_LIMITS)},
        "ingress": {"limits": dict.fromkeys(INGRESS_LIMITS)},
        "storage": {"postgres": {"poolSize": {"transactor": None, "ingress": None}}}}))
    assert not (set(TRANSACTOR_LIMITS.values()) | {"storage_pool_size"}) & set(config["transactor"])
    assert not (set(INGRESS_LIMITS.values()) | {"storage_pool_size"}) & set(config["ingress"])


# --- PostgreSQL pool size --------------------------------------------------------------------

def _node_toml(docs, component):
    return one(docs, "ConfigMap", config_map_of(pool(docs, component)))["data"]["node.toml"]


def test_storage_pool_size_is_not_rendered_unless_set():
    docs = template(*POSTGRES)
    for component in POOLS:
        assert "storage_pool_size" not in _node_toml(docs, component)


def test_storage_pool_size_reaches_each_pool_config(tmp_path):
    docs = with_values(tmp_path, {"storage": {"postgres": {"poolSize": {
        "transactor": 32, "ingress": 4}}}})
    for component, size in (("transactor", 32), ("ingress", 4)):
        lines = _node_toml(docs, component).splitlines()
        assert f"storage_pool_size = {size}" in [line.strip() for line in lines], component
    config = configs(docs)
    assert config["transactor"]["storage_pool_size"] == 32
    assert config["ingress"]["storage_pool_size"] == 4
    # one pool set, the other left to the binary's default
    docs = template(*POSTGRES, "--set", "storage.postgres.poolSize.ingress=2")
    assert "storage_pool_size" not in _node_toml(docs, "transactor")
    assert "storage_pool_size = 2" in _node_toml(docs, "ingress")


def test_storage_pool_size_from_the_ci_set():
    path = CI / "monitoring-limits-values.yaml"
    sizes = yaml.safe_load(path.read_text())["storage"]["postgres"]["poolSize"]
    assert set(sizes) == set(POOLS), "the CI set sizes both pools"
    docs = render(path)
    for component in POOLS:
        assert f"storage_pool_size = {sizes[component]}" in _node_toml(docs, component)


def test_storage_pool_size_is_postgres_only():
    docs = template("--set", "storage.type=s3", "--set", "storage.s3.bucket=fleet",
                    "--set", "storage.s3.credentials=workloadIdentity",
                    "--set", "storage.postgres.poolSize.transactor=8",
                    "--set", "storage.postgres.poolSize.ingress=8")
    for component in POOLS:
        assert "storage_pool_size" not in _node_toml(docs, component)


def test_logging_goes_through_the_environment():
    docs = template(*POSTGRES, "--set", "transactor.log=debug")
    for component, level in (("transactor", "debug"), ("ingress", "info")):
        env = env_of(main(docs, component))
        assert env["CORIUM_FLEET_LOG"]["value"] == level
        assert "CORIUM_FLEET_LOG_FORMAT" not in env
    for config in configs(docs).values():
        assert "log" not in config and "log_format" not in config
    docs = render(CI / "monitoring-limits-values.yaml")
    for component in POOLS:
        assert env_of(main(docs, component))["CORIUM_FLEET_LOG_FORMAT"]["value"] == "json"


def test_tracing_sets_the_otel_variables_on_both_pools():
    assert not any(k.startswith("OTEL_") for c in POOLS
                   for k in env_of(main(template(*POSTGRES), c)))
    docs = render(CI / "monitoring-limits-values.yaml")
    for component in POOLS:
        c = main(docs, component)
        env = env_of(c)
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"]["value"] == "http://otel-collector.observability.svc:4317"
        assert env["OTEL_TRACES_SAMPLER"]["value"] == "parentbased_traceidratio"
        assert env["OTEL_TRACES_SAMPLER_ARG"]["value"] == "0.25"
        assert env["OTEL_RESOURCE_ATTRIBUTES"]["value"] == (
            f"k8s.namespace.name={NS},k8s.pod.name=$(CORIUM_FLEET_POD_NAME),"
            "deployment.environment=ci")
        names = [e["name"] for e in c["env"]]
        # $(CORIUM_FLEET_POD_NAME) expands only if it comes first
        assert names.index("CORIUM_FLEET_POD_NAME") < names.index("OTEL_RESOURCE_ATTRIBUTES")
        assert env["CORIUM_FLEET_POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
        assert "OTEL_SERVICE_NAME" not in env   # the binaries name themselves


@pytest.mark.parametrize("grace, sleep, expected", [(60, 5, 50000), (120, 10, 105000), (15, 0, 10000)])
def test_transactor_drain_deadline_follows_the_grace_period(grace, sleep, expected):
    config = configs(template(*POSTGRES, "--set", f"transactor.terminationGracePeriodSeconds={grace}",
                              "--set", f"transactor.preStopSleepSeconds={sleep}"))
    assert config["transactor"]["drain_deadline_ms"] == expected


@pytest.mark.parametrize("grace, sleep, expected", [(30, 5, 20000), (90, 0, 85000)])
def test_ingress_drain_timeout_follows_the_grace_period(grace, sleep, expected):
    config = configs(template(*POSTGRES, "--set", f"ingress.terminationGracePeriodSeconds={grace}",
                              "--set", f"ingress.preStopSleepSeconds={sleep}"))
    assert config["ingress"]["drain_timeout_ms"] == expected


# --- monitoring --------------------------------------------------------------------------------

def test_monitoring_resources_are_off_by_default():
    docs = template(*POSTGRES)
    assert not kind(docs, "PrometheusRule") and not kind(docs, "ServiceMonitor")
    assert not [d for d in kind(docs, "ConfigMap") if d["metadata"]["name"].endswith("-dashboard")]


def _alerts(docs):
    rule = one(docs, "PrometheusRule")
    return {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}


def test_prometheus_rule_alerts_and_their_settings(tmp_path):
    docs = render(CI / "monitoring-limits-values.yaml")
    rule = one(docs, "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    alerts = _alerts(docs)
    schema = json.loads((CHART / "values.schema.json").read_text())
    names = schema["properties"]["metrics"]["properties"]["prometheusRule"]["properties"][
        "disabled"]["items"]["enum"]
    assert sorted(alerts) == sorted(names), "the schema lists every alert that can be disabled"
    for alert in alerts.values():
        assert alert["labels"]["team"] == "storage"
        assert alert["labels"]["severity"] in ("warning", "critical")
        assert alert["annotations"]["summary"] and alert["annotations"]["description"]
    # the signals the brief asks for
    for name in ("CoriumFleetErrorRatioHigh", "CoriumFleetLatencyHigh", "CoriumFleetTransactorShedding",
                 "CoriumFleetLeaseRenewalFailures", "CoriumFleetCertificateExpiringSoon",
                 "CoriumFleetNoOwnedDatabases", "CoriumFleetTransactorDown"):
        assert name in alerts
    assert "up{" in alerts["CoriumFleetTransactorDown"]["expr"]
    # thresholds and selectors follow the values
    docs = with_values(tmp_path, {"metrics": {
        "selectors": {"transactor": 'cluster="eu",app="tx"', "ingress": 'cluster="eu",app="in"'},
        "prometheusRule": {"enabled": True, "errorRatio": 0.02, "latencyP99Seconds": 0.5,
                           "shedRatio": 0.1, "certificateExpiryDays": 14,
                           "disabled": ["CoriumFleetLatencyHigh", "CoriumFleetIngressDown"]}}})
    alerts = _alerts(docs)
    assert "CoriumFleetLatencyHigh" not in alerts and "CoriumFleetIngressDown" not in alerts
    assert alerts["CoriumFleetErrorRatioHigh"]["expr"].rstrip().endswith("> 0.02")
    assert alerts["CoriumFleetTransactorShedding"]["expr"].rstrip().endswith("> 0.1")
    assert "< 14 * 86400" in alerts["CoriumFleetCertificateExpiringSoon"]["expr"]
    assert alerts["CoriumFleetTransactorDown"]["expr"] == 'up{cluster="eu",app="tx"} == 0'
    assert 'corium_fleet_ingress_requests_total{cluster="eu",app="in",' in alerts[
        "CoriumFleetErrorRatioHigh"]["expr"]


def test_default_selectors_match_the_service_monitor_jobs():
    docs = render(CI / "monitoring-limits-values.yaml")
    alerts = _alerts(docs)
    assert alerts["CoriumFleetTransactorDown"]["expr"] == (
        f'up{{namespace="{NS}",job="{FULL}-transactor"}} == 0')
    assert alerts["CoriumFleetIngressDown"]["expr"] == (
        f'up{{namespace="{NS}",job="{FULL}-ingress-admin"}} == 0')
    # the ServiceMonitor scrapes exactly those Services (its job label is the Service name)
    monitor = one(docs, "ServiceMonitor")
    scraped = [s["metadata"]["name"] for s in kind(docs, "Service")
               if all(s["metadata"]["labels"].get(k) == v
                      for k, v in monitor["spec"]["selector"]["matchLabels"].items())]
    assert sorted(scraped) == sorted([f"{FULL}-transactor", f"{FULL}-ingress-admin"])


def test_grafana_dashboard_config_map():
    docs = render(CI / "monitoring-limits-values.yaml")
    cm = one(docs, "ConfigMap", f"{FULL}-dashboard")
    assert cm["metadata"]["namespace"] == "monitoring"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "Databases"}
    board = json.loads(cm["data"]["corium-fleet.json"])
    assert board["title"] == f"Corium Fleet ({NS}/{FULL})"
    assert len(board["uid"]) <= 40
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    assert exprs and all("__TRANSACTOR__" not in e and "__INGRESS__" not in e for e in exprs)
    assert any(f'job="{FULL}-transactor"' in e for e in exprs)
    assert any(f'job="{FULL}-ingress-admin"' in e for e in exprs)
    # two releases get two dashboards
    other = template(*POSTGRES, "--set", "metrics.grafanaDashboard.enabled=true",
                     "--set", "fullnameOverride=second")
    assert json.loads(one(other, "ConfigMap", "second-dashboard")["data"]["corium-fleet.json"])[
        "uid"] != board["uid"]


# --- the monitoring checker itself -----------------------------------------------------------

@pytest.mark.parametrize("expr, names", [
    ('sum(rate(a_total{x="1"}[5m])) / sum(rate(b_total[5m])) > 0.05', {"a_total", "b_total"}),
    ('histogram_quantile(0.99, sum by (le) (rate(h_bucket{method!~".*/(S|W)"}[$__rate_interval])))',
     {"h_bucket"}),
    ("absent(up{job=\"j\"} == 1)", {"up"}),
    ("sum(x) by (pod) / ignoring(code) group_left y offset 5m < 1e-05", {"x", "y"}),
    ("topk(10, max by (db) (q{a=\"b\"})) and on() vector(1)", {"q"}),
])
def test_the_metric_name_extraction(expr, names):
    assert check_monitoring.metric_names(expr) == names


def test_the_checker_refuses_an_unknown_metric_and_the_wrong_tier(tmp_path, capsys):
    metrics = ROOT / "scripts" / "chart-tools" / "metrics"
    tiers = {t: check_monitoring.exposed_names(metrics / f"{t}.prom") for t in POOLS}
    assert "corium_fleet_requests_total" in tiers["transactor"]
    assert "corium_fleet_ingress_request_duration_seconds_bucket" in tiers["ingress"]
    report = check_monitoring.Report()
    selectors = {"transactor": 'job="t"', "ingress": 'job="i"'}
    check_monitoring.check_names(report, [
        ("a", 'rate(corium_fleet_no_such_metric_total{job="t"}[5m])'),
        ("b", 'rate(corium_fleet_requests_total{job="i"}[5m])'),
        ("c", 'up{job="i"}'),
    ], tiers, selectors)
    out = capsys.readouterr().out
    assert report.failures == 2
    assert "corium_fleet_no_such_metric_total" in out
    assert "corium_fleet_requests_total with the ingress selector" in out
