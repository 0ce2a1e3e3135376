"""The `ragindex` command line: ingest, search, reindex, serve, tokens, demo, render.

The measurement part adds eval, gate, bench, ... through the `ragindex.commands` entry points.

Each subcommand is a thin wrapper: argument parsing here, the work in the packages below.
Heavy imports (torch, FAISS, Ray) happen inside the command that needs them, so `ragindex
--help` and `ragindex render` stay fast.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragindex.errors import BackendUnavailable, InvalidInput, RagIndexError
from ragindex.router.cli_output import add_json_option, emit_json
from ragindex.router.problems import unwrapped
from ragindex.telemetry import LOG_FORMATS, configure_logging
from ragindex.telemetry_names import LOG_FORMAT_ENV

if TYPE_CHECKING:
    from ragindex.router import SearchResult
    from ragindex.types import Document

TOKEN_ENV = "RAGINDEX_TOKEN"
DEBUG_ENV = "RAGINDEX_DEBUG"

EXIT_CODES: dict[int, str] = {
    0: "done",
    1: "a check failed: a benchmark goal or the release gate was missed, or a new index"
    " generation was refused promotion",
    2: "bad input: a usage error, or a spec, file, option or document that is missing or"
    " malformed; nothing was changed",
    3: "a server is unavailable (a ragindex server, Elasticsearch, Kafka): try again later",
    4: "refused by the index's state: e.g. nothing ingested yet, the log held by a running"
    " `ragindex serve`, a model identity that does not match the index",
    70: "internal error: a bug; rerun with --debug and report the traceback",
    74: "a file or folder could not be read or written (permissions, disk space)",
    130: "interrupted",
}
"""Every exit status of `ragindex` and what it means (the CLI reference lists them)."""


def exit_code(err: BaseException) -> int:
    """The documented exit status for an error that ended a command."""
    from ragindex.generations import PromotionRefused
    from ragindex.lexical.elasticsearch_index import BulkWriteError

    err = unwrapped(err)  # an error that stopped a run part way carries its cause
    if isinstance(err, KeyboardInterrupt):
        return 130
    if isinstance(err, PromotionRefused):
        return 1
    if isinstance(err, InvalidInput):
        return 2
    if isinstance(err, BackendUnavailable | BulkWriteError):
        return 3
    if isinstance(err, RagIndexError):
        return 4
    if isinstance(err, OSError):
        return 74
    return 70


def _set_thread_defaults() -> None:
    """One intra-op thread unless told otherwise: two processes fighting over 2 cores are slow."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def _data_dir(args: argparse.Namespace) -> Path:
    from ragindex.app.index_opening import default_data_dir

    return Path(args.data_dir) if args.data_dir else default_data_dir()


