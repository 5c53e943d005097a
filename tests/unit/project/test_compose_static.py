"""Static checks of docker-compose.yaml and docker-compose.cpu.yaml: no Docker engine needed.

``${VAR:-default}`` interpolations are read with their defaults, which is what
``docker compose up`` uses on a machine without an .env file.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
COMPOSE = REPO / "docker-compose.yaml"
INTERPOLATION = re.compile(r"\$\{(?P<name>[A-Z_][A-Z0-9_]*)(?::-(?P<default>[^}]*))?\}")


def with_defaults(value: str) -> str:
    """A compose string as seen without any environment (every ${VAR} needs a default)."""

    def default(match: re.Match[str]) -> str:
        assert match["default"] is not None, f"{match[0]} has no default"
        return match["default"]

    return INTERPOLATION.sub(default, value)


@pytest.fixture(scope="module")
def compose() -> dict:
    doc = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(doc, dict)
    return doc


@pytest.fixture(scope="module")
def services(compose: dict) -> dict[str, dict]:
    return compose["services"]


def role(service: dict) -> str:
    return service["environment"]["ARGUS_ROLE"]


def mounts(service: dict) -> list[tuple[str, str, str]]:
    """(source, target, options) of every short-syntax volume, defaults filled in."""
    out = []
    for volume in service.get("volumes", []):
        assert isinstance(volume, str), f"use the short volume syntax: {volume!r}"
        source, target, *opts = with_defaults(volume).split(":")
        out.append((source, target, ",".join(opts)))
    return out


def test_one_head_and_at_least_two_workers(services: dict[str, dict]) -> None:
    roles = {name: role(svc) for name, svc in services.items()}
    assert set(roles.values()) <= {"head", "worker"}
    assert roles.get("ray-head") == "head"
    assert list(roles.values()).count("head") == 1
    workers = [name for name, r in roles.items() if r == "worker"]
    assert len(workers) >= 2
    assert {"ray-worker-0", "ray-worker-1"} <= set(workers)


def test_every_node_runs_the_argus_image_and_its_entrypoint(services: dict[str, dict]) -> None:
    images = {svc["image"] for svc in services.values()}
    assert len(images) == 1, f"one image for every node, got {images}"
    for name, svc in services.items():
        assert "command" not in svc, f"{name}: the entrypoint decides what runs"
        assert "entrypoint" not in svc, f"{name}: keep the image's entrypoint"
        assert svc["restart"] == "unless-stopped", name
        assert svc["build"]["dockerfile"] == "images/argus-ray-node/Dockerfile", name
        assert svc.get("shm_size"), f"{name}: Ray's object store needs /dev/shm"
        assert svc["ulimits"]["memlock"] == -1, name


def test_nothing_sleeps_forever() -> None:
    assert "sleep infinity" not in COMPOSE.read_text()


def test_head_publishes_dashboard_and_api_ports(services: dict[str, dict]) -> None:
    head = services["ray-head"]
    ports = [with_defaults(p) for p in head["ports"]]
    assert "8265:8265" in ports
    assert "8080:8080" in ports
    assert with_defaults(head["container_name"]) == "argus-ray-head", (
        "scripts/2*_api.sh docker exec into argus-ray-head by default"
    )
    names = [with_defaults(svc["container_name"]) for svc in services.values()]
    assert names == ["argus-ray-head", "argus-ray-worker-0", "argus-ray-worker-1"]
    assert all(svc["container_name"].startswith("${ARGUS_CONTAINER_PREFIX:-argus}-")
               for svc in services.values()), "one prefix renames the whole cluster"
    for name, svc in services.items():
        if name != "ray-head":
            assert "ports" not in svc, f"{name}: workers publish nothing"


def test_shared_volume_at_private_everywhere(services: dict[str, dict]) -> None:
    for name, svc in services.items():
        targets = {target: source for source, target, _ in mounts(svc)}
        assert "/private" in targets, f"{name}: no /private"
        assert svc["environment"]["ARGUS_SHARED_ROOT"] == "/private", name
        assert targets["/private"] == "./shared", name
    sources = {dict((t, s) for s, t, _ in mounts(svc))["/private"] for svc in services.values()}
    assert len(sources) == 1, "every node must see the same shared root"


def test_verl_code_mounted_everywhere_and_repo_on_the_head(services: dict[str, dict]) -> None:
    for name, svc in services.items():
        verl = [(s, o) for s, t, o in mounts(svc) if t == "/workspace/verl"]
        assert verl == [("./verl-code", "ro")], name
    head = {t: s for s, t, _ in mounts(services["ray-head"])}
    assert head["/workspace/argus"] == "."


def test_workers_reserve_distinct_gpus(services: dict[str, dict]) -> None:
    seen: set[str] = set()
    for name, svc in services.items():
        devices = svc.get("deploy", {}).get("resources", {}).get("reservations", {}).get(
            "devices", [])
        if role(svc) == "head":
            assert not devices, "the head never trains"
            continue
        assert len(devices) == 1, name
        (device,) = devices
        assert device["driver"] == "nvidia"
        assert "gpu" in device["capabilities"]
        ids = set(device["device_ids"])
        assert ids, name
        assert not ids & seen, f"{name} shares GPUs {sorted(ids & seen)}"
        seen |= ids


def test_paths_it_builds_and_mounts_exist(services: dict[str, dict]) -> None:
    for name, svc in services.items():
        context = REPO / with_defaults(svc["build"]["context"])
        assert context.resolve() == REPO, f"{name}: COPY raypool/ needs the repo root"
        assert (context / svc["build"]["dockerfile"]).is_file()
        for source, _, _ in mounts(svc):
            if source.startswith("."):  # repo-relative (not a named volume)
                path = REPO / source
                assert path.is_dir(), f"{name}: bind-mount source {source} missing"
                if path.resolve() != REPO:
                    assert (path / "README.md").is_file(), f"{source} needs its README"


def test_every_interpolation_has_a_default() -> None:
    text = "\n".join(
        line for line in COMPOSE.read_text().splitlines() if not line.lstrip().startswith("#")
    )
    names = INTERPOLATION.findall(text)
    assert names
    with_defaults(text)
    assert "$" not in with_defaults(text).replace("$$", "")


def raypool_env_names() -> set[str]:
    """Every ``ARGUS_*`` name raypool/config.py reads (its string literals)."""
    import raypool.config

    tree = ast.parse(inspect.getsource(raypool.config))
    return {
        node.value for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        and re.fullmatch(r"ARGUS_[A-Z0-9_]+", node.value)
    }


def test_node_environment_names_are_the_ones_raypool_reads(services: dict[str, dict]) -> None:
    known = raypool_env_names()
    assert {"ARGUS_ROLE", "ARGUS_SHARED_ROOT", "ARGUS_WORKER_RESOURCES_KV"} <= known
    for name, svc in services.items():
        used = {k for k in svc["environment"] if k.startswith("ARGUS_")}
        assert used <= known, f"{name}: raypool does not read {sorted(used - known)}"
        assert set(svc["environment"]) == used, f"{name}: only ARGUS_* settings"
    worker_env = services["ray-worker-0"]["environment"]
    assert with_defaults(worker_env["ARGUS_WORKER_RESOURCES_KV"]) == "worker_node=100"


# -- the CPU / dev profile: docker-compose.cpu.yaml on top of the GPU file ------------------

CPU_COMPOSE = REPO / "docker-compose.cpu.yaml"


class _ComposeLoader(yaml.SafeLoader):
    """safe_load plus compose's ``!reset`` tag (an override that removes a key)."""


