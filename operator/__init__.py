"""ragindex.operator: the kopf operator that turns a RagIndex into a RayService, its log and
lexical backend, and promotes generations (`python -m ragindex.operator`).

- `register`, `OperatorOptions`, `validate_spec`: the kopf handlers;
- `RenderOptions`: how the objects a RagIndex owns are rendered (`render.render`, which the
  face cannot name: the module shares it); `render_crd`, `render_crd_yaml`, `CRD_NAME`: its
  CustomResourceDefinition;
- `decide_promotion`, `Observed`: when a new generation takes over; `switch_read_alias`: the
  Elasticsearch read alias that follows it;
- `desired_status`, `Verdict`: the RagIndex status;
- `OperatorMetrics`: the operator's own Prometheus series (`register(..., metrics=)`).
"""

from typing import TYPE_CHECKING

from ragindex.faces import lazy_face

if TYPE_CHECKING:
    from ragindex.operator.crd import CRD_NAME, render_crd, render_crd_yaml
    from ragindex.operator.generation_io import switch_read_alias
    from ragindex.operator.handlers import OperatorOptions, register, validate_spec
    from ragindex.operator.metrics import OperatorMetrics
    from ragindex.operator.objects import RenderOptions
    from ragindex.operator.promotion import Observed, decide_promotion
    from ragindex.operator.status import Verdict, desired_status

__all__ = [
    "CRD_NAME",
    "Observed",
    "OperatorMetrics",
    "OperatorOptions",
    "RenderOptions",
    "Verdict",
    "decide_promotion",
    "desired_status",
    "register",
    "render_crd",
    "render_crd_yaml",
    "switch_read_alias",
    "validate_spec",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_face(
        __name__,
        {
            "crd": ["CRD_NAME", "render_crd", "render_crd_yaml"],
            "generation_io": ["switch_read_alias"],
            "handlers": ["OperatorOptions", "register", "validate_spec"],
            "metrics": ["OperatorMetrics"],
            "objects": ["RenderOptions"],
            "promotion": ["Observed", "decide_promotion"],
            "status": ["Verdict", "desired_status"],
        },
    )
