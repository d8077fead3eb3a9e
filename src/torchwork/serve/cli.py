"""``torchwork serve ARTIFACT... [--factory MODULE:FUNCTION] [--port N] ...``: the flags (:func:`add_arguments`,
no torch or fastapi import, so ``torchwork --help`` stays fast) and the command (:func:`cli_main`): every
setting checked (keys, TLS files, the port), then the models loaded and served by
:func:`torchwork.serve.server.serve`, the function a Python user calls.

Example:
    >>> import argparse
    >>> parser = argparse.ArgumentParser(prog="torchwork serve")
    >>> add_arguments(parser)
    >>> args = parser.parse_args(["artifact", "--threads", "auto", "--max-batch-size", "8"])
    >>> args.artifact, args.threads, args.max_batch_size, args.model_process
    (['artifact'], None, 8, True)
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchwork.errors import ConfigError
from torchwork.serve.config import HTTP_PARSERS, ServeConfig
from torchwork.serve.key_file import permission_warning
from torchwork.serve.keys import ENVIRONMENT, KeyCheck, KeyRing, check_bind
from torchwork.serve.predictor import ServedModel, available_cpus, configure_threads
from torchwork.serve.server import (
    bind,
    check_not_a_run_folder,
    load_predictor,
    model_limits,
    serve,
    served_sources,
)
from torchwork.serve.tls import PASSWORD_ENVIRONMENT, check_tls

if TYPE_CHECKING:  # pragma: no cover
    from torchwork.serve.model_process import ModelProcess


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
    """The ``torchwork serve`` flags (called by the top-level parser, torchwork.cli)."""
    from torchwork.deploy.manifest import VARIANT_FILES  # the artifact format: no torch import

    d = ServeConfig()
    parser.add_argument("artifact", nargs="+", metavar="ARTIFACT",
                        help="an exported artifact folder (see torchwork.deploy.export); or NAME=ARTIFACT for each "
                             "of several models; or a model folder holding NAME/VERSION/ artifacts (each model's "
                             "newest version serves)")
    parser.add_argument("--factory", metavar="MODULE:FUNCTION",
                        help="serve the predictor FUNCTION(ARTIFACT) returns instead of the artifact's own")
    parser.add_argument("--variant", choices=sorted(VARIANT_FILES), default=None,
                        help="the artifact's model file to run (default: the one its manifest marks to deploy, "
                             "unless it runs as code: torchscript and pt2-aoti load only when named here)")
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
    if not 0 <= args.model_nice <= 19:
        raise ConfigError(f"--model-nice {args.model_nice}: the model process's niceness is 0 (the server's CPU "
                          "priority) to 19 (the lowest); give a value in that range.")
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


