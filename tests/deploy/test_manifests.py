"""The Kubernetes manifests (``deploy/kubernetes/``), checked without a cluster, an engine or a network.

- every object is validated against the Kubernetes JSON schemas of every version ``kubernetes-validate`` ships
  (in its wheel: nothing is downloaded), strictly: an unknown field is an error, and so is a kind or an
  apiVersion with no schema;
- a deliberately broken copy (a misspelled field, a wrong type, a missing required field, a removed
  apiVersion) fails that same check, so the check is known to bite;
- what no schema knows: selectors select their own pod templates (and only them), the Service's ports lead
  to the server's named ports, the server's and the workers' arguments are accepted by ``aioenv serve`` and
  ``aioenv worker`` and agree on the ports, the probes run the image's own HEALTHCHECK, the pods run as the
  image's non-root user without privileges, the ports beyond loopback authenticate (``--auth`` with keys from
  Secrets, never ``--insecure``) and the kustomization lists every manifest.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import kubernetes_validate
import pytest
import yaml
from kubernetes_validate import utils as kv_utils

from aioenv.cli.main import main as cli
from aioenv.server.exposure import exposure_warnings

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "deploy" / "kubernetes"
DOCKERFILE = ROOT / "docker" / "Dockerfile"
COMPOSE = ROOT / "docker" / "compose.yaml"
KUSTOMIZATION = "kustomization.yaml"
#: Every Kubernetes version whose schemas the installed kubernetes-validate ships (1.25 to 1.37 for 1.37.0).
VERSIONS = sorted(set(kv_utils.all_versions()), key=lambda v: tuple(int(p) for p in v.split(".")))


@dataclass
class Manifest:
    """One Kubernetes object, and the file it came from."""

    path: Path
    obj: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.obj.get("kind"))

    @property
    def name(self) -> str:
        return str((self.obj.get("metadata") or {}).get("name"))

    def __str__(self) -> str:
        return f"{self.path.name}: {self.kind}/{self.name}"


def manifests(directory: Path = MANIFESTS) -> list[Manifest]:
    """Every object of every ``*.yaml`` in ``directory`` except the kustomization (which no schema covers)."""
    found = []
    for path in sorted(directory.glob("*.yaml")):
        if path.name == KUSTOMIZATION:
            continue
        found += [Manifest(path, obj) for obj in yaml.safe_load_all(path.read_text()) if obj is not None]
    return found


def schema_errors(directory: Path, version: str) -> list[str]:
    """What the Kubernetes ``version`` schemas (strict) find wrong with the manifests in ``directory``."""
    errors = []
    for item in manifests(directory):
        if not isinstance(item.obj, dict):
            errors.append(f"{item.path.name}: a document that is not an object: {item.obj!r}")
            continue
        try:
            kubernetes_validate.validate(item.obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(str(p) for p in exc.path)
            errors.append(f"{item} against Kubernetes {version}: {where}: {exc.message}")
        except (kubernetes_validate.SchemaNotFoundError, kubernetes_validate.InvalidSchemaError) as exc:
            errors.append(f"{item} against Kubernetes {version}: {exc.message}")
        except KeyError as exc:  # no apiVersion or kind: the validator cannot even pick a schema
            errors.append(f"{item}: no {exc.args[0]}")
    return errors


def the(kind: str, name: str) -> dict[str, Any]:
    """The one manifest of this kind and name."""
    found = [m.obj for m in manifests() if m.kind == kind and m.name == name]
    assert len(found) == 1, f"{len(found)} {kind}/{name} in {MANIFESTS}"
    return found[0]


def workloads() -> list[Manifest]:
    """The objects that run pods."""
    return [m for m in manifests() if m.kind in ("Deployment", "StatefulSet", "DaemonSet", "Job")]


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    spec = workload["spec"]["template"]["spec"]
    assert isinstance(spec, dict)
    return spec


def container(workload: dict[str, Any]) -> dict[str, Any]:
    """A workload's only container."""
    containers = pod_spec(workload)["containers"]
    assert len(containers) == 1, f"{workload['metadata']['name']} runs {len(containers)} containers"
    assert isinstance(containers[0], dict)
    return containers[0]


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a label selector (``matchLabels`` only, as these manifests use) selects ``labels``."""
    assert set(selector) <= {"matchLabels"}, f"selector {selector} uses more than matchLabels"
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def option(args: list[str], name: str) -> str:
    assert name in args, f"no {name} in {args}"
    return args[args.index(name) + 1]


def port_of(address: str) -> int:
    found = re.fullmatch(r"tcp://[^:/]+:(\d+)", address)
    assert found, f"not tcp://HOST:PORT: {address!r}"
    return int(found[1])


def expanded(args: list[str], spec: dict[str, Any]) -> list[str]:
    """``args`` with ``$(VAR)`` replaced as the kubelet does, from the container's ``env`` (each variable must be
    defined there: the kubelet would leave an undefined one as it stands)."""
    defined = {e["name"] for e in spec.get("env", [])}

    def value(match: re.Match[str]) -> str:
        assert match[1] in defined, f"$({match[1]}) in {args} is not in the container's env"
        return f"<{match[1].lower()}>"

    return [re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", value, arg) for arg in args]


def secret_mounts(workload: dict[str, Any]) -> dict[str, str]:
    """Where a workload's container mounts Secrets: mount path -> the Secret's name."""
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod_spec(workload).get("volumes", []) if "secret" in v}
    return {
        m["mountPath"]: secrets[m["name"]] for m in container(workload).get("volumeMounts", []) if m["name"] in secrets
    }


def on_this_machine(args: list[str], mounts: dict[str, str], where: Path) -> list[str]:
    """``args`` with each path under a Secret's mount moved under ``where``, where it then exists: a directory
    for the mount itself, a file for a file in it (the files a Secret must hold)."""
    moved = []
    for arg in args:
        mount = next((m for m in mounts if arg == m or arg.startswith(m + "/")), None)
        if mount is not None:
            local = where / mounts[mount] / arg[len(mount) :].lstrip("/")
            (local.parent if arg != mount else local).mkdir(parents=True, exist_ok=True)
            if arg != mount:
                local.touch()
            arg = str(local)
        moved.append(arg)
    return moved


def accepted(command: str, args: list[str]) -> dict[str, Any]:
    """``aioenv COMMAND ARGS`` parses: every option exists and every value has its type (nothing runs); the
    parsed options."""
    assert isinstance(cli, click.Group)
    cmd = cli.commands[command]
    try:
        return cmd.make_context(f"aioenv {command}", list(args)).params
    except click.ClickException as exc:
        pytest.fail(f"aioenv {command} {' '.join(args)}: {exc.format_message()}")


def dockerfile_instruction(name: str) -> str:
    """The last ``NAME`` instruction of docker/Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    found = [line.split(None, 1)[1] for line in text.splitlines() if line.upper().startswith(name + " ")]
    assert found, f"no {name} in {DOCKERFILE}"
    return found[-1].strip()


