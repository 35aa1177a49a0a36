"""The deployment files in deploy/ (docs/deploy.md): they parse, they name each other consistently,
and what they run is what ragpulse really accepts.

No container engine, cluster or Collector runs here, so the checks are structural, made against the
real things wherever there is one: the configs load with the project's own loader, every command line
(Dockerfile, Compose, StatefulSet, systemd unit) is checked against the options `ragpulse serve --help`
documents and parsed by the real click command, and the image's HEALTHCHECK command is run against a
real service. Collector configs use only components of an explicit contrib allow-list.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import re
import shlex
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from collector.auth.http import HEALTH_PATHS
from collector.cli import main
from collector.cli.serve import serve
from collector.config import Config, load_config
from collector.service import Service
from tests.support.helpers import REPO

DEPLOY = REPO / "deploy"
K8S = DEPLOY / "k8s"
DOCKERFILE = DEPLOY / "Dockerfile"
IMAGE_CONFIG = DEPLOY / "ragpulse.yaml"
LAKE_CONFIG = DEPLOY / "ragpulse-lake.yaml"
COMPOSE = DEPLOY / "compose.yaml"
ROUTING = DEPLOY / "otelcol" / "routing.yaml"
AGENT = DEPLOY / "otelcol" / "agent.yaml"
UNIT = DEPLOY / "systemd" / "ragpulse.service"
REPLICAS = ("ragpulse-1", "ragpulse-2")

# Components of opentelemetry-collector-contrib that the Collector configs may use, by section.
CONTRIB_COMPONENTS: dict[str, frozenset[str]] = {
    "receivers": frozenset({"otlp"}),
    "processors": frozenset({"batch", "memory_limiter"}),
    "exporters": frozenset({"otlp", "otlphttp", "load_balancing", "debug"}),
    "extensions": frozenset({"health_check", "pprof", "zpages"}),
}
PIPELINE_TYPES = frozenset({"traces", "logs", "metrics"})

# The apiVersion each kind of object in deploy/k8s must use (the served, non-deprecated ones).
API_VERSIONS = {
    "Namespace": "v1",
    "ConfigMap": "v1",
    "Secret": "v1",
    "Service": "v1",
    "ServiceAccount": "v1",
    "PersistentVolumeClaim": "v1",
    "StatefulSet": "apps/v1",
    "Deployment": "apps/v1",
    "PodDisruptionBudget": "policy/v1",
    "Role": "rbac.authorization.k8s.io/v1",
    "RoleBinding": "rbac.authorization.k8s.io/v1",
}
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
REPLICA_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


# --------------------------------------------------------------------------- reading files


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def load_documents(path: Path) -> list[Any]:
    """Every YAML document of a file, empty ones left out."""
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc is not None]


def yaml_files() -> list[Path]:
    return sorted([*DEPLOY.rglob("*.yaml"), *DEPLOY.rglob("*.yml")])


def normalize_dir(path: str) -> str:
    return str(PurePosixPath(path))


def config_of(data: Mapping[str, Any]) -> Config:
    """A ragpulse config from parsed YAML, through the project's real model."""
    return Config.model_validate(data)


def lake_config() -> Config:
    return load_config(LAKE_CONFIG, environ={})


def image_config() -> Config:
    return load_config(IMAGE_CONFIG, environ={})


def libpq_params(catalog: str) -> dict[str, str]:
    """`postgres:dbname=x host=y` -> {"dbname": "x", "host": "y"}."""
    prefix, _, conninfo = catalog.partition(":")
    assert prefix == "postgres", catalog
    return dict(item.split("=", 1) for item in shlex.split(conninfo))


def is_subpath(path: str, parent: str) -> bool:
    return PurePosixPath(path).is_relative_to(PurePosixPath(parent))


