"""Run the server: threads for the CPU count, a bound socket, uvicorn with graceful shutdown on SIGTERM.

``torchwork serve ARTIFACT_DIR`` serves an exported artifact; ``--factory module:function`` serves whatever
predictor ``function(ARTIFACT_DIR)`` builds instead (a TorchPredictor from your own checkpoint, say).

Example (blocks until SIGTERM or Ctrl-C, so not run here):
    from torchwork.serve import ServeConfig, TorchPredictor, serve
    serve(TorchPredictor(model, item_shape=(64,), labels=labels), ServeConfig(port=8000))
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import logging
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchwork.errors import ConfigError
from torchwork.serve.config import HTTP_PARSERS, ServeConfig
from torchwork.serve.key_file import permission_warning
from torchwork.serve.keys import ENVIRONMENT, KeyCheck, KeyRing, check_bind
from torchwork.serve.predictor import ServedModel, available_cpus, configure_threads
from torchwork.serve.tls import PASSWORD_ENVIRONMENT, check_tls

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
    path = Path(folder)
    manifest = path / "manifest.json"
    if not path.is_dir() or not manifest.is_file() and not (path / "checkpoints").is_dir():
        return
    try:
        if "torchwork_artifact" in json.loads(manifest.read_text()):
            return
    except (OSError, ValueError, TypeError):
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


def thread_count(text: str) -> int | None:
    """``--threads``: ``auto`` (None: chosen for the machine) or a count of at least 1.

    Example:
        >>> thread_count("auto"), thread_count("3")
        (None, 3)
    """
    if text.strip().lower() == "auto":
        return None
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give a thread count (1 or more) or auto") from None
    if count < 1:
        raise argparse.ArgumentTypeError(f"{count}: give a thread count of 1 or more, or auto")
    return count


def _setting_flag(parser: argparse.ArgumentParser, defaults: ServeConfig, name: str, help_text: str) -> None:
    """The flag ``--NAME`` of the number setting ``name``: its type and default (said after ``help_text``) are
    ``defaults``'."""
    default = getattr(defaults, name)
    shown = f"{default:g}" if isinstance(default, float) else default
    parser.add_argument("--" + name.replace("_", "-"), type=type(default), default=default,
                        help=f"{help_text} (default: {shown})")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``torchwork serve`` flags (called by the CLI)."""
    from torchwork.deploy.manifest import VARIANT_FILES  # the artifact format: no torch import

    d = ServeConfig()
    parser.add_argument("artifact", nargs="+", metavar="ARTIFACT",
                        help="an exported artifact folder (see torchwork.deploy.export); or NAME=ARTIFACT for each "
                             "of several models; or a model folder holding NAME/VERSION/ artifacts (each model's "
                             "newest version serves)")
    parser.add_argument("--factory", metavar="MODULE:FUNCTION",
                        help="serve the predictor FUNCTION(ARTIFACT) returns instead of the artifact's own")
    parser.add_argument("--variant", choices=sorted(VARIANT_FILES), default=None,
                        help="the artifact's model file to run (default: the one its manifest marks to deploy)")
    parser.add_argument("--compile", choices=["auto", "on", "off"], default="off",
                        help="torch.compile the artifact's pt2 program (served with --variant pt2): on; auto, "
                             "only when eager and compiled timed at batch 1 and 32 say compiled wins beyond the "
                             "spread; off, as exported (default)")
    parser.add_argument("--name", default=None,
                        help="the model's name in the Open Inference Protocol's routes, /v2/models/NAME/infer "
                             "(default: the artifact folder's name, or its run folder's for RUN/artifact)")
    parser.add_argument("--host", default=d.host, help=f"address to bind (default: {d.host}, this machine only)")
    parser.add_argument("--port", type=int, default=d.port, help=f"TCP port, 0 for a free one (default: {d.port})")
    setting = functools.partial(_setting_flag, parser, d)
    setting("max_batch_size", "most items per model call")
    setting("max_wait_ms", "most time to wait for a batch to fill, used only while requests arrive concurrently; "
                           "0 never waits")
    setting("max_queue", "items allowed to wait; beyond it answers 503")
    setting("max_items", "most items in one request")
    setting("max_text_length", "longest text item in characters")
    setting("max_body_bytes", "largest request body")
    setting("timeout_s", "answer 504 if a request is not predicted in this time")
    parser.add_argument("--threads", type=thread_count, default=None, metavar="N|auto",
                        help="the model process's compute threads (default: auto, chosen for the machine as it "
                             "is when the model process starts: the CPUs this process may use less those other "
                             "processes use now, printed with the reason; N always wins); without a model "
                             f"process, and for the server's copy: N, else CPUs - 1 = {max(1, available_cpus() - 1)}")
    parser.add_argument("--model-process", action=argparse.BooleanOptionalAction, default=True,
                        help="run batches in a child process, off the server's GIL (default); the server keeps "
                             "a copy of the model for lone requests, so the model is loaded twice (but a text "
                             "artifact with a tokenizer.json is loaded in the child only, and runs there): "
                             "--no-model-process runs batches on a thread of the server, the model loaded "
                             "once (less memory, e.g. a large model on a GPU; less throughput under load)")
    parser.add_argument("--model-nice", type=int, default=10, metavar="N",
                        help="the model process's CPU priority is N lower than the server's (0-19), so that "
                             "on busy cores the server reads requests and forms batches first (default: 10)")
    setting("head_timeout_s", "a request's head must arrive within this time of its first byte, else 408 and "
                              "the connection closes")
    setting("body_timeout_s", "a request's body must arrive within this time of its head, else 408 and the "
                              "connection closes")
    setting("idle_timeout_s", "close a connection with no request in progress after this time, new or kept alive")
    setting("max_connections", "connections open at once; a request on one more gets 503")
    parser.add_argument("--http", choices=HTTP_PARSERS, default=d.http,
                        help=f"the HTTP parser: httptools (C, in torchwork[serve]) or h11 (pure Python) "
                             f"(default: {d.http})")
    parser.add_argument("--api-key-file", metavar="FILE", default=None,
                        help=f"API keys, one a line (or sha256:HEX digests); clients send 'Authorization: Bearer "
                             f"KEY'; also read from {ENVIRONMENT} (comma-separated); SIGHUP reads the file again")
    parser.add_argument("--open-metrics", action="store_true",
                        help="leave /metrics open when keys are on (the health probes always are)")
    parser.add_argument("--insecure-no-auth", action="store_true",
                        help="serve a non-loopback --host without API keys (refused otherwise)")
    parser.add_argument("--ssl-certfile", metavar="PEM", default=None, help="serve HTTPS with this certificate chain")
    parser.add_argument("--ssl-keyfile", metavar="PEM", default=None, help="the certificate's private key")
    parser.add_argument("--enable-model-control", action="store_true",
                        help="POST /v2/repository/models/NAME/load loads a model's newest (or named) version from "
                             "the model folder and switches to it with no downtime (SIGHUP does it anyway)")
    parser.add_argument("--model-limit", action="append", metavar="NAME:SETTING=VALUE",
                        help="model NAME's own limit, over the flag of that name, e.g. text:max-batch-size=8 "
                             "(repeat it; settings: max-batch-size, max-wait-ms, max-queue, max-items, "
                             "max-text-length, max-body-bytes, timeout-s)")
    parser.add_argument("--model-control-remote", action="store_true",
                        help="allow model control from other machines (default: this machine only)")
    parser.add_argument("--docs", action="store_true",
                        help="serve the interactive API docs at /docs and the schema at /openapi.json (the page "
                             "loads Swagger UI from a public CDN; off by default)")
    parser.add_argument("--log-level", default=d.log_level,
                        choices=["critical", "error", "warning", "info", "debug"], help="uvicorn's log level")


def cli_main(args: argparse.Namespace) -> int:
    """``torchwork serve``: check every setting (keys, TLS files, the port), then load the predictors with
    threads set for this machine and serve them."""
    config = ServeConfig(host=args.host, port=args.port, max_batch_size=args.max_batch_size,
                         max_wait_ms=args.max_wait_ms, max_queue=args.max_queue, max_items=args.max_items,
                         max_text_length=args.max_text_length, max_body_bytes=args.max_body_bytes,
                         timeout_s=args.timeout_s, threads=args.threads, log_level=args.log_level,
                         head_timeout_s=args.head_timeout_s, body_timeout_s=args.body_timeout_s,
                         idle_timeout_s=args.idle_timeout_s, max_connections=args.max_connections, http=args.http,
                         api_key_file=args.api_key_file, open_metrics=args.open_metrics,
                         insecure_no_auth=args.insecure_no_auth, ssl_certfile=args.ssl_certfile,
                         ssl_keyfile=args.ssl_keyfile, ssl_keyfile_password=os.environ.get(PASSWORD_ENVIRONMENT),
                         enable_model_control=args.enable_model_control,
                         model_control_remote=args.model_control_remote, docs=args.docs)
    ring = KeyRing.load(config.api_key_file)  # every setting checked before the model loads
    check_bind(config.host, ring, config.insecure_no_auth, warn=False)
    if config.ssl_certfile is not None and config.ssl_keyfile is not None:
        check_tls(config.ssl_certfile, config.ssl_keyfile, config.ssl_keyfile_password)
    sock = bind(config.host, config.port)  # a port in use says so at once, not after the model loads
    try:
        _serve_sources(args, config, ring, sock)
    finally:
        sock.close()
    return 0


def _serve_sources(args: argparse.Namespace, config: ServeConfig, ring: KeyRing | None, sock: socket.socket) -> None:
    """The rest of ``torchwork serve``, once its settings are checked and its socket bound: load the models
    and serve them on ``sock``."""
    from torchwork.env.drift import warn_if_machine_differs

    keys = KeyCheck(ring, config.open_metrics, config.api_key_file) if ring is not None else None
    sources = served_sources(args.artifact, args.name)  # (name, artifact folder, model folder or None)
    for _, folder, _ in sources:
        if args.factory is None:
            check_not_a_run_folder(folder)
        warn_if_machine_differs(folder)  # warns when torch, its build or ONNX Runtime differ from the exporter's
    config.threads = configure_threads(config.threads)  # before the model exists: ONNX Runtime reads it
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if config.api_key_file is not None and (loose := permission_warning(config.api_key_file)) is not None:
        logging.getLogger("torchwork.serve").warning(loose)

    def server_copy(folder: str) -> ServedModel:
        """The server's predictor: the model itself, which answers lone light requests here, or, for an
        artifact whose preprocessor carries a tokenizer.json served with a model process, its manifest alone
        (the vocabulary is then loaded once, in the model process, where every request runs)."""
        if args.model_process and args.factory is None:
            from torchwork.serve.artifact import DeclaredPredictor, tokenizer_in

            if tokenizer_in(folder):
                return DeclaredPredictor(Path(folder), args.variant)
        return load_predictor(folder, args.factory, args.variant, args.compile)

    def process_for(folder: str, name: str) -> ModelProcess | None:
        if not args.model_process:
            return None
        from torchwork.serve.model_process import ModelProcess

        return ModelProcess(load_predictor, folder, args.factory, args.variant, args.compile, threads=args.threads,
                            nice=args.model_nice, name=name)

    from torchwork.serve.repository import ArtifactFolder, ModelSpec, version_folder, versions_in

    limits = model_limits(args.model_limit, [name for name, _, _ in sources], config)
    specs = []
    for name, folder, root in sources:
        reload: Any
        newest: Any
        if root is not None:
            def reload(version: str | None, name: str = name, root: Path = root) -> tuple[str, Any, Any]:
                found, path = version_folder(root, name, version)
                return found, server_copy(str(path)), process_for(str(path), name)

            def newest(name: str = name, root: Path = root) -> str | None:
                versions = versions_in(root / name)
                return versions[-1] if versions else None
            version = Path(folder).name
        else:  # NAME=ARTIFACT (or one ARTIFACT): a reload reads that folder again
            def build(path: Path, name: str = name) -> tuple[Any, Any]:
                return server_copy(str(path)), process_for(str(path), name)
            source = ArtifactFolder(name, Path(folder), build)
            reload, newest, version = source.reload, source.newest, "1"
        specs.append(ModelSpec(name, version, server_copy(folder), process_for(folder, name), reload, newest,
                               limits.get(name, {}), root if root is not None else Path(folder).resolve().parent))
    serve(None, config, keys=keys, models=specs, sock=sock)


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


def main(argv: Any = None) -> int:  # pragma: no cover - `python -m torchwork.serve.server`
    parser = argparse.ArgumentParser(prog="torchwork serve")
    add_arguments(parser)
    return cli_main(parser.parse_args(argv))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