# ---- the schemas ---------------------------------------------------------------------------------------------


def test_kubernetes_validate_ships_its_schemas() -> None:
    # offline by construction: the schemas are files of the installed package, not something fetched
    assert len(VERSIONS) >= 5, VERSIONS
    schemas = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    for version in (VERSIONS[0], VERSIONS[-1]):
        assert (schemas / f"v{version}-local-strict" / "deployment-apps-v1.json").is_file()


def test_there_are_manifests_to_check() -> None:
    kinds = sorted(m.kind for m in manifests())
    assert kinds == ["Deployment", "Deployment", "NetworkPolicy", "NetworkPolicy", "Service"], kinds


@pytest.mark.parametrize("version", VERSIONS)
def test_manifests_match_the_kubernetes_schemas(version: str) -> None:
    errors = schema_errors(MANIFESTS, version)
    assert not errors, "\n".join(errors)


def _rename(obj: dict[str, Any], path: list[str], new: str) -> None:
    *parents, last = path
    for key in parents:
        obj = obj[key]
    obj[new] = obj.pop(last)


BREAKAGES: dict[str, tuple[str, Callable[[dict[str, Any]], None], str]] = {
    # name: (kind/name of the object broken, how, what the error must mention)
    "misspelled field": ("Deployment/aioenv-worker", lambda o: _rename(o, ["spec", "strategy"], "stratgy"), "stratgy"),
    "misspelled nested field": (
        "Deployment/aioenv-server",
        lambda o: _rename(o["spec"]["template"]["spec"]["containers"][0], ["securityContext"], "securityContex"),
        "securityContex",
    ),
    "wrong type": ("Deployment/aioenv-worker", lambda o: o["spec"].update(replicas="two"), "replicas"),
    "missing required field": (
        "Service/aioenv-server",
        lambda o: o["spec"]["ports"][0].pop("port"),
        "port",
    ),
    "removed apiVersion": ("Deployment/aioenv-server", lambda o: o.update(apiVersion="apps/v1beta1"), "v1beta1"),
    "unknown kind": ("NetworkPolicy/aioenv-worker", lambda o: o.update(kind="NetworkPolicyy"), "NetworkPolicyy"),
}


