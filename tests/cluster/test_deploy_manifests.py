"""The deployment files of deploy/, validated for real.

- Every RayCluster / RayJob document against KubeRay's own CRD schemas (the ``v1``
  ``openAPIV3Schema`` of ../shared/kuberay-crds), plus the fields the API server would
  silently prune (unknown to the schema) and the rules KubeRay's operator enforces outside
  the schema.
- Every core Kubernetes object, and every pod template inside the Ray resources, with
  ``kubernetes-validate`` (strict: unknown fields are errors) for Kubernetes ``K8S_VERSION``.
- All of it against the shard configuration the ConfigMap carries (``load_shard_map``):
  one worker group per shard offering its resource and mounting its claim at the folder
  of its path, the token from the Secret in every Ray container, one image everywhere.
- deploy/ray-cluster.yaml against the Ray cluster launcher's own schema, and its start
  commands run in a shell (``ray`` replaced by a recorder) for each shard's host.
- deploy/Dockerfile and .dockerignore: what the image build copies is in the build
  context, and what must stay out (.venv, tests) does.

Each check is a function returning the problems it found, so that a negative test can
feed it a broken copy of a manifest and see it fail.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import stat
import subprocess
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any, Final

import jsonschema
import kubernetes_validate
import msgspec
import pytest
import yaml

from surfacelog.store.shardmap import ShardMap, default_resource, load_shard_map

from support import paths

Doc = dict[str, Any]

ROOT: Final = paths.REPO
DEPLOY: Final = ROOT / "deploy"
KUBERAY: Final = DEPLOY / "kuberay"
CRD_DIR: Final = paths.SHARED / "kuberay-crds"
CRD_FILES: Final = {"RayCluster": "ray.io_rayclusters.yaml", "RayJob": "ray.io_rayjobs.yaml"}
K8S_VERSION: Final = "1.33"
"""The Kubernetes version whose schemas (shipped by kubernetes-validate) the core objects
must satisfy."""

MANIFEST_FILES: Final = ("pvcs.yaml", "shards-configmap.yaml", "raycluster.yaml",
                         "rayjob.yaml")
CONFIG_MOUNT: Final = "/etc/surfacelog"
SHARDS_KEY: Final = "shards.json"
MIN_RAY_FOR_TOKEN_AUTH: Final = (2, 52, 0)
DNS1035: Final = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
DNS1123_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")

_Loader: Final = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


# ---------------------------------------------------------------------------- loading


def _load_all(path: Path) -> list[Doc]:
    with path.open(encoding="utf-8") as f:
        return [d for d in yaml.load_all(f, Loader=_Loader) if d is not None]


@cache
def _manifests() -> tuple[tuple[str, Doc], ...]:
    """(file name, document) of every document of deploy/kuberay/*.yaml."""
    return tuple((p.name, d) for p in sorted(KUBERAY.glob("*.yaml")) for d in _load_all(p))


def _docs(kind: str) -> list[Doc]:
    return [copy.deepcopy(d) for _, d in _manifests() if d.get("kind") == kind]


def _one(kind: str) -> Doc:
    found = _docs(kind)
    assert len(found) == 1, f"expected exactly one {kind} in deploy/kuberay, found {len(found)}"
    return found[0]


def _doc_id(entry: tuple[str, Doc]) -> str:
    name, doc = entry
    return f"{name}:{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


# ------------------------------------------------------------------- KubeRay CRD schemas


@dataclass(frozen=True)
class Crd:
    group: str
    version: str
    kind: str
    schema: dict[str, Any]
    validator: jsonschema.Draft7Validator

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


@pytest.fixture(scope="module")
def crds() -> dict[str, Crd]:
    """The served ``v1`` schema of each KubeRay CRD, loaded once per module."""
    if not CRD_DIR.is_dir():
        pytest.skip(f"KubeRay CRDs not found at {CRD_DIR}: the repository's parent folder "
                    "has no shared/kuberay-crds")
    out: dict[str, Crd] = {}
    for kind, file in CRD_FILES.items():
        (crd,) = _load_all(CRD_DIR / file)
        assert crd["kind"] == "CustomResourceDefinition"
        assert crd["spec"]["names"]["kind"] == kind
        (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
        assert v1["served"], f"{file}: v1 is not served"
        schema = v1["schema"]["openAPIV3Schema"]
        jsonschema.Draft7Validator.check_schema(schema)
        out[kind] = Crd(crd["spec"]["group"], "v1", kind, schema,
                        jsonschema.Draft7Validator(schema))
    return out


def _pruned_fields(value: object, schema: Mapping[str, Any], path: str) -> Iterator[str]:
    """The fields of ``value`` that the API server would drop because the structural
    schema does not know them (jsonschema accepts them: no additionalProperties)."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if props is not None and key in props:
                yield from _pruned_fields(item, props[key], f"{path}.{key}")
            elif isinstance(extra, dict):
                yield from _pruned_fields(item, extra, f"{path}.{key}")
            elif extra is not True:
                yield f"{path}.{key}"
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            yield from _pruned_fields(item, schema["items"], f"{path}[{i}]")


def crd_problems(doc: Doc, crd: Crd) -> list[str]:
    """What the API server would reject (or prune) in ``doc`` under ``crd``."""
    problems: list[str] = []
    if doc.get("apiVersion") != crd.api_version:
        problems.append(f"apiVersion {doc.get('apiVersion')!r} is not {crd.api_version!r}")
    if doc.get("kind") != crd.kind:
        problems.append(f"kind {doc.get('kind')!r} is not {crd.kind!r}")
    for err in sorted(crd.validator.iter_errors(doc), key=lambda e: list(e.absolute_path)):
        where = ".".join(str(p) for p in err.absolute_path) or "<root>"
        problems.append(f"{where}: {err.message}")
    # metadata is ObjectMeta, validated by the API server itself, not by the CRD schema.
    body = {k: v for k, v in doc.items() if k != "metadata"}
    problems += [f"unknown field (pruned) {p}" for p in _pruned_fields(body, crd.schema, "")]
    return problems


# ------------------------------------------------------------- core Kubernetes objects


def k8s_problems(doc: Doc) -> list[str]:
    """What kubernetes-validate (strict: unknown fields are errors) finds in ``doc``."""
    try:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as err:
        where = ".".join(str(p) for p in err.path) or "<root>"
        return [f"{where}: {err.message}"]
    return []


def _as_pod_template(template: Doc, name: str) -> Doc:
    return {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": name},
            "template": template}


# ------------------------------------------------------------------ RayCluster helpers


def _groups(cluster: Doc) -> list[Doc]:
    return list(cluster["spec"].get("workerGroupSpecs", []))


def _pod_templates(cluster: Doc) -> list[tuple[str, Doc]]:
    spec = cluster["spec"]
    return [("head", spec["headGroupSpec"]["template"])] + [
        (g["groupName"], g["template"]) for g in _groups(cluster)]


def _containers(template: Doc) -> list[Doc]:
    return list(template["spec"].get("containers", []))


def _ray_containers(cluster: Doc, job: Doc) -> list[tuple[str, Doc]]:
    """Every container that runs Ray: the head's, each worker group's, the submitter's."""
    out = [(f"{where}/{c['name']}", c) for where, t in _pod_templates(cluster)
           for c in _containers(t)]
    out += [(f"submitter/{c['name']}", c) for c in _containers(job["spec"]["submitterPodTemplate"])]
    return out


def ray_start_resources(params: Mapping[str, str]) -> dict[str, float]:
    """The custom resources a group's node offers. KubeRay writes ``--resources=<value>``
    verbatim into the ``ray start`` command line its container runs in a shell, so the
    value is read here the way that shell reads it."""
    raw = params.get("resources")
    if raw is None:
        return {}
    words = shlex.split(f"--resources={raw}")
    if len(words) != 1:
        raise ValueError(f"--resources={raw} is {len(words)} words in the shell, not 1")
    parsed = json.loads(words[0].removeprefix("--resources="))
    assert isinstance(parsed, dict), f"--resources is not a JSON object: {raw!r}"
    return {str(k): float(v) for k, v in parsed.items()}


def _mounts_of_volume(template: Doc, volume: str) -> list[str]:
    return [m["mountPath"] for c in _containers(template)
            for m in c.get("volumeMounts", []) if m["name"] == volume]


def _claims(template: Doc) -> dict[str, str]:
    """Volume name -> PersistentVolumeClaim name, for the pod's claim volumes."""
    return {v["name"]: v["persistentVolumeClaim"]["claimName"]
            for v in template["spec"].get("volumes", []) if "persistentVolumeClaim" in v}


def _shard_map_from(configmap: Doc, folder: Path) -> ShardMap:
    path = folder / SHARDS_KEY
    path.write_text(configmap["data"][SHARDS_KEY], encoding="utf-8")
    return load_shard_map(path)


@pytest.fixture(scope="module")
def shard_map(tmp_path_factory: pytest.TempPathFactory) -> ShardMap:
    return _shard_map_from(_one("ConfigMap"), tmp_path_factory.mktemp("shards"))


# ----------------------------------------------------------------------- cross-checks


def shard_problems(shards: ShardMap, cluster: Doc, pvcs: list[Doc]) -> list[str]:
    """Each shard: exactly one worker group offers its resource; that group is one pod
    (replicas = min = max = 1), mounts that shard's own claim at the folder of the shard's
    path, and the claim is in pvcs.yaml. The head offers no shard and mounts no claim."""
    problems: list[str] = []
    groups = _groups(cluster)
    pvc_names = {p["metadata"]["name"] for p in pvcs}
    head = cluster["spec"]["headGroupSpec"]
    head_res = ray_start_resources(head.get("rayStartParams", {}))
    if len(groups) != len(shards.shards):
        problems.append(f"{len(groups)} worker groups for {len(shards.shards)} shards")
    claimed: dict[str, str] = {}
    for g in groups:
        for claim in _claims(g["template"]).values():
            if claim in claimed:
                problems.append(f"claim {claim} is mounted by {claimed[claim]} and "
                                f"{g['groupName']}")
            claimed[claim] = g["groupName"]
    if _claims(head["template"]):
        problems.append("the head mounts a PersistentVolumeClaim: no shard lives there")
    for shard in shards.shards:
        if shard.resource is None:
            problems.append(f"shard {shard.name} has no resource: its writer is not pinned")
            continue
        if shard.resource in head_res:
            problems.append(f"the head offers {shard.resource}")
        owners = [g for g in groups
                  if shard.resource in ray_start_resources(g.get("rayStartParams", {}))]
        if len(owners) != 1:
            problems.append(f"shard {shard.name}: {len(owners)} worker groups offer "
                            f"{shard.resource}, not 1")
            continue
        (group,) = owners
        name = group["groupName"]
        offered = ray_start_resources(group.get("rayStartParams", {}))
        if offered.get(shard.resource, 0) < shard.pin.get(shard.resource, 0):
            problems.append(f"{name} offers less {shard.resource} than a pinned actor needs")
        others = [r for r in offered if r != shard.resource and r.startswith("surfacelog_")]
        if others:
            problems.append(f"{name} offers other shards' resources too: {others}")
        counts = (group.get("replicas"), group.get("minReplicas"), group.get("maxReplicas"))
        if counts != (1, 1, 1):
            problems.append(f"{name}: replicas/minReplicas/maxReplicas are {counts}, not 1/1/1")
        folder = str(PurePosixPath(shard.path).parent)
        claims = _claims(group["template"])
        at_folder = [claim for volume, claim in claims.items()
                     if folder in _mounts_of_volume(group["template"], volume)]
        if len(at_folder) != 1:
            problems.append(f"{name}: {len(at_folder)} claims mounted at {folder} (the "
                            f"folder of {shard.path}), not 1")
            continue
        (claim,) = at_folder
        if claim not in pvc_names:
            problems.append(f"{name} mounts claim {claim}, which pvcs.yaml does not define")
    unused = pvc_names - set(claimed)
    if unused:
        problems.append(f"claims no shard group mounts: {sorted(unused)}")
    return problems


def config_mount_problems(configmap: Doc, cluster: Doc) -> list[str]:
    """Every Ray pod mounts the shard ConfigMap at CONFIG_MOUNT, with its shards.json."""
    problems: list[str] = []
    name = configmap["metadata"]["name"]
    for where, template in _pod_templates(cluster):
        volumes = [v for v in template["spec"].get("volumes", [])
                   if v.get("configMap", {}).get("name") == name]
        mounted = [m for v in volumes for m in _mounts_of_volume(template, v["name"])]
        if len(volumes) != 1 or len(mounted) != len(_containers(template)) \
                or set(mounted) != {CONFIG_MOUNT}:
            problems.append(f"{where}: ConfigMap {name} is not mounted at {CONFIG_MOUNT} in "
                            f"every container (mounts: {mounted})")
        for v in volumes:
            items = v["configMap"].get("items")
            if items is not None and SHARDS_KEY not in {i["path"] for i in items}:
                problems.append(f"{where}: the ConfigMap volume leaves out {SHARDS_KEY}")
    return problems


def auth_problems(containers: list[tuple[str, Doc]], secret: str, key: str) -> list[str]:
    """Every Ray container: RAY_AUTH_MODE=token, RAY_AUTH_TOKEN from the Secret only."""
    problems: list[str] = []
    for where, c in containers:
        env = {e["name"]: e for e in c.get("env", [])}
        mode = env.get("RAY_AUTH_MODE", {})
        if mode.get("value") != "token" or "valueFrom" in mode:
            problems.append(f"{where}: RAY_AUTH_MODE is not the literal 'token'")
        token = env.get("RAY_AUTH_TOKEN")
        if token is None:
            problems.append(f"{where}: no RAY_AUTH_TOKEN")
            continue
        if "value" in token:
            problems.append(f"{where}: RAY_AUTH_TOKEN has a literal value in the manifest")
        ref = token.get("valueFrom", {}).get("secretKeyRef", {})
        if (ref.get("name"), ref.get("key")) != (secret, key):
            problems.append(f"{where}: RAY_AUTH_TOKEN is not secretKeyRef {secret}/{key}")
        if ref.get("optional"):
            problems.append(f"{where}: the token's secretKeyRef is optional")
    return problems


def _walk(value: object) -> Iterator[object]:
    yield value
    if isinstance(value, dict):
        for item in value.values():
            yield from _walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from _walk(item)


_CPU: Final = re.compile(r"(\d+(?:\.\d+)?)(m?)")
_MEM: Final = re.compile(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?")
_MEM_UNITS: Final = {None: 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
                     "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def _quantity(resource: str, text: object) -> float:
    value = str(text)
    if resource == "cpu":
        m = _CPU.fullmatch(value)
        assert m, f"cpu quantity {value!r}"
        return float(m[1]) / (1000 if m[2] else 1)
    m = _MEM.fullmatch(value)
    assert m, f"memory quantity {value!r}"
    return float(m[1]) * _MEM_UNITS[m[2]]


def resource_problems(containers: list[tuple[str, Doc]]) -> list[str]:
    problems: list[str] = []
    for where, c in containers:
        res = c.get("resources", {})
        for resource in ("cpu", "memory"):
            req = res.get("requests", {}).get(resource)
            lim = res.get("limits", {}).get(resource)
            if req is None or lim is None:
                problems.append(f"{where}: {resource} request or limit missing")
            elif _quantity(resource, req) > _quantity(resource, lim):
                problems.append(f"{where}: {resource} request {req} above limit {lim}")
    return problems


def operator_problems(cluster: Doc, job: Doc) -> list[str]:
    """Rules KubeRay's operator enforces that are not in the CRD schema
    (ValidateRayClusterSpec / ValidateRayJobSpec and the metadata checks)."""
    problems: list[str] = []
    spec = cluster["spec"]
    for doc in (cluster, job):
        name = doc["metadata"]["name"]
        if not DNS1035.fullmatch(name) or len(name) > 63:
            problems.append(f"{doc['kind']} name {name!r} is not a DNS-1035 label")
    groups = _groups(cluster)
    names = [g["groupName"] for g in groups]
    if len(set(names)) != len(names):
        problems.append(f"duplicate worker group names: {names}")
    for where, group in [("head", spec["headGroupSpec"]), *((g["groupName"], g) for g in groups)]:
        if not _containers(group["template"]):
            problems.append(f"{where}: no container")
        params = group.get("rayStartParams", {})
        if "labels" in params:
            problems.append(f"{where}: rayStartParams['labels'] is refused")
        if group.get("resources") and any(params.get(k) for k in
                                          ("num-cpus", "num-gpus", "memory", "resources")):
            problems.append(f"{where}: resources in both rayStartParams and resources")
    for g in groups:
        name = g["groupName"]
        if not DNS1123_LABEL.fullmatch(name) or len(name) > 63:
            problems.append(f"group name {name!r} is not a DNS label")
        lo, hi = g.get("minReplicas"), g.get("maxReplicas")
        if lo is None or hi is None:
            if not spec.get("enableInTreeAutoscaling"):
                problems.append(f"{name}: minReplicas and maxReplicas are required without "
                                "autoscaling")
        elif not lo <= g.get("replicas", lo) <= hi:
            problems.append(f"{name}: replicas outside [minReplicas, maxReplicas]")
    auth = spec.get("authOptions", {})
    if auth.get("mode") == "token":
        version = spec.get("rayVersion")
        if version is None or _version(version) < MIN_RAY_FOR_TOKEN_AUTH:
            problems.append(f"token auth needs rayVersion >= 2.52.0, not {version!r}")
    js = job["spec"]
    selector = js.get("clusterSelector", {})
    if selector:
        if selector.get("ray.io/cluster") != cluster["metadata"]["name"]:
            problems.append(f"clusterSelector {selector} does not name the RayCluster "
                            f"{cluster['metadata']['name']!r}")
        if js.get("submissionMode") == "SidecarMode":
            problems.append("SidecarMode is refused with clusterSelector")
        if js.get("backoffLimit", 0) > 0:
            problems.append("backoffLimit > 0 is refused with clusterSelector")
        if js.get("suspend"):
            problems.append("suspend is refused with clusterSelector")
        if "rayClusterSpec" in js:
            problems.append("clusterSelector and rayClusterSpec are both set")
    elif "rayClusterSpec" not in js:
        problems.append("the RayJob has neither clusterSelector nor rayClusterSpec")
    if not js.get("shutdownAfterJobFinishes") and js.get("ttlSecondsAfterFinished", 0) > 0:
        problems.append("ttlSecondsAfterFinished without shutdownAfterJobFinishes")
    return problems


def _options(argv: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        assert arg.startswith("--"), f"unexpected argument {arg!r} in {argv}"
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out[arg] = argv[i + 1]
            i += 2
        else:
            out[arg] = None
            i += 1
    return out


def entrypoint_problems(job: Doc, cluster: Doc, configmap: Doc) -> list[str]:
    """The RayJob runs the issue's load run, reading shards.json where the head (which
    runs the entrypoint) mounts the ConfigMap."""
    argv = shlex.split(job["spec"]["entrypoint"])
    if argv[:2] != ["surfacelog", "run"]:
        return [f"the entrypoint is not `surfacelog run`: {argv}"]
    opts = _options(argv[2:])
    problems: list[str] = []
    expected: dict[str, str | None] = {"--address": "auto", "--sessions": "500",
                                       "--turns": "10", "--json": None}
    for opt, value in expected.items():
        if opt not in opts or opts[opt] != value:
            problems.append(f"entrypoint: {opt} is {opts.get(opt, '<missing>')!r}, not {value!r}")
    shards = opts.get("--shard-map")
    if shards is None:
        return [*problems, "entrypoint: no --shard-map"]
    path = PurePosixPath(shards)
    head = cluster["spec"]["headGroupSpec"]["template"]
    cm_volumes = [v["name"] for v in head["spec"].get("volumes", [])
                  if v.get("configMap", {}).get("name") == configmap["metadata"]["name"]]
    head_mounts = {m for v in cm_volumes for m in _mounts_of_volume(head, v)}
    if str(path.parent) not in head_mounts:
        problems.append(f"entrypoint reads {shards}, but the head mounts the ConfigMap at "
                        f"{sorted(head_mounts)}")
    if path.name not in configmap["data"]:
        problems.append(f"entrypoint reads {path.name}, which the ConfigMap does not hold")
    return problems


# ------------------------------------------------------- Dockerfile, README, image tag


def _build_command_image(text: str) -> str | None:
    m = re.search(r"docker build -f deploy/Dockerfile -t (\S+) \.", text)
    return m[1] if m else None


def _from_ray_version(dockerfile: str) -> str:
    (line,) = [ln for ln in dockerfile.splitlines() if ln.startswith("FROM ")]
    m = re.fullmatch(r"FROM rayproject/ray:(\d+\.\d+\.\d+)-py311", line.strip())
    assert m, f"the base image is not an official rayproject/ray:<version>-py311: {line!r}"
    return m[1]


def _pyproject_value(pattern: str) -> str:
    m = re.search(pattern, _text(ROOT / "pyproject.toml"), re.MULTILINE)
    assert m, f"pyproject.toml has no match for {pattern}"
    return m[1]


def _secret_command(readme: str) -> tuple[str, str]:
    m = re.search(r"kubectl create secret generic (\S+)\s+--from-file=(\w+)=", readme)
    assert m, "deploy/README.md shows no `kubectl create secret generic NAME --from-file=KEY=`"
    return m[1], m[2]


def _dockerignore_regex(pattern: str) -> re.Pattern[str]:
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def docker_ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern matching the path, or one of its parent folders,
    decides; a leading ``!`` re-includes."""
    parts = path.split("/")
    candidates = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    ignored = False
    for raw in patterns:
        negated = raw.startswith("!")
        regex = _dockerignore_regex(raw.removeprefix("!").strip("/"))
        if any(regex.fullmatch(c) for c in candidates):
            ignored = not negated
    return ignored


def _dockerignore() -> list[str]:
    lines = _text(ROOT / ".dockerignore").splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]


# ====================================================================== the tests


def test_the_manifests_are_the_expected_files_and_kinds() -> None:
    names = {p.name for p in KUBERAY.glob("*.yaml")}
    assert names == set(MANIFEST_FILES)
    kinds = sorted(d["kind"] for _, d in _manifests())
    assert kinds == ["ConfigMap", "PersistentVolumeClaim", "PersistentVolumeClaim",
                     "PersistentVolumeClaim", "RayCluster", "RayJob"]


@pytest.mark.parametrize("entry", [e for e in _manifests() if e[1]["kind"] in CRD_FILES],
                         ids=_doc_id)
def test_ray_resources_validate_against_the_kuberay_crds(
        entry: tuple[str, Doc], crds: dict[str, Crd]) -> None:
    _, doc = entry
    assert crd_problems(doc, crds[doc["kind"]]) == []


@pytest.mark.parametrize("entry", [e for e in _manifests() if e[1]["kind"] not in CRD_FILES],
                         ids=_doc_id)
def test_core_objects_validate_with_kubernetes_validate(entry: tuple[str, Doc]) -> None:
    assert k8s_problems(entry[1]) == []


def test_pod_templates_inside_the_ray_resources_validate_as_core_pod_templates() -> None:
    cluster, job = _one("RayCluster"), _one("RayJob")
    templates = [*_pod_templates(cluster), ("submitter", job["spec"]["submitterPodTemplate"])]
    for where, template in templates:
        assert k8s_problems(_as_pod_template(template, where)) == [], where


_CRD_BREAKS: Final[dict[str, tuple[str, Callable[[Doc], None], str]]] = {
    "replicas not an integer": (
        "RayCluster", lambda d: d["spec"]["workerGroupSpecs"][0].update(replicas="one"),
        "is not of type 'integer'"),
    "required groupName missing": (
        "RayCluster", lambda d: d["spec"]["workerGroupSpecs"][1].pop("groupName"),
        "'groupName' is a required property"),
    "memory not a quantity": (
        "RayCluster",
        lambda d: d["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
        ["resources"]["limits"].update(memory="4GB"),
        "does not match"),
    "auth mode outside the enum": (
        "RayCluster", lambda d: d["spec"]["authOptions"].update(mode="password"),
        "is not one of"),
    "misspelt field the server would prune": (
        "RayCluster", lambda d: d["spec"]["workerGroupSpecs"][2].update(replica=1),
        "unknown field (pruned) .spec.workerGroupSpecs[2].replica"),
    "wrong apiVersion": (
        "RayCluster", lambda d: d.update(apiVersion="ray.io/v2"),
        "apiVersion 'ray.io/v2' is not 'ray.io/v1'"),
    "entrypoint not a string": (
        "RayJob", lambda d: d["spec"].update(entrypoint=["surfacelog", "run"]),
        "is not of type 'string'"),
    "misspelt env in the submitter": (
        "RayJob",
        lambda d: d["spec"]["submitterPodTemplate"]["spec"]["containers"][0].update(envs=[]),
        "unknown field (pruned) .spec.submitterPodTemplate.spec.containers[0].envs"),
}


@pytest.mark.parametrize("case", list(_CRD_BREAKS))
def test_a_broken_ray_resource_is_rejected(case: str, crds: dict[str, Crd]) -> None:
    kind, mutate, expected = _CRD_BREAKS[case]
    doc = _one(kind)
    assert crd_problems(doc, crds[kind]) == []
    mutate(doc)
    problems = crd_problems(doc, crds[kind])
    assert any(expected in p for p in problems), problems


_K8S_BREAKS: Final[dict[str, tuple[str, Callable[[Doc], None]]]] = {
    "accessModes not a list": (
        "PersistentVolumeClaim", lambda d: d["spec"].update(accessModes="ReadWriteOnce")),
    "unknown field under strict": (
        "PersistentVolumeClaim", lambda d: d["spec"].update(storageClass="fast")),
    "ConfigMap value not a string": (
        "ConfigMap", lambda d: d["data"].update(shards=3)),
}


@pytest.mark.parametrize("case", list(_K8S_BREAKS))
def test_a_broken_core_object_is_rejected(case: str) -> None:
    kind, mutate = _K8S_BREAKS[case]
    doc = _docs(kind)[0]
    assert k8s_problems(doc) == []
    mutate(doc)
    assert k8s_problems(doc) != []


def test_the_configmap_holds_a_valid_shard_map_of_three_pinned_shards(
        shard_map: ShardMap) -> None:
    assert shard_map.names == ("s0", "s1", "s2")
    for shard in shard_map.shards:
        assert PurePosixPath(shard.path).is_absolute(), shard.path
        assert shard.resource == default_resource(shard.name)
    folders = [str(PurePosixPath(s.path).parent) for s in shard_map.shards]
    assert len(set(folders)) == len(folders), "two shards share a volume folder"


def test_each_shard_has_one_worker_group_with_its_resource_and_its_own_claim(
        shard_map: ShardMap) -> None:
    assert shard_problems(shard_map, _one("RayCluster"), _docs("PersistentVolumeClaim")) == []


def _break_resource(cluster: Doc) -> None:
    cluster["spec"]["workerGroupSpecs"][1]["rayStartParams"]["resources"] = \
        '"{\\"surfacelog_shard_s0\\": 1}"'


def _break_mount(cluster: Doc) -> None:
    container = cluster["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    container["volumeMounts"][0]["mountPath"] = "/data"


def _break_claim(cluster: Doc) -> None:
    volumes = cluster["spec"]["workerGroupSpecs"][2]["template"]["spec"]["volumes"]
    volumes[0]["persistentVolumeClaim"]["claimName"] = "surfacelog-s9"


def _break_replicas(cluster: Doc) -> None:
    cluster["spec"]["workerGroupSpecs"][0]["maxReplicas"] = 2


def _break_head(cluster: Doc) -> None:
    cluster["spec"]["headGroupSpec"]["rayStartParams"]["resources"] = \
        '"{\\"surfacelog_shard_s2\\": 1}"'


@pytest.mark.parametrize(("mutate", "expected"), [
    (_break_resource, "shard s0: 2 worker groups offer surfacelog_shard_s0"),
    (_break_resource, "shard s1: 0 worker groups offer surfacelog_shard_s1"),
    (_break_mount, "shard-s0: 0 claims mounted at /data/s0"),
    (_break_claim, "mounts claim surfacelog-s9, which pvcs.yaml does not define"),
    (_break_replicas, "shard-s0: replicas/minReplicas/maxReplicas are (1, 1, 2)"),
    (_break_head, "the head offers surfacelog_shard_s2"),
])
def test_a_shard_layout_error_is_found(shard_map: ShardMap, mutate: Callable[[Doc], None],
                                       expected: str) -> None:
    cluster = _one("RayCluster")
    mutate(cluster)
    problems = shard_problems(shard_map, cluster, _docs("PersistentVolumeClaim"))
    assert any(expected in p for p in problems), problems


def test_resources_are_read_the_way_the_ray_start_shell_reads_them() -> None:
    assert ray_start_resources({"resources": '"{\\"surfacelog_shard_s0\\": 1}"'}) == \
        {"surfacelog_shard_s0": 1.0}
    assert ray_start_resources({"num-cpus": "0"}) == {}
    # Not quoted for the shell: it splits the value at the space, or eats the JSON quotes.
    with pytest.raises(ValueError, match="2 words"):
        ray_start_resources({"resources": '{"surfacelog_shard_s0": 1}'})
    with pytest.raises(json.JSONDecodeError):
        ray_start_resources({"resources": '{"surfacelog_shard_s0":1}'})


def test_the_claims_are_read_write_once_with_a_storage_class_and_a_size() -> None:
    pvcs = _docs("PersistentVolumeClaim")
    classes = {p["spec"].get("storageClassName") for p in pvcs}
    assert len(classes) == 1 and None not in classes, classes
    (storage_class,) = classes
    assert storage_class in _text(KUBERAY / "pvcs.yaml").split("PLACEHOLDER", 1)[1]
    assert storage_class in _text(DEPLOY / "README.md")
    for pvc in pvcs:
        assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]
        assert _quantity("memory", pvc["spec"]["resources"]["requests"]["storage"]) >= 2**30


def test_every_ray_pod_mounts_the_shard_configmap() -> None:
    assert config_mount_problems(_one("ConfigMap"), _one("RayCluster")) == []
    cluster = _one("RayCluster")
    del cluster["spec"]["workerGroupSpecs"][1]["template"]["spec"]["containers"][0][
        "volumeMounts"][1]
    assert config_mount_problems(_one("ConfigMap"), cluster) != []


def test_the_rayjob_runs_the_load_run_with_the_mounted_shard_config() -> None:
    job, cluster, configmap = _one("RayJob"), _one("RayCluster"), _one("ConfigMap")
    assert entrypoint_problems(job, cluster, configmap) == []
    job["spec"]["entrypoint"] = job["spec"]["entrypoint"].replace(
        "/etc/surfacelog/shards.json", "/etc/shards/shards.json")
    assert any("the head mounts the ConfigMap at" in p
               for p in entrypoint_problems(job, cluster, configmap))


def test_kuberay_operator_rules_hold() -> None:
    cluster, job = _one("RayCluster"), _one("RayJob")
    assert operator_problems(cluster, job) == []
    assert job["spec"]["submissionMode"] == "K8sJobMode"
    assert not job["spec"].get("shutdownAfterJobFinishes"), "would delete the shared cluster"
    job["spec"]["clusterSelector"]["ray.io/cluster"] = "other"
    job["spec"]["backoffLimit"] = 1
    cluster["spec"]["rayVersion"] = "2.51.0"
    problems = operator_problems(cluster, job)
    assert any("does not name the RayCluster" in p for p in problems), problems
    assert any("backoffLimit" in p for p in problems), problems
    assert any("rayVersion >= 2.52.0" in p for p in problems), problems


def test_every_ray_container_gets_the_token_from_the_secret_and_none_is_written() -> None:
    cluster, job = _one("RayCluster"), _one("RayJob")
    secret, key = _secret_command(_text(DEPLOY / "README.md"))
    assert cluster["spec"]["authOptions"] == {"mode": "token", "secretName": secret}
    containers = _ray_containers(cluster, job)
    assert len(containers) == 2 + len(_groups(cluster))
    assert auth_problems(containers, secret, key) == []
    # No Secret manifest, and no literal token value anywhere under deploy/.
    docs = [d for _, d in _manifests()] + _load_all(DEPLOY / "ray-cluster.yaml")
    assert not [d for d in docs if d.get("kind") == "Secret"]
    for node in (n for d in docs for n in _walk(d)):
        if isinstance(node, dict) and node.get("name") == "RAY_AUTH_TOKEN":
            assert "value" not in node, node
    assert "RAY_AUTH_TOKEN=" not in _text(DEPLOY / "ray-cluster.yaml")


def test_a_container_without_the_secret_token_is_found() -> None:
    cluster, job = _one("RayCluster"), _one("RayJob")
    secret, key = _secret_command(_text(DEPLOY / "README.md"))
    head = cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    head["env"] = [e for e in head["env"] if e["name"] != "RAY_AUTH_TOKEN"]
    submitter = job["spec"]["submitterPodTemplate"]["spec"]["containers"][0]
    submitter["env"][1] = {"name": "RAY_AUTH_TOKEN", "value": "abc"}
    problems = auth_problems(_ray_containers(cluster, job), secret, key)
    assert "head/ray-head: no RAY_AUTH_TOKEN" in problems
    assert any("literal value" in p for p in problems), problems


def test_every_container_has_cpu_and_memory_requests_and_limits() -> None:
    containers = _ray_containers(_one("RayCluster"), _one("RayJob"))
    assert resource_problems(containers) == []
    name, first = containers[0]
    del first["resources"]["limits"]["memory"]
    assert resource_problems([(name, first)]) == [f"{name}: memory request or limit missing"]


def test_the_head_takes_no_actors_and_its_dashboard_stays_inside_the_cluster() -> None:
    head = _one("RayCluster")["spec"]["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "0"
    assert head.get("serviceType", "ClusterIP") == "ClusterIP"
    assert not head.get("enableIngress", False)
    assert head.get("headService", {}).get("spec", {}).get("type", "ClusterIP") == "ClusterIP"
    assert not [d for _, d in _manifests() if d["kind"] in ("Service", "Ingress")]


def test_one_image_everywhere_built_from_the_ray_version_of_the_cluster() -> None:
    dockerfile = _text(DEPLOY / "Dockerfile")
    image = _build_command_image(dockerfile)
    assert image is not None, "deploy/Dockerfile names no `docker build ... -t IMAGE .`"
    assert _build_command_image(_text(DEPLOY / "README.md")) == image
    cluster, job = _one("RayCluster"), _one("RayJob")
    images = {c["image"] for _, c in _ray_containers(cluster, job)}
    assert images == {image}
    assert image.rsplit(":", 1)[1] == _pyproject_value(r'^version = "([^"]+)"')
    ray_version = _from_ray_version(dockerfile)
    assert cluster["spec"]["rayVersion"] == ray_version
    assert f"ray.__version__ == '{ray_version}'" in dockerfile
    assert _version(ray_version) >= _version(_pyproject_value(r'"ray>=([\d.]+)"'))
    assert _version(ray_version) >= MIN_RAY_FOR_TOKEN_AUTH


def test_the_dockerfile_copies_what_the_package_build_needs_and_dockerignore_keeps_it() -> None:
    patterns = _dockerignore()
    copies = [shlex.split(ln)[1:] for ln in _text(DEPLOY / "Dockerfile").splitlines()
              if ln.startswith("COPY ")]
    sources = [a.rstrip("/") for args in copies for a in args[:-1] if not a.startswith("--")]
    readme = _pyproject_value(r'^readme = "([^"]+)"')
    assert {"pyproject.toml", readme, "surfacelog"} <= set(sources)
    for source in sources:
        assert (ROOT / source).exists(), source
        assert not docker_ignored(source, patterns), source
    package = [p.relative_to(ROOT).as_posix() for p in (ROOT / "surfacelog").rglob("*")
               if p.is_file() and "__pycache__" not in p.parts]
    assert "surfacelog/py.typed" in package and "surfacelog/store/sqlite/schema.sql" in package
    assert [p for p in package if docker_ignored(p, patterns)] == []
    for outside in (".venv/bin/python", "tests/cluster/test_deploy_manifests.py",
                    "benchmarks/bench_surface.py",
                    ".git/config", "surfacelog.db", "surfacelog/__pycache__/cli.cpython-311.pyc",
                    "surfacelog/store/x.db-wal"):
        assert docker_ignored(outside, patterns), outside


def test_the_readme_names_every_manifest_and_only_existing_files() -> None:
    readme = _text(DEPLOY / "README.md")
    named = set(re.findall(r"deploy/kuberay/([\w.-]+\.yaml)", readme))
    assert named == set(MANIFEST_FILES)
    for path in re.findall(r"\bdeploy/[\w./-]+\.(?:yaml|json|md)\b|deploy/Dockerfile", readme):
        assert (ROOT / path).exists(), path
    assert "kubernetes-validate" in readme and K8S_VERSION in readme


# ------------------------------------------------------------- bare metal: ray up


@pytest.fixture(scope="module")
def launcher() -> Doc:
    (config,) = _load_all(DEPLOY / "ray-cluster.yaml")
    assert isinstance(config, dict)
    return config


def test_the_launcher_config_passes_rays_own_preparation_and_validation(launcher: Doc) -> None:
    # What `ray up` does with the file before anything else: fill in the local provider's
    # defaults, then validate against the launcher's schema (ray/autoscaler/ray-schema.json).
    from ray.autoscaler._private.util import prepare_config, validate_config

    validate_config(prepare_config(copy.deepcopy(launcher)))
    broken = copy.deepcopy(launcher)
    broken["worker_start_commands"] = broken.pop("worker_start_ray_commands")
    with pytest.raises(jsonschema.ValidationError):
        validate_config(prepare_config(broken))


def test_the_launcher_has_one_worker_per_bare_metal_shard(launcher: Doc) -> None:
    shards = load_shard_map(DEPLOY / "shards.bare-metal.json")
    workers = launcher["provider"]["worker_ips"]
    assert launcher["provider"]["type"] == "local"
    assert len(workers) == len(set(workers)) == len(shards.shards)
    assert launcher["min_workers"] == launcher["max_workers"] == len(shards.shards)
    for shard in shards.shards:
        # The start command derives the resource from the name on the host.
        assert shard.resource == default_resource(shard.name)
    mounts = launcher["file_mounts"]
    assert mounts["/etc/surfacelog/shards.json"] == "deploy/shards.bare-metal.json"
    assert mounts["~/.ray/auth_token"] == "~/.ray/auth_token"


def _run_commands(commands: list[str], etc: Path, tmp: Path) -> tuple[int, list[list[str]]]:
    """Run ``commands`` as the launcher does (each in its own shell, RAY_HEAD_IP
    exported), with /etc/surfacelog at ``etc`` and ``ray`` a recorder of its calls."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    calls_dir = tmp / "ray-calls"
    calls_dir.mkdir(exist_ok=True)
    for old in calls_dir.iterdir():
        old.unlink()
    stub = bin_dir / "ray"
    stub.write_text('#!/bin/sh\nn=$(( $(ls "$RAY_STUB_DIR" | wc -l) ))\n'
                    'printf \'%s\\0\' "$RAY_AUTH_MODE" "$@" > "$RAY_STUB_DIR/$n"\n',
                    encoding="utf-8")
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "RAY_STUB_DIR": str(calls_dir)}
    env.pop("RAY_AUTH_MODE", None)
    rc = 0
    for command in commands:
        script = "export RAY_HEAD_IP=10.0.0.10; " + command.replace("/etc/surfacelog/",
                                                                     f"{etc}/")
        rc = subprocess.run(["bash", "-c", script], env=env, check=False,
                            capture_output=True).returncode
        if rc:
            break
    files = sorted(calls_dir.iterdir(), key=lambda p: int(p.name))
    return rc, [p.read_text().split("\0")[:-1] for p in files]


def _starts(calls: list[list[str]]) -> list[list[str]]:
    return [c for c in calls if len(c) > 1 and c[1] == "start"]


def test_each_shard_host_starts_with_its_shard_resource_and_the_token_mode(
        launcher: Doc, tmp_path: Path) -> None:
    shards = load_shard_map(DEPLOY / "shards.bare-metal.json")
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "shards.json").write_bytes((DEPLOY / "shards.bare-metal.json").read_bytes())
    for shard in shards.shards:
        (etc / "shard").write_text(shard.name + "\n")
        rc, calls = _run_commands(launcher["worker_start_ray_commands"], etc, tmp_path)
        assert rc == 0
        (start,) = _starts(calls)
        assert start[0] == "token", "ray start without RAY_AUTH_MODE=token"
        opts = dict(a.split("=", 1) for a in start[2:])
        assert opts["--address"] == "10.0.0.10:6379"
        assert json.loads(opts["--resources"]) == {shard.resource: 1}


@pytest.mark.parametrize("marker", [None, "", "s9"])
def test_a_host_without_a_valid_shard_marker_does_not_join(
        launcher: Doc, tmp_path: Path, marker: str | None) -> None:
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "shards.json").write_bytes((DEPLOY / "shards.bare-metal.json").read_bytes())
    if marker is not None:
        (etc / "shard").write_text(marker)
    rc, calls = _run_commands(launcher["worker_start_ray_commands"], etc, tmp_path)
    assert rc != 0
    assert _starts(calls) == []


def test_the_head_starts_with_the_token_mode_no_cpus_and_no_shard(
        launcher: Doc, tmp_path: Path) -> None:
    rc, calls = _run_commands(launcher["head_start_ray_commands"], tmp_path, tmp_path)
    assert rc == 0
    (start,) = _starts(calls)
    assert start[0] == "token"
    assert "--head" in start and "--num-cpus=0" in start
    assert not [a for a in start if a.startswith("--resources")]


# -- Litestream replicas (issue 17) ---------------------------------------------------------

REPLICA_SECRET = "surfacelog-replica-s3"
REPLICA_ENV = {"AWS_ACCESS_KEY_ID": "access_key_id",
               "AWS_SECRET_ACCESS_KEY": "secret_access_key"}


def replica_problems(shards: ShardMap, cluster: Doc) -> list[str]:
    """Every shard names an object-store replica of its own, and the worker group that
    offers its resource (where its writer and Litestream run) gets the replica's
    credentials from the Secret only, never as a literal value."""
    problems: list[str] = []
    seen: dict[str, str] = {}
    for shard in shards.shards:
        if shard.replica is None:
            problems.append(f"shard {shard.name} has no replica")
            continue
        if not shard.replica.startswith("s3://"):
            problems.append(f"shard {shard.name}: replica {shard.replica!r} is not an s3:// URL")
        if shard.replica in seen:
            problems.append(f"shards {seen[shard.replica]} and {shard.name} share a replica")
        seen[shard.replica] = shard.name
        groups = [g for g in _groups(cluster) if shard.resource in
                  ray_start_resources(g.get("rayStartParams", {}))]
        for group in groups:
            for c in _containers(group["template"]):
                env = {e["name"]: e for e in c.get("env", [])}
                for name, key in REPLICA_ENV.items():
                    ref = env.get(name, {}).get("valueFrom", {}).get("secretKeyRef", {})
                    if "value" in env.get(name, {}) or \
                            (ref.get("name"), ref.get("key")) != (REPLICA_SECRET, key):
                        problems.append(f"{group['groupName']}/{c['name']}: {name} is not "
                                        f"secretKeyRef {REPLICA_SECRET}/{key}")
                    elif ref.get("optional") is not True:
                        # A missing Secret would hold the pod in CreateContainerConfigError.
                        problems.append(f"{group['groupName']}/{c['name']}: {name}'s "
                                        f"secretKeyRef {REPLICA_SECRET} is not optional")
    return problems


def test_every_shard_is_replicated_with_credentials_from_the_secret(
        shard_map: ShardMap) -> None:
    assert replica_problems(shard_map, _one("RayCluster")) == []
    bare = load_shard_map(DEPLOY / "shards.bare-metal.json")
    assert all(s.replica is not None and s.replica.startswith("s3://") for s in bare.shards)
    assert len({s.replica for s in bare.shards}) == len(bare.shards)
    readme = _text(DEPLOY / "README.md")
    assert f"kubectl create secret generic {REPLICA_SECRET}" in readme
    for key in REPLICA_ENV.values():
        assert f"--from-literal={key}=" in readme


def test_a_replica_mistake_is_found(shard_map: ShardMap) -> None:
    cluster = _one("RayCluster")
    container = cluster["spec"]["workerGroupSpecs"][1]["template"]["spec"]["containers"][0]
    container["env"] = [e for e in container["env"] if e["name"] != "AWS_SECRET_ACCESS_KEY"]
    container["env"].append({"name": "AWS_SECRET_ACCESS_KEY", "value": "literal"})
    shared = ShardMap(tuple(msgspec.structs.replace(s, replica="s3://b/one")
                            for s in shard_map.shards))
    problems = replica_problems(shard_map, cluster) + replica_problems(shared, _one("RayCluster"))
    assert any("shard-s1/ray-worker: AWS_SECRET_ACCESS_KEY" in p for p in problems), problems
    assert any("share a replica" in p for p in problems), problems
    required = _one("RayCluster")
    worker = required["spec"]["workerGroupSpecs"][2]["template"]["spec"]["containers"][0]
    for entry in worker["env"]:
        entry.get("valueFrom", {}).get("secretKeyRef", {}).pop("optional", None)
    assert "shard-s2/ray-worker: AWS_ACCESS_KEY_ID's secretKeyRef surfacelog-replica-s3 " \
        "is not optional" in replica_problems(shard_map, required)


def test_pods_start_without_the_replica_secret() -> None:
    """Every reference to the replica Secret is optional (else, without that Secret, the
    shard pods sit in CreateContainerConfigError), and only the token's is required:
    the one Secret every deployment creates."""
    cluster, job = _one("RayCluster"), _one("RayJob")
    refs = [(where, ref) for where, c in _ray_containers(cluster, job)
            for e in c.get("env", []) for ref in [e.get("valueFrom", {}).get("secretKeyRef")]
            if ref is not None]
    required = {ref["name"] for _, ref in refs if not ref.get("optional")}
    assert required == {_secret_command(_text(DEPLOY / "README.md"))[0]}
    replica_refs = [where for where, ref in refs if ref["name"] == REPLICA_SECRET]
    assert len(replica_refs) == 2 * len(_groups(cluster))


# -- /dev/shm, the image's extras, the load job's command (issue 26) --------------------


def shm_problems(cluster: Doc) -> list[str]:
    """Every Ray pod (head and workers) mounts a memory-backed emptyDir at /dev/shm in
    each container, sized within the container's memory limit: Ray's object store lives
    there, and a container's own /dev/shm (64 MiB) would send it to disk."""
    problems: list[str] = []
    for where, template in _pod_templates(cluster):
        memory = [v for v in template["spec"].get("volumes", [])
                  if v.get("emptyDir", {}).get("medium") == "Memory"]
        for c in _containers(template):
            mounted = [v for v in memory if "/dev/shm" in [
                m["mountPath"] for m in c.get("volumeMounts", []) if m["name"] == v["name"]]]
            if len(mounted) != 1:
                problems.append(f"{where}/{c['name']}: {len(mounted)} memory-backed "
                                "emptyDir volumes at /dev/shm, not 1")
                continue
            size = mounted[0]["emptyDir"].get("sizeLimit")
            limit = c.get("resources", {}).get("limits", {}).get("memory")
            if size is None or limit is None or \
                    _quantity("memory", size) >= _quantity("memory", limit):
                problems.append(f"{where}/{c['name']}: /dev/shm sizeLimit {size} is not "
                                f"below the memory limit {limit}")
    return problems


def test_every_ray_pod_has_a_memory_backed_dev_shm() -> None:
    assert shm_problems(_one("RayCluster")) == []
    cluster = _one("RayCluster")
    head = cluster["spec"]["headGroupSpec"]["template"]["spec"]
    head["volumes"] = [v for v in head["volumes"] if "emptyDir" not in v]
    worker = cluster["spec"]["workerGroupSpecs"][1]["template"]["spec"]
    for volume in worker["volumes"]:
        volume.get("emptyDir", {}).pop("medium", None)
    problems = shm_problems(cluster)
    assert "head/ray-head: 0 memory-backed emptyDir volumes at /dev/shm, not 1" in problems
    assert "shard-s1/ray-worker: 0 memory-backed emptyDir volumes at /dev/shm, not 1" \
        in problems
    assert len(problems) == 2, problems


_PIP_INSTALL: Final = re.compile(r'pip install [^\n]*?"?/tmp/surfacelog-src(?:\[([\w,-]+)\])?"?')


def image_extras(dockerfile: str) -> set[str]:
    """The extras the image's ``pip install`` of the project names."""
    m = _PIP_INSTALL.search(dockerfile)
    assert m, "deploy/Dockerfile does not pip install /tmp/surfacelog-src"
    return set(m[1].split(",")) if m[1] else set()


def _installed_with(extras: set[str]) -> set[str]:
    """The distributions ``pip install .[extras]`` brings, by normalised name: the
    project's dependencies and those of ``extras`` (as the installed project's metadata
    declares them, from pyproject.toml), and theirs, as this environment's installed
    metadata declares them (a dependency's extras included when asked for)."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    todo: list[tuple[Requirement, set[str]]] = [(Requirement("surfacelog"), extras)]
    seen: set[tuple[str, frozenset[str]]] = set()
    names: set[str] = set()
    while todo:
        req, wanted_extras = todo.pop()
        key = (canonicalize_name(req.name), frozenset(wanted_extras))
        if key in seen:
            continue
        seen.add(key)
        names.add(key[0])
        try:
            requires = metadata.requires(req.name) or []
        except metadata.PackageNotFoundError:
            continue
        for text in requires:
            sub = Requirement(text)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e})
                                         for e in ("", *wanted_extras)):
                todo.append((sub, set(sub.extras)))
    names.discard("surfacelog")
    return names


def _third_party_imports(folder: Path) -> set[str]:
    """The top-level modules imported by the Python files of ``folder`` that are neither
    the standard library's nor surfacelog's."""
    import ast
    import sys

    found: set[str] = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return {m for m in found if m not in sys.stdlib_module_names and m != "surfacelog"}


def test_the_image_installs_the_gateway_so_serve_runs_in_it() -> None:
    """``surfacelog serve`` (the gateway) runs in the image: it installs the [gateway]
    extra, whose requirements cover every package the gateway imports, and the build
    fails unless the gateway imports."""
    from importlib import metadata

    from packaging.utils import canonicalize_name

    dockerfile = _text(DEPLOY / "Dockerfile")
    extras = image_extras(dockerfile)
    assert "gateway" in extras, extras
    providers = metadata.packages_distributions()
    imported = {canonicalize_name(dist) for module in
                _third_party_imports(ROOT / "surfacelog" / "gateway")
                for dist in providers.get(module, [module])}
    assert imported - _installed_with(extras) == set()
    # ... which the project alone would not: the test would catch the extra's removal.
    assert {"fastapi", "uvicorn"} <= imported - _installed_with(set())
    assert "import fastapi, uvicorn, surfacelog.gateway.app" in dockerfile
    assert "surfacelog serve --help" in dockerfile
    assert image_extras('RUN pip install --no-cache-dir /tmp/surfacelog-src \\') == set()


def _cli_run_commands(text: str) -> list[list[str]]:
    """Every ``surfacelog run ...`` command line of ``text`` (a shell command, a YAML
    folded entrypoint), as the shell splits it."""
    out = []
    for m in re.finditer(r"surfacelog run (?:[^'`\n]|\n(?!\s*\n))*", text):
        words = shlex.split(m[0].replace("\\\n", " "))
        out.append(words)
    return out


def parsed_run(argv: list[str], map_file: Path, monkeypatch: pytest.MonkeyPatch
               ) -> tuple[int, str, list[Any]]:
    """``argv`` (``surfacelog run ...``) through the real command line, with the
    shard map it names (``--shard-map PATH``, a path of the pods or hosts) replaced by
    ``map_file`` and the run itself replaced by a recorder: its exit status, output, and
    what reached the run."""
    from typer.testing import CliRunner

    from surfacelog.cli import app, run_display

    seen: list[Any] = []
    monkeypatch.setattr(run_display, "run_live", lambda *args: seen.append(args) or 0)
    args = [str(map_file) if k and argv[k] == "--shard-map" else a
            for k, a in enumerate(argv[1:])]
    result = CliRunner().invoke(app, args)
    return result.exit_code, result.output, seen


def test_the_shipped_load_commands_are_accepted_by_surfacelog_run(
        shard_map: ShardMap, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The RayJob's entrypoint and deploy/README.md's bare-metal command go through
    ``surfacelog run``'s real option parsing and reach the run with the shard map they
    name (the ConfigMap's, or the bare-metal one); the same command is what
    tests/cluster/test_run_shard_map.py runs against a real multi-node cluster."""
    config = tmp_path / SHARDS_KEY
    config.write_text(_one("ConfigMap")["data"][SHARDS_KEY], encoding="utf-8")
    (entrypoint,) = _cli_run_commands(_one("RayJob")["spec"]["entrypoint"])
    readme_commands = _cli_run_commands(_text(DEPLOY / "README.md"))
    assert readme_commands, "deploy/README.md shows no `surfacelog run` command"
    bare = tmp_path / "bare" / SHARDS_KEY
    bare.parent.mkdir()
    bare.write_bytes((DEPLOY / "shards.bare-metal.json").read_bytes())
    for argv, map_file, shards in [(entrypoint, config, shard_map),
                                   *((c, bare, load_shard_map(bare)) for c in readme_commands)]:
        status, output, seen = parsed_run(argv, map_file, monkeypatch)
        assert status == 0, (argv, output)
        ((cfg, passed),) = seen
        assert cfg.shard_map == map_file and passed == shards, argv
        # On the head (or a bare-metal head), Ray's own address; in "what was run
        # here", the test cluster's.
        assert cfg.address in ("auto", "ADDRESS"), argv
    # What the old command did: --shards is run's shard count, not a file.
    old = [a.replace("--shard-map", "--shards") for a in entrypoint]
    status, output, seen = parsed_run(old, config, monkeypatch)
    assert status == 2 and seen == [] and "Invalid value for '--shards'" in output
