"""Run the server: threads for the CPU count, a bound socket, uvicorn with graceful shutdown on SIGTERM.

``torchwork serve ARTIFACT_DIR`` serves an exported artifact; ``--factory module:function`` serves whatever
predictor ``function(ARTIFACT_DIR)`` builds instead (a TorchPredictor from your own checkpoint, say).

Example (blocks until SIGTERM or Ctrl-C, so not run here):
    from torchwork.serve import ServeConfig, TorchPredictor, serve
    serve(TorchPredictor(model, item_shape=(64,), labels=labels), ServeConfig(port=8000))
"""

from __future__ import annotations

import errno
import importlib
import json
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchwork.errors import ConfigError
from torchwork.serve.config import ServeConfig
from torchwork.serve.keys import KeyCheck, check_bind
from torchwork.serve.predictor import ServedModel, configure_threads
from torchwork.serve.tls import check_tls

if TYPE_CHECKING:  # pragma: no cover
    from torchwork.serve.model_process import ModelProcess
    from torchwork.serve.repository import ModelSpec


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: a free one), with a clear error if it is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP matters: asyncio sets TCP_NODELAY only on sockets that say so, and without it each
    # answer (headers and body are two writes) waits ~40 ms for the client's delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as error:
        sock.close()
        if isinstance(error, socket.gaierror) or error.errno == errno.EADDRNOTAVAIL:  # the host, not the port
            raise ConfigError(f"cannot listen on {host}:{port}: {error.strerror}: --host must be an address of "
                              "this machine (127.0.0.1, the default; ::1; 0.0.0.0 for every interface, with API "
                              "keys).") from None
        raise ConfigError(f"cannot listen on {host}:{port}: {error.strerror}. Pick another --port "
                          "(0 takes a free one) or stop the process using it.") from None
    sock.set_inheritable(True)
    return sock


def serve(predictor: ServedModel | None, config: ServeConfig | None = None,
          model_process: ModelProcess | None = None, name: str = "model", version: str = "1",
          keys: KeyCheck | None = None, models: Sequence[ModelSpec] = (), sock: socket.socket | None = None
          ) -> None:
    """Serve ``predictor`` over HTTP until SIGTERM/SIGINT, then finish in-flight requests and return.

    Prints ``warming up`` once the socket is bound, then, once the model is warmed up and requests are
    answered, ``ready: listening on http://HOST:PORT``: a request sent after that line gets its answer.
    ``model_process``: run batches in that child process (see :func:`torchwork.serve.create_app`); ``name``
    and ``version``: the model's in the Open Inference Protocol's routes (``/v2/models/NAME/infer``);
    ``keys``: the API keys every route but the health probes needs (default: none, which a non-loopback
    ``config.host`` refuses unless ``config.insecure_no_auth``); ``models``: serve several instead of
    ``predictor`` (see :func:`torchwork.serve.create_app`); ``sock``: a listening socket bound already (by
    :func:`bind`), else one is bound here.

    The TLS files are checked first (:func:`torchwork.serve.tls.check_tls`), and whichever way this returns
    or raises, every model process has ended.
    """
    config = config or ServeConfig()
    check_bind(config.host, keys.ring if keys is not None else None, config.insecure_no_auth)
    if config.ssl_certfile is not None and config.ssl_keyfile is not None:
        check_tls(config.ssl_certfile, config.ssl_keyfile, config.ssl_keyfile_password)
    threads = configure_threads(config.threads)  # torch's; an OnnxPredictor fixed its own when built
    sock = sock if sock is not None else bind(config.host, config.port)
    processes = [process for process in [model_process, *(spec.model_process for spec in models)]
                 if process is not None]
    try:
        _serve(predictor, config, model_process, name, version, keys, models, sock, threads)
    finally:  # a failed start, an interrupted warm-up, or the end: no model process outlives the server
        for process in processes:
            process.close()
        sock.close()