def labels_match(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return bool(selector) and all(labels.get(key) == value for key, value in selector.items())


# --------------------------------------------------------------------------- `ragpulse serve` options


@functools.cache
def serve_help_options() -> dict[str, bool]:
    """The options `ragpulse serve --help` documents, each with whether it takes a value."""
    result = CliRunner().invoke(main, ["serve", "--help"])
    assert result.exit_code == 0, result.output
    _, _, options_part = result.output.partition("Options:")
    assert options_part, result.output
    documented: dict[str, bool] = {}
    for line in options_part.splitlines():
        if not re.match(r"  -", line):
            continue  # a wrapped description
        first_column = re.split(r"\s{2,}", line.strip())[0]
        takes_value = bool(re.search(r"\s[A-Z][A-Z_]*$", first_column))
        for name in re.findall(r"--?[A-Za-z][\w-]*", first_column):
            documented[name] = takes_value
    return documented


def check_serve_argv(argv: list[str]) -> dict[str, Any]:
    """Assert `argv` (after the program name) is `serve` with documented options only, parse it with
    the real click command, and return the parsed parameters."""
    assert argv[:1] == ["serve"], f"not a `ragpulse serve` command line: {argv}"
    documented = serve_help_options()
    args = argv[1:]
    index = 0
    while index < len(args):
        token = args[index]
        assert token.startswith("-"), f"`ragpulse serve` takes no argument {token!r} ({argv})"
        name, has_inline_value, _ = token.partition("=")
        assert name in documented, f"{name} is not an option `ragpulse serve --help` documents ({argv})"
        assert name not in ("-h", "--help"), argv
        if documented[name] and not has_inline_value:
            assert index + 1 < len(args), f"{name} needs a value ({argv})"
            index += 1
        index += 1
    context = serve.make_context("serve", list(args))
    return dict(context.params)


def config_path_of(argv: list[str]) -> str:
    params = check_serve_argv(argv)
    path = params.get("config_path")
    assert path, f"{argv} does not name its config file with --config"
    return str(path)


def test_serve_help_is_read() -> None:
    documented = serve_help_options()
    assert {"--config", "--host", "--grpc-port", "--http-port", "--db"} <= set(documented)
    assert documented["--config"] is True
    assert documented["--help"] is False


def test_serve_argv_check_refuses_undocumented_options() -> None:
    with pytest.raises(AssertionError, match="--bind"):
        check_serve_argv(["serve", "--bind", "0.0.0.0"])
    with pytest.raises(AssertionError, match="no argument"):
        check_serve_argv(["serve", "extra"])
    assert check_serve_argv(["serve", "--config", "/x.yaml"])["config_path"] == "/x.yaml"


# --------------------------------------------------------------------------- every file


REQUIRED_FILES = [
    "Dockerfile",
    "README.md",
    "ragpulse.yaml",
    "ragpulse-lake.yaml",
    "compose.yaml",
    "otelcol/routing.yaml",
    "otelcol/agent.yaml",
    "k8s/statefulset.yaml",
    "k8s/service-headless.yaml",
    "k8s/service.yaml",
    "k8s/configmap.yaml",
    "k8s/secret.example.yaml",
    "k8s/pdb.yaml",
    "k8s/pvc.yaml",
    "k8s/otelcol.yaml",
    "k8s/kustomization.yaml",
    "systemd/ragpulse.service",
]


def test_deploy_has_every_file() -> None:
    missing = [name for name in REQUIRED_FILES if not (DEPLOY / name).is_file()]
    assert not missing


@pytest.mark.parametrize("path", yaml_files(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_yaml_parses(path: Path) -> None:
    documents = load_documents(path)
    assert documents, f"{path} holds no YAML document"
    for document in documents:
        assert isinstance(document, dict) and document, f"{path}: a document that is not a mapping"


def test_yaml_files_found() -> None:
    assert len(yaml_files()) >= 14


@pytest.mark.parametrize("name", [n for n in REQUIRED_FILES if not n.endswith(".md")], ids=lambda name: name)
def test_file_starts_with_a_header_comment(name: str) -> None:
    lines = [line for line in (DEPLOY / name).read_text(encoding="utf-8").splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith("# syntax=")]
    assert lines[0].startswith("#"), f"{name} does not start with a comment saying what it is"


# --------------------------------------------------------------------------- ragpulse configs


def test_image_config_loads_with_the_real_loader() -> None:
    config = image_config()
    config.check_evaluators()
    assert config.receivers.host == "0.0.0.0"
    assert config.store.backend == "duckdb"
    assert is_subpath(config.store.path, "/var/lib/ragpulse")


def test_lake_config_loads_with_the_real_loader() -> None:
    config = lake_config()
    config.check_evaluators()
    assert config.receivers.host == "0.0.0.0"
    assert config.store.backend == "ducklake"
    assert config.store.catalog is not None
    params = libpq_params(config.store.catalog)
    assert params == {"dbname": "ragpulse", "host": "postgres", "user": "ragpulse"}
    assert "password" not in params  # from PGPASSWORD
    assert config.store.data_path is not None
    assert normalize_dir(config.store.data_path) == "/var/lib/ragpulse/lake"
    assert config.store.replica is None  # the host name: stable in Compose and a StatefulSet


# --------------------------------------------------------------------------- Dockerfile


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    line: int


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction]

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def last(self, keyword: str) -> Instruction:
        found = self.all(keyword)
        assert found, f"no {keyword} in the stage FROM {self.base}"
        return found[-1]


def parse_dockerfile(text: str) -> list[Instruction]:
    """Instructions with their arguments, `\\` continuations joined, comments and blanks dropped."""
    instructions: list[Instruction] = []
    parts: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue  # also inside a continuation, as Docker does
        if not parts:
            start = number
        if stripped.endswith("\\"):
            parts.append(stripped[:-1].strip())
            continue
        parts.append(stripped)
        keyword, _, args = " ".join(part for part in parts if part).partition(" ")
        instructions.append(Instruction(keyword.upper(), args.strip(), start))
        parts = []
    assert not parts, "the Dockerfile ends inside a `\\` continuation"
    return instructions


def dockerfile_stages(instructions: list[Instruction]) -> list[Stage]:
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for instruction in instructions:
        if instruction.keyword == "FROM":
            words = instruction.args.split()
            words = [w for w in words if not w.startswith("--platform")]
            base = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: global_args[m.group(1) or m.group(2)], words[0])
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            stages.append(Stage(base, name, []))
        elif not stages:
            assert instruction.keyword == "ARG", f"{instruction.keyword} before the first FROM"
            key, _, value = instruction.args.partition("=")
            global_args[key.strip()] = value.strip().strip('"')
        else:
            stages[-1].instructions.append(instruction)
    return stages


def exec_form(args: str) -> list[str]:
    assert args.startswith("["), f"not the exec (JSON) form: {args}"
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(item, str) for item in value), args
    return value