def cmd_ingest(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from ragindex.app.loading import documents_from_paths

    if args.url is None and (args.skip or args.wait or args.token):
        raise InvalidInput("--skip, --wait and --token go with --url (a running server)")
    if args.url is not None and (args.data_dir or args.spec or args.tenant):
        raise InvalidInput(
            "--url posts to a running server: its token sets the tenant, the server its data"
            " dir and spec (drop --tenant, --data-dir and --spec)"
        )
    documents = documents_from_paths(args.paths, source=args.source)
    if args.url is not None:
        return _ingest_over_http(args, documents)
    from ragindex.app.embedded import ingest_through_log
    from ragindex.app.generation_record import serving_spec
    from ragindex.models import load_embedder

    args.tenant = args.tenant or "default"
    spec = serving_spec(_data_dir(args), args.spec)
    with tqdm(total=len(documents), unit="doc", desc="ingest", file=sys.stderr) as bar:
        ingest_through_log(
            _data_dir(args),
            spec,
            load_embedder(spec.embedder),
            args.tenant,
            documents,
            batch=args.batch,
            progress=bar.update,
        )
    print(f"ingested {len(documents)} documents for tenant {args.tenant} through the log")
    return 0


def _ingest_over_http(args: argparse.Namespace, documents: list[Document]) -> int:
    import httpx
    from tqdm import tqdm

    from ragindex.app.http_ingest import post_documents

    token = args.token or os.environ.get(TOKEN_ENV)
    if not token:
        raise InvalidInput(f"--url needs a token: --token T or ${TOKEN_ENV}")
    headers = {"Authorization": f"Bearer {token}"}
    with (
        httpx.Client(base_url=args.url, headers=headers, timeout=300) as client,
        tqdm(
            total=len(documents), initial=args.skip, unit="doc", desc="ingest", file=sys.stderr
        ) as bar,  # fmt: skip
    ):
        done = post_documents(
            client, documents, batch=args.batch, skip=args.skip, wait=args.wait,
            progress=bar.update,
        )  # fmt: skip
    print(f"{done - args.skip} documents acknowledged by {args.url} (durable in its log)")
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from ragindex.app.embedded import CLI_REPLICA
    from ragindex.app.generation_record import serving_spec
    from ragindex.app.serve.data_plane import DEFAULT_NAMESPACE, replica_dir
    from ragindex.app.serve.query_side import LocalQuerySide
    from ragindex.app.serve_cli import APP_NAME

    data_dir = _data_dir(args)
    spec = serving_spec(data_dir, args.spec)
    side = LocalQuerySide(
        spec, data_dir, APP_NAME, DEFAULT_NAMESPACE, replica_dir(data_dir, spec, CLI_REPLICA, 0)
    )
    try:
        side.load_models()
        if not side.try_open():
            raise RagIndexError(f"nothing was ingested into {data_dir} yet")
        result = side.search(args.tenant, args.query, args.k, args.mode, None)
    finally:
        side.close()
    if args.json:
        emit_json(args.json, result_to_json(result))
        return 0
    print_hits(result)
    return 0


def result_to_json(result: SearchResult) -> dict[str, Any]:
    return {
        "hits": [
            {
                "chunk_id": h.chunk.chunk_id,
                "source": h.chunk.source,
                "doc_id": h.chunk.doc_id,
                "title": h.chunk.title,
                "text": h.chunk.text,
                "score": h.score,
                "ranks": h.ranks,
            }
            for h in result.hits
        ],
        "timings_ms": result.timings_ms,
        "warnings": result.warnings,
    }


def print_hits(result: SearchResult) -> None:
    for n, hit in enumerate(result.hits, start=1):
        ranks = " ".join(f"{leg}#{rank}" for leg, rank in sorted(hit.ranks.items()))
        text = " ".join(hit.chunk.text.split())
        print(f"[{n}] {hit.chunk.chunk_id}  score={hit.score:.4f}  ({ranks})")
        print(f"    {hit.chunk.title.strip()[:100]}")
        print(f"    {text[:240]}{'...' if len(text) > 240 else ''}")
    stages = ", ".join(f"{k} {v:.1f} ms" for k, v in result.timings_ms.items())
    print(f"timings: {stages}")
    for warning in result.warnings:
        print(f"warning: {warning}")


def cmd_reindex(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from ragindex.app.index_opening import load_spec
    from ragindex.app.reindex import Reindex, rollback

    data_dir = _data_dir(args)
    if args.rollback:
        report = rollback(data_dir)
        print(f"rolled back: generation {report.generation} serves (was {report.previous})")
        return 0
    if args.spec is None:
        raise RagIndexError("reindex needs --spec NEW (or --rollback)")
    reindex = Reindex(data_dir, load_spec(args.spec))
    try:
        with tqdm(unit="doc", desc=f"backfill {reindex.generation}", file=sys.stderr) as bar:

            def progress(consumed: int, total: int) -> None:
                bar.total = total
                bar.update(consumed - bar.n)

            report = reindex.run(progress)
    finally:
        reindex.close()
    counts = ", ".join(f"{t}: {n}" for t, n in sorted(report.documents.items()))
    print(
        f"generation {report.generation} serves (was {report.previous}); documents {counts};"
        f" self-check {report.self_check_sampled} titles; {report.seconds:.1f} s"
    )
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    from ragindex.app.index_opening import load_spec
    from ragindex.serve_config import render_serve_config, to_yaml

    config = render_serve_config(
        load_spec(args.spec), name=args.name, data_dir=str(args.data_dir), runtime=args.runtime
    )
    print(to_yaml(config), end="")
    return 0


COMMANDS_GROUP = "ragindex.commands"
"""Entry points of this group add subcommands: `add_commands(subparsers)` (the measurement part
registers eval, gate, bench, ... there, so this module never imports it)."""


def common(p: argparse.ArgumentParser, tenant: bool = True) -> None:
    """The options every command on a local index takes."""
    p.add_argument("--data-dir", type=Path, help="index data directory")
    p.add_argument("--spec", type=Path, help="RagIndex spec YAML (defaults if omitted)")
    if tenant:
        p.add_argument("--tenant", default="default", help="tenant id (default: default)")


def lazy(module: str, function: str) -> Callable[[argparse.Namespace], int]:
    """Resolve a command's implementation only when it runs (keeps start-up light)."""

    def run(args: argparse.Namespace) -> int:
        import importlib

        result = getattr(importlib.import_module(module), function)(args)
        return int(result or 0)

    return run


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ragindex",
        description="Hybrid retrieval for RAG: ingest, search, serve, evaluate.",
        epilog="Exit status: "
        + "; ".join(f"{code} {meaning.split(':')[0]}" for code, meaning in EXIT_CODES.items())
        + ". Commands marked [maintainer] measure and document the project itself.",
    )
    parser.add_argument("--version", action="version", version=f"ragindex {version()}")
    parser.add_argument(
        "--debug", action="store_true", help=f"print the traceback of an error (or ${DEBUG_ENV}=1)"
    )
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default=None,
        help=f"log lines as JSON (with level, logger, replica, request and trace ids) or text;"
        f" the Serve replicas a command starts inherit it (default: ${LOG_FORMAT_ENV}, else"
        " auto: text on a terminal, JSON otherwise)",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "ingest",
        help="ingest Markdown, text or JSONL files into a local index, or post them to a running"
        " server (--url)",
    )
    common(p, tenant=False)
    p.add_argument("--tenant", help="tenant id (default: default; with --url the token's)")
    p.add_argument("paths", nargs="+", type=Path, help="files or folders (.md, .txt, .jsonl)")
    p.add_argument("--source", default=None, help="source name (default: the folder's name)")
    p.add_argument("--batch", type=int, default=64, help="documents per batch (request)")
    p.add_argument("--url", help="a running server's base URL: post there instead of in-process")
    p.add_argument("--token", help=f"API token for --url (default: ${TOKEN_ENV})")
    p.add_argument(
        "--skip", type=int, default=0, metavar="N", help="with --url: start after the first N"
    )
    p.add_argument(
        "--wait", action="store_true", help="with --url: each batch answers once searchable"
    )
    p.set_defaults(run=cmd_ingest)

    p = sub.add_parser(
        "reindex",
        help="build a new index generation from the log (new embedder, shards, HNSW build"
        " or chunking) and switch to it when complete",
    )
    p.add_argument("--data-dir", type=Path, help="index data directory")
    p.add_argument("--spec", type=Path, help="the new spec (YAML)")
    p.add_argument("--rollback", action="store_true", help="switch back to the retained generation")
    p.set_defaults(run=cmd_reindex)

    p = sub.add_parser("search", help="search a local index in-process")
    common(p)
    p.add_argument("query")
    p.add_argument("--k", type=int, default=8)
    p.add_argument("--mode", choices=["hybrid", "dense", "lexical"], default="hybrid")
    add_json_option(p)
    p.set_defaults(run=cmd_search)

    p = sub.add_parser("serve", help="run the Serve app on this machine (local Ray)")
    common(p, tenant=False)
    p.add_argument("--port", type=int, default=8000)
    p.set_defaults(run=lazy("ragindex.app.serve_cli", "serve_command"))

    from ragindex.router.token_tool import add_token_commands  # standard library only

    p = sub.add_parser("token", help="API tokens: create (with expiry), list, revoke")
    for t in add_token_commands(p.add_subparsers(dest="token_command", required=True)):
        t.add_argument("--data-dir", type=Path)
        t.set_defaults(run=lazy("ragindex.app.token_cli", "token_command"))

    p = sub.add_parser("demo", help="the main job: serve, ingest Cranfield, show cited hits")
    p.add_argument("--data-dir", type=Path, help="default: a fresh temporary directory")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--corpus", type=Path, help="a folder of .md/.txt/.jsonl (default Cranfield)")
    p.add_argument("--query", action="append", help="queries to show (repeatable)")
    p.set_defaults(run=lazy("ragindex.app.demo", "demo_command"))

    p = sub.add_parser("render", help="print the Serve config YAML for a spec")
    p.add_argument("--spec", type=Path)
    p.add_argument("--name", default="ragindex")
    p.add_argument("--data-dir", type=Path, default=Path("/data/ragindex"))
    p.add_argument("--runtime", choices=["local", "cluster"], default="local")
    p.set_defaults(run=cmd_render)
    for entry in entry_points(group=COMMANDS_GROUP):
        entry.load()(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; an error ends it with one line on stderr and its documented exit
    status (EXIT_CODES), the traceback only with --debug."""
    _set_thread_defaults()
    args = build_parser().parse_args(argv)
    debug = args.debug or os.environ.get(DEBUG_ENV) == "1"
    try:
        if args.log_format is not None:  # the replicas Ray starts read it from the environment
            os.environ[LOG_FORMAT_ENV] = args.log_format
        configure_logging(level=logging.WARNING)
        # serve and token share the same default data dir; eval keeps its own, demo a temp dir.
        if args.command in ("serve", "token") and args.data_dir is None:
            from ragindex.app.index_opening import default_data_dir

            args.data_dir = default_data_dir()
        return int(args.run(args))
    except (Exception, KeyboardInterrupt) as err:
        code = exit_code(err)
        if debug:
            import traceback

            traceback.print_exc()
        if code == 130:
            print("ragindex: interrupted", file=sys.stderr)
        elif code == 70:
            print(
                f"ragindex: internal error: {type(err).__name__}: {one_line(err)}"
                " (rerun with --debug for the traceback)",
                file=sys.stderr,
            )
        else:
            print(f"ragindex: error: {one_line(err)}", file=sys.stderr)
        return code


def one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("ragindex")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
