"""deploy/k8s: the manifests checked without a cluster.

Usage: k8s_manifests.py EFIM_BINARY MODEL

1. Schemas: every object is validated against the published Kubernetes and Gateway API
   schemas (k8s_validate.mjs: npm kubernetes-models and @kubernetes-models/gateway-api). The
   InferencePool has no published model there: its fields are checked against the v1 CRD of
   the Gateway API Inference Extension (inference.networking.k8s.io/v1) below.
2. References: the pool selects the efim pods and targets their port; the endpoint picker's
   Service, port, pool name, config file, ConfigMap, plugins, ServiceAccount and RBAC agree;
   the HTTPRoute's backends exist; the grace period covers efim's drain.
3. The binary: every flag in the efim container's args is one `efim serve` has; efim started
   with those args answers the readiness and liveness probes' paths, exposes every metric the
   picker's flags name (kv_cache_usage_perc in [0, 1], cache_config_info with a block_size);
   after SIGTERM the readiness path answers 503 while the liveness path stays 200, and the
   process exits within the grace period.
"""
import glob
import json
import os
import re
import signal
import subprocess
import sys
import time

import yaml

EFIM, MODEL = sys.argv[1], sys.argv[2]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import efim_server  # noqa: E402
failures = []
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def check(cond, message):
    print(("ok   " if cond else "FAIL ") + message, flush=True)
    if not cond:
        failures.append(message)


def one(docs, kind, name):
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    check(len(found) == 1, f"exactly one {kind} {name}")
    return found[0] if found else {}


def arg(args, flag):
    """The value after --flag in a container's args (None when absent)."""
    return args[args.index(flag) + 1] if flag in args else None


def port_of(container, ref):
    """A container port by name or number."""
    for p in container.get("ports", []):
        if ref in (p.get("name"), p.get("containerPort")):
            return p["containerPort"]
    return None


def subset(a, b):
    return all(b.get(k) == v for k, v in a.items())