@functools.cache
def dockerfile() -> tuple[Stage, ...]:
    return tuple(dockerfile_stages(parse_dockerfile(DOCKERFILE.read_text(encoding="utf-8"))))


def runtime_stage() -> Stage:
    return dockerfile()[-1]


def dockerfile_uid() -> int:
    user = runtime_stage().last("USER").args.split(":")[0]
    assert user.isdigit(), f"USER {user}: give a numeric uid, so runAsNonRoot can check it"
    return int(user)


def healthcheck_argv() -> list[str]:
    args = runtime_stage().last("HEALTHCHECK").args
    options = re.match(r"((?:--[\w-]+=\S+\s+)*)CMD\s+(.*)", args, re.S)
    assert options, f"HEALTHCHECK without CMD: {args}"
    return exec_form(options.group(2))


def dockerignore_patterns() -> list[str]:
    path = REPO / ".dockerignore"
    if not path.is_file():
        return []
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    return [line for line in lines if line and not line.startswith(("#", "!"))]


def dockerignored(relative: str) -> bool:
    """Whether .dockerignore leaves `relative` (or a folder holding it) out of the build context."""
    parts = PurePosixPath(relative).parts
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    for pattern in dockerignore_patterns():
        pattern = pattern.strip("/")
        for candidate in candidates:
            if fnmatch.fnmatch(candidate, pattern):
                return True
            if pattern.startswith("**/") and fnmatch.fnmatch(PurePosixPath(candidate).name, pattern[3:]):
                return True
    return False


def copies(stage: Stage) -> Iterator[tuple[list[str], list[str], str]]:
    """(flags, sources, destination) of each COPY / ADD of a stage."""
    for instruction in [*stage.all("COPY"), *stage.all("ADD")]:
        words = shlex.split(instruction.args)
        flags = [w for w in words if w.startswith("--")]
        paths = [w for w in words if not w.startswith("--")]
        yield flags, paths[:-1], paths[-1]


def test_dockerfile_parser_joins_continuations() -> None:
    parsed = parse_dockerfile("# c\nFROM a AS b\nRUN x \\\n  # inner comment\n  && y\nUSER 1\n")
    assert [(i.keyword, i.args) for i in parsed] == [("FROM", "a AS b"), ("RUN", "x && y"), ("USER", "1")]
    with pytest.raises(AssertionError):
        parse_dockerfile("RUN x \\\n")


def test_dockerfile_is_multi_stage_on_python_slim() -> None:
    stages = dockerfile()
    assert len(stages) >= 2
    assert {stage.base for stage in stages} == {"python:3.11-slim"}
    names = [stage.name for stage in stages]
    for index, stage in enumerate(stages):
        for flags, _, _ in copies(stage):
            for flag in flags:
                if flag.startswith("--from="):
                    assert flag.split("=", 1)[1] in names[:index], (
                        f"COPY {flag}: no earlier stage of that name"
                    )
    build_runs = " ".join(i.args for stage in stages[:-1] for i in stage.all("RUN"))
    assert "[ducklake]" in build_runs, "ragpulse is not installed with the ducklake extra"
    runtime_runs = " ".join(i.args for i in runtime_stage().all("RUN"))
    assert "pip install" not in runtime_runs, "the runtime stage copies the built venv, it installs nothing"


def test_dockerfile_copies_exist_in_the_build_context() -> None:
    for stage in dockerfile():
        for flags, sources, _ in copies(stage):
            if any(flag.startswith("--from=") for flag in flags):
                continue
            for source in sources:
                assert (REPO / source).exists(), f"COPY {source}: not in the build context (the repo root)"
                assert not dockerignored(source), f"COPY {source}: excluded by .dockerignore"


def test_dockerignore_keeps_local_state_out() -> None:
    local = (".venv/bin/python", ".git/HEAD", "ragpulse.duckdb", "bench/results/x.json")
    compiled = ("semconv/mapping.cpython-311-x86_64-linux-gnu.so", "build/lib/semconv/values.c")  # setup.py's
    for path in (*local, *compiled):
        assert dockerignored(path), path
    assert not dockerignored("collector/config.py")


def test_dockerfile_runs_as_a_non_root_user() -> None:
    stage = runtime_stage()
    user = stage.last("USER")
    assert dockerfile_uid() != 0
    assert user.args.split(":")[0] not in ("root", "0")
    assert user.line < stage.last("ENTRYPOINT").line
    assert stage.last("WORKDIR").args == "/var/lib/ragpulse"