@pytest.fixture
def broken_copy(tmp_path: Path) -> Callable[[str, Callable[[dict[str, Any]], None]], Path]:
    """A function that copies deploy/kubernetes into tmp_path with one object changed; the copy's directory."""

    def make(target: str, breaks: Callable[[dict[str, Any]], None]) -> Path:
        copy = tmp_path / "kubernetes"
        shutil.copytree(MANIFESTS, copy)
        hit = 0
        for path in copy.glob("*.yaml"):
            if path.name == KUSTOMIZATION:
                continue
            objs = list(yaml.safe_load_all(path.read_text()))
            for obj in objs:
                if obj is not None and f"{obj['kind']}/{obj['metadata']['name']}" == target:
                    breaks(obj)
                    hit += 1
            path.write_text(yaml.safe_dump_all(objs, sort_keys=False))
        assert hit == 1, f"{target} is not in {MANIFESTS}"
        return copy

    return make


@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_a_broken_manifest_fails_the_schema_check(
    breakage: str, broken_copy: Callable[[str, Callable[[dict[str, Any]], None]], Path]
) -> None:
    target, breaks, mentioned = BREAKAGES[breakage]
    copy = broken_copy(target, breaks)
    for version in (VERSIONS[0], VERSIONS[-1]):
        errors = schema_errors(copy, version)
        assert len(errors) == 1, f"{breakage}: {errors}"
        assert target.split("/")[1] in errors[0], errors
        assert mentioned in errors[0], errors


def test_the_copy_itself_passes(tmp_path: Path) -> None:
    # the broken copies differ from the real files by their one change only: re-dumped unchanged, they pass
    copy = tmp_path / "kubernetes"
    shutil.copytree(MANIFESTS, copy)
    for path in copy.glob("*.yaml"):
        path.write_text(yaml.safe_dump_all(list(yaml.safe_load_all(path.read_text())), sort_keys=False))
    assert not schema_errors(copy, VERSIONS[-1])


# ---- what no schema checks -----------------------------------------------------------------------------------


def test_workloads_select_their_own_pods_and_only_them() -> None:
    loads = workloads()
    assert loads
    for load in loads:
        selector = load.obj["spec"]["selector"]
        labels = load.obj["spec"]["template"]["metadata"]["labels"]
        assert selects(selector, labels), f"{load}: selector {selector} does not select its pods {labels}"
        for other in loads:
            if other is not load:
                other_labels = other.obj["spec"]["template"]["metadata"]["labels"]
                assert not selects(selector, other_labels), f"{load} also selects the pods of {other}"


def test_the_service_leads_to_the_servers_named_ports() -> None:
    server = the("Deployment", "aioenv-server")
    service = the("Service", "aioenv-server")
    assert selects({"matchLabels": service["spec"]["selector"]}, server["spec"]["template"]["metadata"]["labels"])
    worker_labels = the("Deployment", "aioenv-worker")["spec"]["template"]["metadata"]["labels"]
    assert not selects({"matchLabels": service["spec"]["selector"]}, worker_labels)
    named = {p["name"]: p["containerPort"] for p in container(server)["ports"]}
    for port in service["spec"]["ports"]:
        assert port["targetPort"] in named, f"Service port {port} leads to no port of the server: {named}"
        assert port["port"] == named[port["targetPort"]], f"{port}: the Service moves the port: {named}"
    assert service["spec"].get("type", "ClusterIP") == "ClusterIP", "the metrics port has no authentication"