def _serve(predictor: ServedModel | None, config: ServeConfig, model_process: ModelProcess | None, name: str,
           version: str, keys: KeyCheck | None, models: Sequence[ModelSpec], sock: socket.socket,
           threads: int) -> None:
    import uvicorn

    from torchwork.serve.app import create_app
    from torchwork.serve.connections import guarded_protocol

    host, port = sock.getsockname()[:2]
    url_host = f"[{host}]" if ":" in host else host
    scheme = "https" if config.ssl_certfile else "http"
    docs = "docs at /docs; " if config.docs else ""
    served = [(spec.predictor, spec.model_process, spec.limits.get("max_batch_size", config.max_batch_size))
              for spec in models] or [(predictor, model_process, config.max_batch_size)]
    title = ", ".join(f"{getattr(p, 'name', type(p).__name__)} ({p.kind})" for p, _, _ in served)
    in_processes = all(process is not None for _, process, _ in served)
    sizes = sorted({size for _, _, size in served})

    def ready() -> None:
        chosen = sorted({process.threads_chosen for _, process, _ in served if process is not None
                         and process.threads_chosen is not None}) if in_processes else [threads]
        counts = "/".join(map(str, chosen)) or str(threads)
        print(f"torchwork serve: {title} ready: listening on {scheme}://{url_host}:{port} ({docs}batches of "
              f"up to {'/'.join(map(str, sizes))}, wait at most {config.max_wait_ms:g} ms, {counts} model "
              f"thread(s){' in a model process' if in_processes else ''})", flush=True)

    for served_predictor, _, _ in served:  # a model that cannot answer its labels refuses to start, in one line
        check_answers(served_predictor)
    print(f"torchwork serve: {title} warming up{' in a model process' if in_processes else ''}; the address "
          "follows once it answers", flush=True)
    start_model_processes([(process, size) for _, process, size in served if process is not None])
    app = create_app(predictor, config, model_process, on_ready=ready, name=name, version=version, keys=keys,
                     models=models)
    # The HTTP protocol with the connection guard: head, body and idle bounds, and --max-connections. The
    # loop is asyncio's even where uvloop is installed: measured, uvloop made the model-process mode slower.
    uv_config = uvicorn.Config(app, log_level=config.log_level, access_log=False, lifespan="on",
                               timeout_graceful_shutdown=int(config.timeout_s) + 5, server_header=False,
                               http=guarded_protocol(app.state.torchwork_guard, config.http), loop="asyncio",
                               timeout_keep_alive=config.idle_timeout_s,  # type: ignore[arg-type]
                               ssl_certfile=config.ssl_certfile, ssl_keyfile=config.ssl_keyfile,
                               ssl_keyfile_password=config.ssl_keyfile_password)
    # uvicorn installs its SIGTERM/SIGINT handlers: stop accepting, finish in-flight answers, run shutdown.
    uvicorn.Server(uv_config).run(sockets=[sock])


def check_answers(predictor: Any) -> None:
    """Run ``predictor`` on one warm-up item and encode its answer; raise a one-line
    :class:`~torchwork.errors.ConfigError` when that fails (a model whose output width is not its number of
    labels, say), so that such a server never starts, let alone says ready."""
    from torchwork.serve.encoding import prediction_fragments

    examples = getattr(predictor, "example_items", None)
    if not callable(examples) or getattr(predictor, "runs_in_model_process", False):
        return  # (a model process runs and encodes its warm-up batches before the server starts)
    try:
        prediction_fragments(predictor.labels)(predictor.predict_batch(examples(1)))
    except Exception as error:
        name = getattr(predictor, "name", type(predictor).__name__)
        raise ConfigError(f"{name}: the model fails on a warm-up item, so it is not served: "
                          f"{type(error).__name__}: {error}") from None


def start_model_processes(processes: Sequence[tuple[ModelProcess, int]]) -> None:
    """Start each model process (it builds and warms up its model at batch sizes 1 and its model's largest)
    before the server starts; on a failure end the ones started and raise its one-line
    :class:`~torchwork.errors.ModelProcessError`."""
    started: list[ModelProcess] = []
    try:
        for process, max_batch_size in processes:
            started.append(process)  # before it starts: one interrupted while it warms up is ended too
            process.start(sorted({1, max_batch_size}))
    except BaseException:
        for process in started:
            process.close()
        raise