def test_dockerfile_exposes_the_configured_ports() -> None:
    exposed = {port for i in runtime_stage().all("EXPOSE") for port in i.args.split()}
    config = image_config()
    assert exposed == {"4317", "4318"}
    assert {str(config.receivers.grpc_port), str(config.receivers.http_port)} == exposed


def test_dockerfile_healthcheck_hits_healthz_with_urllib() -> None:
    argv = healthcheck_argv()
    command = " ".join(argv)
    config = image_config()
    assert f"http://127.0.0.1:{config.receivers.http_port}/healthz" in command
    assert argv[0] == "python" and "urllib" in command
    assert "curl" not in command and "wget" not in command  # not in python:3.11-slim


def test_dockerfile_command_uses_documented_serve_options() -> None:
    stage = runtime_stage()
    entrypoint = exec_form(stage.last("ENTRYPOINT").args)
    cmd = exec_form(stage.last("CMD").args)
    assert entrypoint == ["ragpulse"]
    config_path = config_path_of(cmd)
    copied = {
        destination: sources for flags, sources, destination in copies(stage) if not flags
    }  # COPY without --from: from the build context
    assert copied.get(config_path) == ["deploy/ragpulse.yaml"], f"{config_path} is not deploy/ragpulse.yaml"
    volumes = [v for i in stage.all("VOLUME") for v in exec_form(i.args)]
    assert any(is_subpath(image_config().store.path, volume) for volume in volumes)
    env = " ".join(i.args for i in stage.all("ENV"))
    assert "PATH=/opt/ragpulse/.venv/bin:" in env  # where `ragpulse` is found


def test_dockerfile_healthcheck_works_against_a_real_service(service: Service) -> None:
    argv = healthcheck_argv()
    code = argv[-1]
    default = "http://127.0.0.1:4318"
    assert default in code
    up = subprocess.run([sys.executable, "-c", code.replace(default, service.http_url)], timeout=30)
    assert up.returncode == 0
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    down = subprocess.run(
        [sys.executable, "-c", code.replace(default, f"http://127.0.0.1:{closed_port}")],
        capture_output=True,
        timeout=30,
    )
    assert down.returncode != 0


# --------------------------------------------------------------------------- Compose


def compose() -> dict[str, Any]:
    data = load_yaml(COMPOSE)
    assert isinstance(data, dict)
    return data