def test_the_servers_arguments_are_accepted_by_aioenv_serve_and_agree_with_its_ports(tmp_path: Path) -> None:
    server = the("Deployment", "aioenv-server")
    spec = container(server)
    assert "command" not in spec, "the image's ENTRYPOINT (aioenv serve) must stay"
    args = expanded(spec["args"], spec)
    accepted("serve", on_this_machine(args, secret_mounts(server), tmp_path))
    named = {p["name"]: p["containerPort"] for p in spec["ports"]}
    assert named == {
        "clients": port_of(option(args, "--bind")),
        "workers": port_of(option(args, "--worker-bind")),
        "metrics": int(option(args, "--metrics-port")),
    }
    assert option(args, "--bind").startswith("tcp://0.0.0.0:"), "inside a pod the server must listen on every address"
    assert server["spec"]["replicas"] == 1, "a pool lives in one server: two behind one Service split the clients"
    assert server["spec"]["strategy"]["type"] == "Recreate", "a rolling update runs two servers at once"


def test_the_workers_dial_the_services_worker_port_with_arguments_aioenv_worker_accepts(tmp_path: Path) -> None:
    worker = the("Deployment", "aioenv-worker")
    service = the("Service", "aioenv-server")
    spec = container(worker)
    assert spec["command"] == ["aioenv", "worker"]
    args = expanded(spec["args"], spec)
    accepted("worker", on_this_machine(args, secret_mounts(worker), tmp_path))
    service_port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "workers")
    assert option(args, "--connect") == f"tcp://{service['metadata']['name']}:{service_port}"
    # each host's name is its pod's (unique while the pod lives): the server refuses a name already joined
    assert spec["args"][spec["args"].index("--name") + 1] == "$(POD_NAME)"
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in spec["env"]


def test_the_server_probes_run_the_images_health_check() -> None:
    found = re.fullmatch(r"(?:--\S+\s+)*CMD\s+(\[.*\])", dockerfile_instruction("HEALTHCHECK"))
    assert found, dockerfile_instruction("HEALTHCHECK")
    health = yaml.safe_load(found[1])
    spec = container(the("Deployment", "aioenv-server"))
    for probe in ("readinessProbe", "livenessProbe"):
        assert spec[probe]["exec"]["command"] == health, f"{probe} is not the image's HEALTHCHECK {health}"
        assert spec[probe]["timeoutSeconds"] >= 10, f"{probe}: aioenv status waits up to 3 s for the answer"
    clients = next(p["containerPort"] for p in spec["ports"] if p["name"] == "clients")
    assert health[2] == f"tcp://127.0.0.1:{clients}", "the health check would ask another port"