def check_not_a_run_folder(folder: str) -> None:
    """Say at once when ``folder`` is a training run folder (or a recipe's output) rather than an artifact,
    and name the artifact inside it; reads two small files, imports nothing heavy.

    Example:
        >>> import tempfile, pathlib
        >>> run = pathlib.Path(tempfile.mkdtemp())
        >>> (run / "checkpoints").mkdir()
        >>> check_not_a_run_folder(str(run))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        torchwork.errors.ConfigError: ... is a training run folder, not an exported artifact; ...
    """
    from torchwork.deploy.manifest import MAX_MANIFEST_BYTES
    from torchwork.paths import read_regular

    path = Path(folder)
    manifest = path / "manifest.json"
    if not path.is_dir() or not manifest.is_file() and not (path / "checkpoints").is_dir():
        return
    try:  # a regular file of a manifest's size only: a FIFO would block, a huge file fill memory
        if "torchwork_artifact" in json.loads(read_regular(manifest, MAX_MANIFEST_BYTES).decode("utf-8")):
            return
    except (OSError, ValueError, TypeError, RecursionError):
        pass
    if not (path / "checkpoints").is_dir() and not (path / "artifact").is_dir():
        return  # some other folder: the artifact loader says what is missing
    inside = path / "artifact"
    advice = (f"serve the artifact inside it: torchwork serve {inside}" if (inside / "manifest.json").is_file()
              else "it holds no artifact/ yet: export one with torchwork export (or train with a recipe, which "
                   "writes RUN/artifact/), then serve that folder")
    raise ConfigError(f"{path} is a training run folder, not an exported artifact; {advice}.")


def load_predictor(artifact: str, factory: str | None = None, variant: str | None = None,
                   compile: str = "off") -> ServedModel:
    """``factory`` ("module:function") called with ``artifact``, or the artifact's own predictor (running
    ``variant``, default the one its manifest marks to deploy; its pt2 program compiled as ``compile``,
    ``"auto" | "on" | "off"``, says: :mod:`torchwork.deploy.compiled`)."""
    from torchwork.serve.predictor import threads_to_torch

    threads_to_torch()  # before anything torch runs in this process (configure_threads may have waited)
    if factory is None:
        from torchwork.serve.artifact import predictor_from_artifact

        return predictor_from_artifact(artifact, variant, compile=compile)
    if compile != "off":
        raise ConfigError("--compile compiles an artifact's pt2 program; with --factory your function builds "
                          "the predictor, so compile there (or leave --compile off).")
    if variant is not None:
        raise ConfigError("--variant picks a model file of an exported artifact; with --factory your function "
                          "builds the predictor, so choose the model there.")
    module_name, _, function_name = factory.partition(":")
    if not module_name or not function_name:
        raise ConfigError(f"--factory {factory!r}: write it as module:function, e.g. mypkg.serving:build.")
    try:
        function = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as error:
        raise ConfigError(f"--factory {factory!r}: {error}. Check the module is importable (PYTHONPATH) "
                          "and defines the function.") from None
    predictor = function(artifact)
    if not isinstance(predictor, ServedModel):
        raise ConfigError(f"--factory {factory!r} returned {type(predictor).__name__}, not a predictor "
                          "(kind, item_shape, dtype, labels, predict_batch); return a TorchPredictor or "
                          "OnnxPredictor.")
    return predictor


def model_limits(given: Sequence[str] | None, names: Sequence[str], config: ServeConfig) -> dict[str, dict[str, Any]]:
    """``--model-limit NAME:SETTING=VALUE`` flags as each model's own settings, checked (a setting's value as
    ServeConfig checks it) before any model loads.

    Example:
        >>> model_limits(["text:max-batch-size=8", "text:max-body-bytes=65536"], ["text", "digits"], ServeConfig())
        {'text': {'max_batch_size': 8, 'max_body_bytes': 65536}}
    """
    import dataclasses

    from torchwork.serve.repository import MODEL_SETTINGS

    found: dict[str, dict[str, Any]] = {}
    flags = ", ".join(setting.replace("_", "-") for setting in MODEL_SETTINGS)
    for text in given or []:
        name, colon, rest = text.partition(":")
        setting, equals, value = rest.partition("=")
        setting = setting.strip().replace("-", "_")
        if not colon or not equals:
            raise ConfigError(f"--model-limit {text!r}: write NAME:SETTING=VALUE, e.g. text:max-batch-size=8")
        if name not in names:
            raise ConfigError(f"--model-limit {text!r}: no model {name!r} is served (the models: {', '.join(names)})")
        if setting not in MODEL_SETTINGS:
            raise ConfigError(f"--model-limit {text!r}: {setting.replace('_', '-')!r} is not a setting a model may "
                              f"have its own of; those are {flags}")
        kind = type(getattr(config, setting))
        try:
            number = kind(value)
        except ValueError:
            raise ConfigError(f"--model-limit {text!r}: {value!r} is not a{'n integer' if kind is int else ' number'}"
                              ) from None
        found.setdefault(name, {})[setting] = number
        dataclasses.replace(config, **found[name])  # ServeConfig says what is out of range, naming the setting
    return found