def environment(service: Mapping[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.split("=", 1) for item in env)
    return {key: str(value) for key, value in env.items()}


def volume_mounts(service: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(source, target) of each mount, short or long syntax."""
    mounts = []
    for entry in service.get("volumes") or []:
        if isinstance(entry, str):
            source, target = entry.split(":")[:2]
        else:
            source, target = entry.get("source", ""), entry["target"]
        mounts.append((source, target))
    return mounts


def bind_source(source: str) -> Path | None:
    """The host path of a bind mount (relative to the compose file), or None for a named volume."""
    return (COMPOSE.parent / source).resolve() if source.startswith((".", "/")) else None


def command_argv(value: str | list[str]) -> list[str]:
    return shlex.split(value) if isinstance(value, str) else list(value)


def test_compose_services() -> None:
    services = compose()["services"]
    assert {"otelcol", "postgres", *REPLICAS} <= set(services)
    assert services["postgres"]["image"].startswith("postgres:16")


@pytest.mark.parametrize("name", REPLICAS)
def test_compose_replica_builds_the_image_and_runs_the_lake_config(name: str) -> None:
    service = compose()["services"][name]
    build = service["build"]
    context = (COMPOSE.parent / build["context"]).resolve()
    assert context == REPO
    assert (context / build["dockerfile"]).resolve() == DOCKERFILE
    config_path = config_path_of(command_argv(service["command"]))
    mounted = {target: bind_source(source) for source, target in volume_mounts(service)}
    assert mounted.get(config_path) == LAKE_CONFIG, f"{name}: {config_path} is not deploy/ragpulse-lake.yaml"
    assert service["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert re.fullmatch(r"\$\{POSTGRES_PASSWORD:\?[^}]+\}", environment(service)["PGPASSWORD"])
    assert REPLICA_NAME.fullmatch(service["hostname"])


def test_compose_replicas_share_the_lake_volume_at_data_path() -> None:
    data = compose()
    data_path = normalize_dir(str(lake_config().store.data_path))
    sources = set()
    for name in REPLICAS:
        mounts = [
            source
            for source, target in volume_mounts(data["services"][name])
            if normalize_dir(target) == data_path and bind_source(source) is None
        ]
        assert len(mounts) == 1, f"{name}: no named volume at store.data_path {data_path}"
        sources.add(mounts[0])
    assert len(sources) == 1, f"the replicas mount different volumes: {sources}"
    assert sources <= set(data["volumes"])
    hostnames = {data["services"][name]["hostname"] for name in REPLICAS}
    assert len(hostnames) == len(REPLICAS), "two replicas with the same name"


def test_compose_postgres_is_the_catalog_and_has_no_fixed_password() -> None:
    data = compose()
    postgres = data["services"]["postgres"]
    env = environment(postgres)
    params = libpq_params(str(lake_config().store.catalog))
    assert params["host"] == "postgres"
    assert env["POSTGRES_USER"] == params["user"] and env["POSTGRES_DB"] == params["dbname"]
    assert "pg_isready" in " ".join(command_argv(postgres["healthcheck"]["test"]))
    for name, service in data["services"].items():
        for key, value in environment(service).items():
            if re.search(r"PASSWORD|SECRET|TOKEN|_KEY", key):
                assert value.startswith("${"), f"{name}: {key} is hard-coded"


def test_compose_collector_routes_to_the_replicas() -> None:
    data = compose()
    otelcol = data["services"]["otelcol"]
    assert otelcol["image"].startswith("otel/opentelemetry-collector-contrib:")
    config_flags = [arg for arg in command_argv(otelcol["command"]) if arg.startswith("--config=")]
    assert len(config_flags) == 1
    mounted = {target: bind_source(source) for source, target in volume_mounts(otelcol)}
    assert mounted.get(config_flags[0].split("=", 1)[1]) == ROUTING
    dns = load_yaml(ROUTING)["exporters"]["load_balancing"]["resolver"]["dns"]
    assert int(dns["port"]) == lake_config().receivers.grpc_port
    for name in REPLICAS:
        aliases = data["services"][name]["networks"]["default"]["aliases"]
        assert dns["hostname"] in aliases, f"{name} does not answer to {dns['hostname']}"
    app = data["services"].get("app")
    if app is not None:  # the optional example app sends through the Collector
        assert app["image"] == data["services"][REPLICAS[0]]["image"]
        argv = command_argv(app["command"])
        assert argv[argv.index("--endpoint") + 1] == "otelcol:4317"


# --------------------------------------------------------------------------- Collector configs


def check_collector_config(config: Mapping[str, Any], where: str) -> None:
    """Every component is of an allowed contrib type, and every one a pipeline names is defined."""
    allowed_sections = {*CONTRIB_COMPONENTS, "service"}
    assert set(config) <= allowed_sections, f"{where}: unexpected sections {set(config) - allowed_sections}"
    for section, allowed in CONTRIB_COMPONENTS.items():
        for component in config.get(section) or {}:
            kind = component.split("/", 1)[0]
            assert kind in allowed, f"{where}: {section}.{component} is not in the contrib allow-list"
    service = config["service"]
    for extension in service.get("extensions", []):
        assert extension in (config.get("extensions") or {}), f"{where}: extension {extension} undefined"
    pipelines = service["pipelines"]
    assert pipelines, f"{where}: no pipeline"
    used: dict[str, set[str]] = {"receivers": set(), "processors": set(), "exporters": set()}
    for name, pipeline in pipelines.items():
        assert name.split("/", 1)[0] in PIPELINE_TYPES, f"{where}: pipeline {name}"
        assert pipeline.get("receivers") and pipeline.get("exporters"), f"{where}: pipeline {name} is open"
        for section in used:
            for component in pipeline.get(section, []):
                assert component in (config.get(section) or {}), f"{where}: {name} uses undefined {component}"
                used[section].add(component)
        processors = pipeline.get("processors", [])
        assert processors[:1] == ["memory_limiter"], f"{where}: {name}: memory_limiter must come first"
        assert "batch" in processors, f"{where}: {name} does not batch"
    for section, names in used.items():
        assert set(config.get(section) or {}) == names, f"{where}: {section} defined but unused"
    protocols = config["receivers"]["otlp"]["protocols"]
    assert {"grpc", "http"} <= set(protocols), f"{where}: the otlp receiver takes gRPC and HTTP"


def check_load_balancing(config: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The routing tier: traceID routing by the load_balancing exporter; returns its resolver."""
    exporter = config["exporters"]["load_balancing"]
    assert exporter["routing_key"] == "traceID"
    otlp = exporter["protocol"]["otlp"]
    assert "endpoint" not in otlp, f"{where}: the endpoint comes from the resolver"
    resolver = exporter["resolver"]
    assert len(resolver) == 1 and set(resolver) <= {"dns", "k8s", "static"}, f"{where}: {resolver}"
    for name, pipeline in config["service"]["pipelines"].items():
        assert pipeline["exporters"] == ["load_balancing"], f"{where}: {name} bypasses the routing"
    return dict(resolver)


def test_collector_check_catches_mistakes() -> None:
    config = load_yaml(ROUTING)
    config["service"]["pipelines"]["traces"]["exporters"] = ["otlp/missing"]
    with pytest.raises(AssertionError, match="undefined"):
        check_collector_config(config, "mutated")
    config = load_yaml(ROUTING)
    config["processors"]["tail_sampling"] = {}
    with pytest.raises(AssertionError, match="allow-list"):
        check_collector_config(config, "mutated")


def test_routing_collector_config() -> None:
    config = load_yaml(ROUTING)
    check_collector_config(config, "routing.yaml")
    resolver = check_load_balancing(config, "routing.yaml")
    assert set(resolver["dns"]) >= {"hostname", "port"}
    assert config["exporters"]["load_balancing"]["protocol"]["otlp"]["tls"]["insecure"] is True


def test_agent_collector_config_forwards_to_the_routing_service() -> None:
    config = load_yaml(AGENT)
    check_collector_config(config, "agent.yaml")
    assert "load_balancing" not in config["exporters"]
    host, _, port = config["exporters"]["otlp"]["endpoint"].rpartition(":")
    routing_service = k8s_object("Service", "ragpulse-otelcol")
    assert host == routing_service["metadata"]["name"]
    assert int(port) in {p["port"] for p in routing_service["spec"]["ports"]}


# --------------------------------------------------------------------------- Kubernetes


@functools.cache
def kustomization() -> dict[str, Any]:
    data = load_yaml(K8S / "kustomization.yaml")
    assert data["kind"] == "Kustomization"
    return data


@functools.cache
def k8s_manifests() -> tuple[tuple[str, dict[str, Any]], ...]:
    """(file name, object) for every object in deploy/k8s."""
    found = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for document in load_documents(path):
            found.append((path.name, document))
    return tuple(found)


def k8s_object(kind: str, name: str) -> dict[str, Any]:
    matches = [obj for _, obj in k8s_manifests() if obj["kind"] == kind and obj["metadata"]["name"] == name]
    assert len(matches) == 1, f"{kind}/{name}: {len(matches)} found"
    return matches[0]


def k8s_of_kind(kind: str) -> list[dict[str, Any]]:
    return [obj for _, obj in k8s_manifests() if obj["kind"] == kind]


def statefulset() -> dict[str, Any]:
    (sts,) = k8s_of_kind("StatefulSet")
    return sts


def ragpulse_container() -> dict[str, Any]:
    containers = statefulset()["spec"]["template"]["spec"]["containers"]
    (container,) = [c for c in containers if c["name"] == "ragpulse"]
    return container


def container_port(container: Mapping[str, Any], port: int | str) -> int:
    """A probe's or Service's port, by number or by the container port's name."""
    if isinstance(port, int):
        return port
    (number,) = [p["containerPort"] for p in container["ports"] if p.get("name") == port]
    return int(number)


def configmap_config(container: Mapping[str, Any], pod: Mapping[str, Any], config_path: str) -> str:
    """The text of the ConfigMap key mounted at `config_path` in `container`."""
    volumes = {v["name"]: v for v in pod["volumes"]}
    for mount in container["volumeMounts"]:
        if is_subpath(config_path, mount["mountPath"]) and "configMap" in volumes[mount["name"]]:
            key = str(PurePosixPath(config_path).relative_to(mount["mountPath"]))
            configmap = k8s_object("ConfigMap", volumes[mount["name"]]["configMap"]["name"])
            assert key in configmap["data"], f"{config_path}: no key {key} in the ConfigMap"
            return str(configmap["data"][key])
    raise AssertionError(f"{config_path} is not mounted from a ConfigMap")


@functools.cache
def replica_config() -> Config:
    container = ragpulse_container()
    text = configmap_config(
        container, statefulset()["spec"]["template"]["spec"], config_path_of(container["args"])
    )
    return config_of(yaml.safe_load(text))


def test_k8s_objects_are_well_formed() -> None:
    seen: set[tuple[str, str]] = set()
    assert k8s_manifests()
    for file_name, obj in k8s_manifests():
        assert obj.get("apiVersion") and obj.get("kind"), f"{file_name}: apiVersion and kind"
        name = obj.get("metadata", {}).get("name")
        assert name, f"{file_name}: {obj['kind']} without metadata.name"
        assert DNS_LABEL.fullmatch(name) and len(name) <= 63, f"{file_name}: {name}"
        assert API_VERSIONS.get(obj["kind"]) == obj["apiVersion"], (
            f"{file_name}: {obj['kind']} {obj['apiVersion']}"
        )
        key = (obj["kind"], name)
        assert key not in seen, f"{key} defined twice"
        seen.add(key)


def test_kustomization_lists_every_manifest() -> None:
    listed = kustomization()["resources"]
    manifests = {p.name for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml"}
    examples = {name for name in manifests if name.endswith(".example.yaml")}
    assert examples, "the example Secret is missing"
    # Examples are not applied: `kubectl apply -k` would overwrite a real Secret with a placeholder.
    assert set(listed) == manifests - examples
    assert len(listed) == len(set(listed))
    assert kustomization()["namespace"] == "ragpulse"
    assert k8s_object("Namespace", kustomization()["namespace"])


def test_statefulset_is_governed_by_the_headless_service() -> None:
    sts = statefulset()
    pod_labels = sts["spec"]["template"]["metadata"]["labels"]
    assert labels_match(sts["spec"]["selector"]["matchLabels"], pod_labels)
    assert sts["spec"]["replicas"] >= 2
    headless = k8s_object("Service", sts["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    assert labels_match(headless["spec"]["selector"], pod_labels)
    container = ragpulse_container()
    grpc_port = replica_config().receivers.grpc_port
    target_ports = {container_port(container, p["targetPort"]) for p in headless["spec"]["ports"]}
    assert grpc_port in target_ports


def test_statefulset_probes_hit_ready_and_live_on_the_http_port() -> None:
    container = ragpulse_container()
    config = replica_config()
    paths = {"readinessProbe": "/healthz/ready", "livenessProbe": "/healthz/live"}
    for probe, path in paths.items():
        http_get = container[probe]["httpGet"]
        assert http_get["path"] == path, probe
        assert path in HEALTH_PATHS, probe  # open without a key, like the kubelet asks
        assert container_port(container, http_get["port"]) == config.receivers.http_port, probe
        scheme = "HTTPS" if config.tls.cert_file else "HTTP"
        assert http_get.get("scheme", "HTTP") == scheme, probe
    ports = {p["containerPort"] for p in container["ports"]}
    assert {config.receivers.grpc_port, config.receivers.http_port} <= ports


def test_statefulset_scrape_annotations() -> None:
    annotations = statefulset()["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(replica_config().receivers.http_port)
    assert annotations["prometheus.io/path"] == "/metrics"
    assert all(isinstance(value, str) for value in annotations.values())


def test_statefulset_reads_the_catalog_password_from_the_example_secret() -> None:
    env = {e["name"]: e for e in ragpulse_container()["env"]}
    ref = env["PGPASSWORD"]["valueFrom"]["secretKeyRef"]
    secret = k8s_object("Secret", ref["name"])
    values = {**secret.get("stringData", {}), **secret.get("data", {})}
    assert ref["key"] in values
    assert "CHANGE-ME" in str(values[ref["key"]])  # clearly a placeholder
    files = {file_name for file_name, obj in k8s_manifests() if obj is secret}
    assert files == {"secret.example.yaml"}


def test_statefulset_runs_the_lake_config_from_the_configmap() -> None:
    container = ragpulse_container()
    pod = statefulset()["spec"]["template"]["spec"]
    config_path = config_path_of(container["args"])
    assert yaml.safe_load(configmap_config(container, pod, config_path)) == load_yaml(LAKE_CONFIG), (
        "configmap.yaml and deploy/ragpulse-lake.yaml differ"
    )
    assert replica_config().store.backend == "ducklake"
    assert "command" not in container  # the image's ENTRYPOINT: ragpulse


def test_statefulset_mounts_the_shared_lake_at_data_path() -> None:
    container = ragpulse_container()
    pod = statefulset()["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    data_path = normalize_dir(str(replica_config().store.data_path))
    (mount,) = [m for m in container["volumeMounts"] if normalize_dir(m["mountPath"]) == data_path]
    claim = k8s_object("PersistentVolumeClaim", volumes[mount["name"]]["persistentVolumeClaim"]["claimName"])
    assert claim["metadata"]["name"] == "ragpulse-lake"
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert not mount.get("readOnly")


def test_statefulset_security_context_and_resources() -> None:
    pod = statefulset()["spec"]["template"]["spec"]
    container = ragpulse_container()
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == dockerfile_uid() != 0
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    # With a read-only root, the places ragpulse writes are volumes: its WORKDIR/HOME and /tmp.
    writable = {m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")}
    assert {runtime_stage().last("WORKDIR").args, "/tmp"} <= writable
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(container["resources"][kind]), kind
    assert pod["terminationGracePeriodSeconds"] >= 30  # time to commit on SIGTERM


def test_pdb_selects_the_replicas_only() -> None:
    (pdb,) = k8s_of_kind("PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    selector = pdb["spec"]["selector"]["matchLabels"]
    assert labels_match(selector, statefulset()["spec"]["template"]["metadata"]["labels"])
    for deployment in k8s_of_kind("Deployment"):
        assert not labels_match(selector, deployment["spec"]["template"]["metadata"]["labels"])


def test_api_service_serves_the_http_port() -> None:
    headless = statefulset()["spec"]["serviceName"]
    pod_labels = statefulset()["spec"]["template"]["metadata"]["labels"]
    services = [s for s in k8s_of_kind("Service") if labels_match(s["spec"]["selector"], pod_labels)]
    (api,) = [s for s in services if s["metadata"]["name"] != headless]
    assert api["spec"].get("type", "ClusterIP") == "ClusterIP" and api["spec"].get("clusterIP") != "None"
    container = ragpulse_container()
    assert {container_port(container, p["targetPort"]) for p in api["spec"]["ports"]} == {
        replica_config().receivers.http_port
    }


def test_routing_collector_in_kubernetes() -> None:
    deployment = k8s_object("Deployment", "ragpulse-otelcol")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    (flag,) = [arg for arg in container["args"] if arg.startswith("--config=")]
    config = yaml.safe_load(configmap_config(container, pod, flag.split("=", 1)[1]))
    check_collector_config(config, "otelcol.yaml")
    resolver = check_load_balancing(config, "otelcol.yaml")
    namespace = kustomization()["namespace"]
    assert resolver["k8s"]["service"] == f"{statefulset()['spec']['serviceName']}.{namespace}"
    assert resolver["k8s"]["ports"] == [replica_config().receivers.grpc_port]
    # The resolver watches the Service's endpoints through the API: RBAC for the pod's account.
    account = k8s_object("ServiceAccount", pod["serviceAccountName"])
    (binding,) = [
        b
        for b in k8s_of_kind("RoleBinding")
        if {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": namespace}
        in b["subjects"]
    ]
    assert binding["roleRef"]["kind"] == "Role"
    role = k8s_object("Role", binding["roleRef"]["name"])
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    for group, resource in (("", "endpoints"), ("discovery.k8s.io", "endpointslices")):
        for verb in ("get", "list", "watch"):
            assert (group, resource, verb) in granted
    service = k8s_object("Service", "ragpulse-otelcol")
    assert labels_match(service["spec"]["selector"], deployment["spec"]["template"]["metadata"]["labels"])
    assert container["image"] == compose()["services"]["otelcol"]["image"]


def test_images_are_pinned() -> None:
    images = [
        c["image"]
        for kind in ("StatefulSet", "Deployment")
        for obj in k8s_of_kind(kind)
        for c in obj["spec"]["template"]["spec"]["containers"]
    ]
    images += [s["image"] for s in compose()["services"].values() if "image" in s and "build" not in s]
    for image in images:
        tag = image.rpartition(":")[2] if ":" in image.rpartition("/")[2] else ""
        assert tag and tag != "latest", f"{image}: pin a version"


# --------------------------------------------------------------------------- systemd


def parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """A systemd unit as {section: {key: [values]}} (keys may repeat; `\\` continues a line)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith(("#", ";"))):
            continue
        if line.endswith("\\"):
            pending += line[:-1].rstrip() + " "
            continue
        line, pending = pending + line, ""
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"a setting outside any section: {line}"
        key, equals, value = line.partition("=")
        assert equals, f"not a key=value line: {line}"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def seconds(value: str) -> float:
    """A systemd time span (`90`, `90s`, `1min 30s`) in seconds."""
    units = {"": 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}
    total = 0.0
    for number, unit in re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", value):
        total += float(number) * units[unit]
    return total


@functools.cache
def unit() -> dict[str, dict[str, list[str]]]:
    return parse_unit(UNIT.read_text(encoding="utf-8"))


def unit_value(key: str, section: str = "Service") -> str:
    values = unit()[section].get(key)
    assert values, f"[{section}] {key}= is missing"
    return values[-1]


def test_unit_parser() -> None:
    parsed = parse_unit("[A]\n# c\nX=1\nX=2\nY=a \\\n  b\n")
    assert parsed == {"A": {"X": ["1", "2"], "Y": ["a b"]}}
    assert seconds("1min 30s") == 90 and seconds("45") == 45


def test_unit_runs_serve_with_documented_options_as_a_non_root_user() -> None:
    assert {"Unit", "Service", "Install"} <= set(unit())
    user = unit_value("User")
    assert user not in ("root", "0") and user
    argv = shlex.split(unit_value("ExecStart").lstrip("-@:+!"))
    assert PurePosixPath(argv[0]).is_absolute() and PurePosixPath(argv[0]).name == "ragpulse"
    config_path = config_path_of(argv[1:])
    # The same config file the image runs: deploy/ragpulse.yaml, installed at that path.
    assert config_path == config_path_of(exec_form(runtime_stage().last("CMD").args))
    assert unit_value("WantedBy", "Install") == "multi-user.target"


def test_unit_state_directory_holds_the_database() -> None:
    state = f"/var/lib/{unit_value('StateDirectory')}"
    assert state in unit_value("ReadWritePaths").split()
    assert is_subpath(unit_value("WorkingDirectory"), state)
    assert is_subpath(image_config().store.path, state)


def test_unit_restarts_drains_and_is_hardened() -> None:
    assert unit_value("Restart") == "on-failure"
    assert seconds(unit_value("TimeoutStopSec")) >= 30
    assert unit_value("KillMode") == "mixed"  # SIGTERM to ragpulse, which stops its own workers
    assert unit_value("EnvironmentFile").startswith("-/etc/ragpulse/")
    assert int(unit_value("LimitNOFILE")) >= 4096
    assert unit_value("NoNewPrivileges") == "yes"
    assert unit_value("ProtectSystem") == "strict"
    assert unit_value("ProtectHome") in ("yes", "true", "read-only", "tmpfs")
    assert unit_value("PrivateTmp") == "yes"


# --------------------------------------------------------------------------- docs


def markdown_links(path: Path) -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", path.read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    "path",
    [REPO / "docs" / "deploy.md", REPO / "docs" / "scale-out.md", DEPLOY / "README.md"],
    ids=lambda p: p.name,
)
def test_doc_links_stay_in_the_repository(path: Path) -> None:
    links = [link.split("#")[0] for link in markdown_links(path) if "://" not in link]
    assert links
    for link in filter(None, links):
        target = (path.parent / link).resolve()
        assert target.is_relative_to(REPO), f"{path.name}: {link} points outside the repository"
        assert target.exists(), f"{path.name}: {link} does not exist"


def test_deploy_doc_points_to_the_store_side() -> None:
    text = (REPO / "docs" / "deploy.md").read_text(encoding="utf-8")
    section = text.partition("## Several replicas on one lake")[2].partition("\n## ")[0]
    assert "scale-out.md" in section