def test_every_port_beyond_loopback_authenticates_with_keys_from_a_secret(tmp_path: Path) -> None:
    """The server binds every address of its pod with --auth (never --insecure: a NetworkPolicy is not enforced
    by every cluster, and every pod of the namespace passes it) and aioenv serve itself agrees; its key directory,
    the probes' key pair and the workers' keys are files of Secrets, mounted read-only and readable by the image's
    group; the worker hosts present their own key and check the server's."""
    server, worker = the("Deployment", "aioenv-server"), the("Deployment", "aioenv-worker")
    spec = container(server)
    args = expanded(spec["args"], spec)
    assert "--insecure" not in args
    mounts = secret_mounts(server)
    assert option(args, "--auth") in mounts, f"--auth {option(args, '--auth')} is no Secret's mount: {mounts}"
    params = accepted("serve", on_this_machine(args, mounts, tmp_path))
    assert params["auth"] is not None
    assert exposure_warnings(params["bind"], params["worker_bind"], auth=params["auth"], insecure=False) == []
    keys = option(args, "--auth")
    for probe in ("readinessProbe", "livenessProbe"):
        command = spec[probe]["exec"]["command"]
        assert option(command, "--key") == f"{keys}/health.key_secret", f"{probe}: not a key pair of the Secret"
        assert option(command, "--server-key") == f"{keys}/server.key", probe
    worker_args = expanded(container(worker)["args"], container(worker))
    worker_mounts = secret_mounts(worker)
    for flag in ("--key", "--server-key"):
        assert option(worker_args, flag).rpartition("/")[0] in worker_mounts, f"the worker's {flag} is in no Secret"
    assert option(worker_args, "--server-key").endswith("/server.key")
    assert set(mounts.values()).isdisjoint(worker_mounts.values()), "the workers would hold the server's secret key"
    for load in (server, worker):
        pod = pod_spec(load)
        for volume in pod["volumes"]:
            if "secret" in volume:
                assert volume["secret"]["defaultMode"] & 0o007 == 0, f"{volume}: every user of the node may read it"
                assert volume["secret"]["defaultMode"] & 0o040, f"{volume}: the image's group cannot read it"
        assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"], load["metadata"]["name"]
        assert all(m.get("readOnly") for m in container(load)["volumeMounts"] if m["mountPath"] in secret_mounts(load))


def test_pods_run_as_the_images_user_without_privileges() -> None:
    uid, _, gid = dockerfile_instruction("USER").partition(":")
    image = re.search(r"^\s*image:\s*(\S+)", COMPOSE.read_text(), re.MULTILINE)
    assert image, COMPOSE
    for load in workloads():
        pod = pod_spec(load.obj)
        assert pod["securityContext"]["runAsNonRoot"] is True, load
        assert str(pod["securityContext"]["runAsUser"]) == uid, f"{load}: not the image's USER {uid}"
        assert str(pod["securityContext"]["runAsGroup"]) == (gid or uid), load
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, load
        assert pod["automountServiceAccountToken"] is False, f"{load}: aioenv never calls the Kubernetes API"
        spec = container(load.obj)
        assert spec["image"] == image[1], f"{load}: not the image docker/compose.yaml builds"
        context = spec["securityContext"]
        assert context["allowPrivilegeEscalation"] is False, load
        assert context["capabilities"] == {"drop": ["ALL"]}, load
        if context.get("readOnlyRootFilesystem"):
            mounts = {m["mountPath"] for m in spec.get("volumeMounts", [])}
            assert "/tmp" in mounts, f"{load}: a read-only root with no writable /tmp"


def test_the_network_policy_lets_the_workers_and_this_namespace_in() -> None:
    policy = the("NetworkPolicy", "aioenv-server")
    server = the("Deployment", "aioenv-server")
    worker_labels = the("Deployment", "aioenv-worker")["spec"]["template"]["metadata"]["labels"]
    assert selects(policy["spec"]["podSelector"], server["spec"]["template"]["metadata"]["labels"])
    named = {p["name"] for p in container(server)["ports"]}
    opened: dict[str, list[dict[str, Any]]] = {}
    for rule in policy["spec"]["ingress"]:
        for port in rule["ports"]:
            assert port["port"] in named, f"the policy opens {port['port']}, which the server does not name"
            opened.setdefault(port["port"], []).extend(rule["from"])
    assert set(opened) == named, f"ports the policy leaves closed: {named - set(opened)}"
    assert all(selects(peer["podSelector"], worker_labels) for peer in opened["workers"])
    assert opened["workers"] != [{"podSelector": {}}], "the worker port is open to every pod"
    closed = the("NetworkPolicy", "aioenv-worker")
    assert selects(closed["spec"]["podSelector"], worker_labels)
    assert closed["spec"]["policyTypes"] == ["Ingress"]
    assert not closed["spec"].get("ingress"), "worker hosts serve no port: nothing may connect to them"


def test_the_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((MANIFESTS / KUSTOMIZATION).read_text())
    assert kustomization["kind"] == "Kustomization"
    files = sorted(p.name for p in MANIFESTS.glob("*.yaml") if p.name != KUSTOMIZATION)
    assert sorted(kustomization["resources"]) == files