def served_sources(arguments: list[str], name: str | None) -> list[tuple[str, str, Path | None]]:
    """What ``torchwork serve ARG ...`` serves: (model name, artifact folder, model folder or None) each.

    ``ARTIFACT`` (named ``--name`` or after its folder); ``NAME=ARTIFACT ...``; or a model folder
    ``models/`` holding ``NAME/VERSION/manifest.json``: every model in it at its newest version, which SIGHUP
    and ``POST /v2/repository/models/NAME/load`` can replace.

    Example:
        >>> served_sources(["digits=runs/a/artifact", "text=runs/b/artifact"], None)[1][:2]
        ('text', 'runs/b/artifact')
    """
    from torchwork.serve.repository import check_name, versions_in

    if len(arguments) == 1 and "=" not in arguments[0]:
        root = Path(arguments[0])
        if root.is_dir() and not (root / "manifest.json").exists():
            models = [(child.name, versions_in(child)) for child in sorted(root.iterdir()) if child.is_dir()]
            models = [(model, versions) for model, versions in models if versions]
            if models:
                if name is not None:
                    raise ConfigError("--name names a single artifact; a model folder names its models by their "
                                      "folders (models/NAME/VERSION/)")
                return [(check_name(model), str(newest_inside(root, model)), root) for model, _ in models]
        return [(check_name(name or model_name_for(arguments[0])), arguments[0], None)]
    if name is not None:
        raise ConfigError("--name names a single artifact; with several, write NAME=ARTIFACT for each")
    sources: list[tuple[str, str, Path | None]] = []
    for argument in arguments:
        model, equals, folder = argument.partition("=")
        if not equals or not folder:
            raise ConfigError(f"{argument!r}: to serve several models write NAME=ARTIFACT for each "
                              "(e.g. digits=runs/digits/artifact), or serve one model folder models/NAME/VERSION/")
        if any(model == seen for seen, _, _ in sources):
            raise ConfigError(f"model name {model!r} is given twice; each model needs its own name")
        sources.append((check_name(model), folder, None))
    return sources


def newest_inside(root: Path, model: str) -> Path:
    """The folder of ``model``'s newest version in the model folder ``root``, checked as a load checks it: a
    model or version folder that is a link leading out of ``root`` refuses the start (as a load refuses it),
    rather than serving an artifact from elsewhere or quietly serving fewer models than the folder holds."""
    from torchwork.serve.inference_protocol import ProtocolError
    from torchwork.serve.repository import version_folder

    try:
        return version_folder(root, model, None)[1]
    except ProtocolError as problem:
        raise ConfigError(f"{root}: {problem}; copy the artifact into the model folder, or serve it as "
                          f"{model}=ARTIFACT") from None


def model_name_for(artifact: str) -> str:
    """A model name for the ``/v2`` routes from an artifact folder: its name, or its run folder's when it is
    ``RUN/artifact``; characters other than letters, digits, ``.``, ``_`` and ``-`` become ``-``.

    Example:
        >>> model_name_for("runs/sentiment 2024/artifact")
        'sentiment-2024'
    """
    path = Path(artifact).resolve() if not Path(artifact).name else Path(artifact)
    folder = path.parent.name if path.name == "artifact" and path.parent.name else path.name
    return "".join(c if c.isalnum() or c in "._-" else "-" for c in folder) or "model"
