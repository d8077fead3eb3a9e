"""The container and Kubernetes files in ``deploy/``: their shape checked here (the image is built only where a
container runtime exists), and their server arguments parsed by ``torchwork serve``'s own parser."""

from __future__ import annotations

import argparse
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from torchwork.serve.cli import add_arguments

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
HEALTH = {"/v2/health/ready", "/v2/health/live"}


def documents(name: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all((DEPLOY / name).read_text()) if doc]


def serve_args(args: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(args)


def check_container(container: dict, volumes: list[dict]) -> None:
    args = serve_args(container["args"])
    assert args.host == "0.0.0.0" and args.api_key_file, "a public bind needs keys"
    cpu = int(container["resources"]["requests"]["cpu"])
    assert cpu == args.threads + 1, "CPU requested: the model threads and one for the event loop"
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/models"]["readOnly"] is True and args.artifact == ["/models"]
    key_mount = next(m for m in mounts.values() if args.api_key_file.startswith(m["mountPath"] + "/"))
    assert key_mount["readOnly"] is True
    by_name = {v["name"]: v for v in volumes}
    assert by_name[key_mount["name"]]["secret"]["secretName"] == "torchwork-keys"
    assert by_name[mounts["/models"]["name"]]["persistentVolumeClaim"]["readOnly"] is True


def test_the_deployment_probes_the_health_routes_and_mounts_keys_and_models_read_only():
    deployment, service = documents("kubernetes/deployment.yaml")
    assert deployment["kind"] == "Deployment" and service["kind"] == "Service"
    spec = deployment["spec"]["template"]["spec"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    (container,) = spec["containers"]
    check_container(container, spec["volumes"])
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    (secret,) = documents("kubernetes/secret.yaml")
    assert secret["kind"] == "Secret" and secret["metadata"]["name"] == "torchwork-keys"
    from torchwork.serve.keys import KeyRing

    assert KeyRing.from_lines(secret["stringData"]["keys.txt"].splitlines()).digests  # a valid key file
    (hpa,) = documents("kubernetes/hpa.yaml")
    assert hpa["kind"] == "HorizontalPodAutoscaler" and hpa["spec"]["scaleTargetRef"]["name"] == \
        deployment["metadata"]["name"]
    assert hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]


def test_the_kserve_inference_service_runs_the_same_container():
    (service,) = documents("kserve-inferenceservice.yaml")
    assert service["apiVersion"].startswith("serving.kserve.io/") and service["kind"] == "InferenceService"
    predictor = service["spec"]["predictor"]
    (container,) = predictor["containers"]
    check_container(container, predictor["volumes"])


def test_the_dockerfile_pins_runs_as_a_user_and_checks_readiness():
    text = (DEPLOY / "Dockerfile").read_text()
    assert "-c requirements/lock.txt torch==2.13.0" in text
    assert "\nUSER 10001" in text and "useradd" in text
    assert "HEALTHCHECK" in text and "/v2/health/ready" in text
    entry = text.split('CMD ["/models"', 1)[1].split("]", 1)[0]
    args = serve_args(["/models", *[part.strip(' \\\n"') for part in entry.split(",") if part.strip(' \\\n"')]])
    assert args.host == "0.0.0.0" and args.api_key_file == "/etc/torchwork/keys.txt" and args.threads == 2


def test_the_image_builds_where_a_container_runtime_exists():
    runtime = shutil.which("docker") or shutil.which("podman")
    if runtime is None or subprocess.run([runtime, "info"], capture_output=True).returncode != 0:
        pytest.skip("no container runtime here")
    result = subprocess.run([runtime, "build", "-f", str(DEPLOY / "Dockerfile"), "-t", "torchwork-serve:test",
                             str(ROOT)], capture_output=True, text=True, timeout=3600)
    assert result.returncode == 0, result.stderr[-2000:]