def main():
    docs = []
    for path in sorted(glob.glob(os.path.join(ROOT, "deploy/k8s/*.yaml"))):
        docs += [d for d in yaml.safe_load_all(open(path)) if d]
    check(len(docs) >= 8, f"{len(docs)} objects in deploy/k8s")
    for d in docs:
        check(all(k in d for k in ("apiVersion", "kind", "metadata")) and d["metadata"].get("name"),
              f"{d.get('kind')} {d.get('metadata', {}).get('name')}: apiVersion, kind, name")

    # 1. Published schemas.
    r = subprocess.run(["node", os.path.join(ROOT, "tests/deploy/k8s_validate.mjs")],
                       input=json.dumps(docs), capture_output=True, text=True,
                       env={**os.environ, "EFIM_NPM": os.path.join(ROOT, ".deps/npm")})
    print(r.stdout + r.stderr, end="")
    check(r.returncode == 0, "every object valid against the published schemas")
    skipped = [line for line in r.stdout.splitlines() if line.startswith("skipped")]
    check(len(skipped) == 1 and "InferencePool" in skipped[0],
          f"only the InferencePool lacks a published schema ({skipped})")

    # The InferencePool against the v1 CRD.
    pool = next((d for d in docs if d["kind"] == "InferencePool"), {})
    check(pool.get("apiVersion") == "inference.networking.k8s.io/v1", "InferencePool is v1")
    spec = pool.get("spec", {})
    check(set(spec) <= {"selector", "targetPorts", "endpointPickerRef"} and
          {"selector", "targetPorts", "endpointPickerRef"} <= set(spec),
          f"InferencePool spec has exactly the v1 fields ({sorted(spec)})")
    labels = spec.get("selector", {}).get("matchLabels", {})
    check(set(spec.get("selector", {})) == {"matchLabels"} and labels and
          all(isinstance(v, str) and len(v) <= 63 and LABEL_VALUE.match(v) for v in labels.values()),
          f"InferencePool selector: matchLabels only, valid label values ({labels})")
    ports = spec.get("targetPorts", [])
    check(len(ports) == 1 and set(ports[0]) == {"number"} and isinstance(ports[0]["number"], int)
          and 1 <= ports[0]["number"] <= 65535, f"InferencePool targetPorts: one port ({ports})")
    epp_ref = spec.get("endpointPickerRef", {})
    check(set(epp_ref) <= {"name", "kind", "group", "port", "failureMode"} and
          isinstance(epp_ref.get("name"), str) and 1 <= len(epp_ref["name"]) <= 253 and
          epp_ref.get("kind", "Service") == "Service" and
          epp_ref.get("failureMode", "FailClose") in ("FailOpen", "FailClose") and
          isinstance(epp_ref.get("port", {}).get("number"), int),
          f"InferencePool endpointPickerRef: v1 fields ({epp_ref})")

    # 2. References.
    efim = one(docs, "Deployment", "efim")
    pod = efim.get("spec", {}).get("template", {})
    check(subset(efim["spec"]["selector"]["matchLabels"], pod["metadata"]["labels"]),
          "the efim Deployment's selector matches its pods")
    check(subset(labels, pod["metadata"]["labels"]), "the pool selects the efim pods")
    c = pod["spec"]["containers"][0]
    args = c["args"]
    port = port_of(c, "http")
    check(port == ports[0]["number"] == int(arg(args, "--port")),
          f"pool target port = container port http = --port ({ports[0]['number']}, {port}, "
          f"{arg(args, '--port')})")
    check(arg(args, "--host") == "0.0.0.0", "efim listens on every address in the pod")
    check(int(pod["metadata"]["annotations"]["prometheus.io/port"]) == port,
          "the scrape annotation names the serving port")
    ready, live, start = c["readinessProbe"], c["livenessProbe"], c["startupProbe"]
    for name, probe in (("readiness", ready), ("liveness", live), ("startup", start)):
        check(port_of(c, probe["httpGet"]["port"]) == port, f"{name} probe on the serving port")
    check(ready["httpGet"]["path"] == "/health" and start["httpGet"]["path"] == "/health",
          "readiness and startup probes ask /health")
    grace = pod["spec"]["terminationGracePeriodSeconds"]
    drain = int(arg(args, "--drain-grace") or 0)
    deadline = int(arg(args, "--shutdown-timeout") or 10)
    check(grace >= drain + deadline, f"terminationGracePeriodSeconds {grace} >= drain-grace "
          f"{drain} + shutdown-timeout {deadline}")
    svc = one(docs, "Service", "efim")
    check(subset(svc["spec"]["selector"], pod["metadata"]["labels"]) and
          port_of(c, svc["spec"]["ports"][0]["targetPort"]) == port,
          "the efim Service selects the pods and targets the serving port")

    epp_svc = one(docs, "Service", epp_ref.get("name"))
    epp = one(docs, "Deployment", epp_ref.get("name"))
    epp_pod = epp.get("spec", {}).get("template", {})
    ec = epp_pod["spec"]["containers"][0]
    eargs = ec["args"]
    svc_port = next((p for p in epp_svc["spec"]["ports"] if p["port"] == epp_ref["port"]["number"]), None)
    check(svc_port is not None and subset(epp_svc["spec"]["selector"], epp_pod["metadata"]["labels"]),
          "the picker's Service selects its pod on the port the pool names")
    check(svc_port and port_of(ec, svc_port["targetPort"]) == int(arg(eargs, "--grpc-port")),
          "the picker Service's target port is the picker's --grpc-port")
    check(arg(eargs, "--pool-name") == pool["metadata"]["name"], "the picker watches this pool")
    config = arg(eargs, "--config-file")
    mount = next((m for m in ec["volumeMounts"] if config.startswith(m["mountPath"] + "/")), None)
    vol = next((v for v in epp_pod["spec"]["volumes"] if mount and v["name"] == mount["name"]), None)
    cm = one(docs, "ConfigMap", vol["configMap"]["name"]) if vol else {}
    key = os.path.basename(config)
    check(key in cm.get("data", {}), f"--config-file {config} is the ConfigMap's key {key}")
    epc = yaml.safe_load(cm.get("data", {}).get(key, "{}")) or {}
    declared = {p.get("name", p["type"]) for p in epc.get("plugins", [])}
    used = {r["pluginRef"] for prof in epc.get("schedulingProfiles", []) for r in prof["plugins"]}
    check(epc.get("kind") == "EndpointPickerConfig" and used and used <= declared,
          f"the picker config's profiles use declared plugins ({sorted(used)})")
    sa = epp_pod["spec"].get("serviceAccountName")
    role = one(docs, "Role", sa)
    binding = one(docs, "RoleBinding", sa)
    grants = {(g, r) for rule in role.get("rules", []) for g in rule["apiGroups"]
              for r in rule["resources"] if {"get", "list", "watch"} <= set(rule["verbs"])}
    check({("", "pods"), ("inference.networking.k8s.io", "inferencepools")} <= grants,
          "the picker may read pods and InferencePools")
    check(binding.get("roleRef", {}).get("name") == role["metadata"]["name"] and
          any(s["kind"] == "ServiceAccount" and s["name"] == sa for s in binding.get("subjects", [])),
          "the RoleBinding gives the picker's ServiceAccount its Role")
    route = next((d for d in docs if d["kind"] == "HTTPRoute"), {})
    backends = [b for rule in route.get("spec", {}).get("rules", []) for b in rule["backendRefs"]]
    check(any(b.get("kind") == "InferencePool" and b.get("group") == "inference.networking.k8s.io"
              and b["name"] == pool["metadata"]["name"] for b in backends),
          "the HTTPRoute sends traffic to the pool")
    for b in backends:
        if b.get("kind", "Service") == "Service":
            s = one(docs, "Service", b["name"])
            check(any(p["port"] == b["port"] for p in s["spec"]["ports"]),
                  f"HTTPRoute backend Service {b['name']}:{b['port']} exists")

    # 3. The binary behind the manifest.
    help_text = subprocess.run([EFIM, "serve", "--help"], capture_output=True, text=True).stdout
    flags = [a for a in args if a.startswith("--")]
    unknown = [f for f in flags if not re.search(rf"(^|[\s,]){re.escape(f)}\b", help_text, re.M)]
    check(args[0] == "serve" and not unknown, f"efim serve knows every flag in args (unknown: {unknown})")
    metric_flags = ["--total-queued-requests-metric", "--total-running-requests-metric",
                    "--kv-cache-usage-percentage-metric", "--cache-info-metric"]
    wanted = [arg(eargs, f) for f in metric_flags]
    check(all(wanted), f"the picker is told each metric's name ({wanted})")
    live_check(args, wanted, ready["httpGet"]["path"], live["httpGet"]["path"], grace)


