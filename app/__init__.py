"""ragindex.app: the entry points: the `ragindex` CLI, the embedded data plane, the Ray Serve
application (`ragindex.app.serve`) and the docs site's generated pages.

- `EmbeddedIndex`: ingest and search in one process, through the file log;
- `Reindex`: a new generation built beside the serving one;
- `load_spec`, `open_lexical`, `default_data_dir`, `auth_dir`, `elasticsearch_connection`:
  what opening an index reads (`index_opening`);
- `answer_service`: the AnswerService a spec describes (`answer_from_spec`);
- `cranfield_dir`: the shared Cranfield data; `runtime_memory`: what the local runtime holds;
- `APP_NAME`, `deploy_app`, `start_local`, `stop_local`: the Serve app on a local Ray
  (`serve_cli`).
"""

from typing import TYPE_CHECKING

from ragindex.faces import lazy_face

if TYPE_CHECKING:
    from ragindex.app.answer_from_spec import answer_service
    from ragindex.app.embedded import EmbeddedIndex
    from ragindex.app.index_opening import (
        auth_dir,
        default_data_dir,
        elasticsearch_connection,
        load_spec,
        open_lexical,
    )
    from ragindex.app.loading import cranfield_dir
    from ragindex.app.reindex import Reindex
    from ragindex.app.resources import runtime_memory
    from ragindex.app.serve_cli import APP_NAME, deploy_app, start_local, stop_local

__all__ = [
    "APP_NAME",
    "EmbeddedIndex",
    "Reindex",
    "answer_service",
    "auth_dir",
    "cranfield_dir",
    "default_data_dir",
    "deploy_app",
    "elasticsearch_connection",
    "load_spec",
    "open_lexical",
    "runtime_memory",
    "start_local",
    "stop_local",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_face(
        __name__,
        {
            "answer_from_spec": ["answer_service"],
            "embedded": ["EmbeddedIndex"],
            "index_opening": [
                "auth_dir",
                "default_data_dir",
                "elasticsearch_connection",
                "load_spec",
                "open_lexical",
            ],
            "loading": ["cranfield_dir"],
            "reindex": ["Reindex"],
            "resources": ["runtime_memory"],
            "serve_cli": ["APP_NAME", "deploy_app", "start_local", "stop_local"],
        },
    )