class Reset:
    pass


_ComposeLoader.add_constructor("!reset", lambda loader, node: Reset())


def merged(base: dict, override: dict) -> dict:
    """compose's merge of an override file: mappings merge, ``!reset`` removes, rest replaces."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Reset):
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


@pytest.fixture(scope="module")
def cpu_services(services: dict[str, dict]) -> dict[str, dict]:
    override = yaml.load(CPU_COMPOSE.read_text(), Loader=_ComposeLoader)
    assert set(override["services"]) == set(services), "the profile covers every node"
    return {name: merged(services[name], svc) for name, svc in override["services"].items()}


def test_cpu_profile_drops_device_reservations_and_fakes_gpus(cpu_services) -> None:
    for name, svc in cpu_services.items():
        assert "deploy" not in svc, f"{name}: no NVIDIA device reservation on a CPU host"
        assert "ulimits" not in svc, f"{name}: raising hard limits needs CAP_SYS_RESOURCE"
        env = {k: with_defaults(str(v)) for k, v in svc["environment"].items()}
        assert env["ARGUS_ROLE"] == role(svc)
        if role(svc) == "worker":
            assert env["ARGUS_WORKER_NUM_GPUS"] == "4" and env["ARGUS_WORKER_NUM_CPUS"] == "16"
            assert env["ARGUS_WORKER_RESOURCES_KV"] == "worker_node=100"
        else:
            assert "ARGUS_WORKER_NUM_GPUS" not in env
        assert "--object-store-memory=" in env["ARGUS_RAY_EXTRA_ARGS"]
        assert "test" not in svc["healthcheck"], "the probe stays the image's"


def test_cpu_profile_builds_its_own_tag_on_the_local_base(cpu_services, services) -> None:
    pin = re.search(r'"ray\[default\]==([0-9.]+)"', (REPO / "pyproject.toml").read_text())
    assert pin
    for name, svc in cpu_services.items():
        assert with_defaults(svc["image"]) == "argus/argus-ray-node:cpu", name
        assert with_defaults(svc["image"]) != with_defaults(services[name]["image"])
        base = with_defaults(svc["build"]["args"]["BASE_IMAGE"])
        # the tag scripts/container_env.sh builds: keyed by the Ray the project pins
        assert base == f"argus/ray-base:bookworm-ray{pin[1]}", name
        assert svc["build"]["dockerfile"] == "images/argus-ray-node/Dockerfile"
    script = (REPO / "scripts" / "container_env.sh").read_text()
    assert "argus/argus-ray-node:cpu" in script and "bookworm-ray" in script


def test_cpu_profile_reads_only_settings_raypool_knows(cpu_services) -> None:
    known = raypool_env_names()
    for name, svc in cpu_services.items():
        used = set(svc["environment"])
        assert used <= known, f"{name}: raypool does not read {sorted(used - known)}"
    text = "\n".join(line for line in CPU_COMPOSE.read_text().splitlines()
                     if not line.lstrip().startswith("#"))
    assert "$" not in with_defaults(text), "every interpolation has a default"


# -- the HA layer: docker-compose.ha.yaml (PostgreSQL, a second service instance) -----------

HA_COMPOSE = REPO / "docker-compose.ha.yaml"
REQUIRED = re.compile(r"^\$\{(?P<name>[A-Z_][A-Z0-9_]*):\?[^}]+\}$")


@pytest.fixture(scope="module")
def ha() -> dict:
    doc = yaml.safe_load(HA_COMPOSE.read_text())
    assert set(doc["services"]) == {"postgres", "ray-head", "argus-api-b"}
    return doc


def test_ha_secrets_come_from_the_environment_only(ha: dict) -> None:
    """The token and the database's password are required interpolations, never values;
    the store URL names no password (libpq takes PGPASSWORD)."""
    svc = ha["services"]
    for env, name in ((svc["postgres"]["environment"], "POSTGRES_PASSWORD"),
                      (svc["argus-api-b"]["environment"], "PGPASSWORD"),
                      (svc["argus-api-b"]["environment"], "ARGUS_API_TOKEN"),
                      (svc["ray-head"]["environment"], "PGPASSWORD")):
        assert REQUIRED.match(env[name]), f"{name}: {env[name]!r} is not ${{VAR:?why}}"
    for name in ("ray-head", "argus-api-b"):
        url = svc[name]["environment"]["ARGUS_STORE_URL"]
        assert re.fullmatch(r"postgresql://argus@postgres:5432/argus", url), url


def test_ha_postgres_keeps_its_data_on_a_named_volume(ha: dict) -> None:
    pg = ha["services"]["postgres"]
    assert with_defaults(pg["image"]) == "postgres:15"
    assert pg["restart"] == "unless-stopped" and pg["healthcheck"]["test"]
    (volume,) = pg["volumes"]
    source, target = volume.split(":")
    assert target == "/var/lib/postgresql/data"
    assert source in ha["volumes"], "a named volume: not the shared (NFS) root, no bind mount"
    assert "--locale=C" in pg["environment"]["POSTGRES_INITDB_ARGS"], "text sorts as on SQLite"


def test_ha_second_instance_runs_the_api_role_beside_the_head(ha: dict,
                                                              services: dict[str, dict]) -> None:
    b = ha["services"]["argus-api-b"]
    env = b["environment"]
    assert env["ARGUS_ROLE"] == "api" and with_defaults(env["ARGUS_API_CONFIG"])
    assert b["restart"] == "unless-stopped"
    assert b["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert ha["services"]["ray-head"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert with_defaults(b["image"]) == with_defaults(services["ray-head"]["image"])
    b_mounts = {t: s for s, t, _ in mounts(b)}
    head_mounts = {t: s for s, t, _ in mounts(services["ray-head"])}
    assert b_mounts["/private"] == head_mounts["/private"], "one shared root for both"
    assert b_mounts["/workspace/argus"] == head_mounts["/workspace/argus"]
    assert with_defaults(env["ARGUS_HEAD_IP_FILE"]) == \
        "/private/ray/discovery/argus-ray/head.json", "Ray's address from head.json"
    host_ports = {with_defaults(p).split(":")[0] for p in b["ports"]}
    head_ports = {with_defaults(p).split(":")[0] for p in services["ray-head"]["ports"]}
    assert host_ports and not host_ports & head_ports
    known = raypool_env_names() | {"ARGUS_STORE_URL", "ARGUS_HEAD_IP_FILE"}
    for name, svc in ha["services"].items():
        used = {k for k in svc.get("environment", {}) if k.startswith("ARGUS_")}
        assert used <= known, f"{name}: nothing reads {sorted(used - known)}"