def get(port, path):
    return efim_server.http_get(f"http://127.0.0.1:{port}{path}", timeout=10)


def live_check(args, metrics, ready_path, live_path, grace):
    flags = list(args[2:])  # after `serve` and the image's model path (the bundled one here)
    flags[flags.index("--host") + 1] = "127.0.0.1"
    at = flags.index("--port")
    del flags[at:at + 2]  # efim_server.start passes --port 0
    flags[flags.index("--threads") + 1] = "1"
    flags[flags.index("--kv-cache-mb") + 1] = "64"
    p, port = efim_server.start(EFIM, MODEL, flags, "efim serve with the manifest's args")
    try:
        check(get(port, ready_path)[0] == 200, f"readiness path {ready_path}: 200")
        check(get(port, live_path)[0] == 200, f"liveness path {live_path}: 200")
        status, text = get(port, "/metrics")
        for name in metrics:
            m = re.search(rf"^{re.escape(name)}(\{{[^}}]*\}})? (\S+)$", text, re.M)
            check(m is not None, f"/metrics has {name}")
            if m and name.endswith("kv_cache_usage_perc"):
                check(0.0 <= float(m.group(2)) <= 1.0, f"{name} {m.group(2)} is in [0, 1]")
            if m and name.endswith("cache_config_info"):
                bs = re.search(r'block_size="(\d+)"', m.group(1) or "")
                check(bs is not None and int(bs.group(1)) > 0, f"{name} has block_size ({m.group(1)})")
        t0 = time.time()
        p.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        check(get(port, ready_path)[0] == 503, "after SIGTERM the readiness path answers 503")
        check(get(port, live_path)[0] == 200, "after SIGTERM the liveness path still answers 200")
        rc = p.wait(timeout=grace + 5)
        check(rc == 0 and time.time() - t0 <= grace,
              f"exit {rc} after {time.time() - t0:.1f} s, within the {grace} s grace period")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


main()
if failures:
    sys.exit(f"{len(failures)} check(s) failed")
print("k8s manifests: ok")
