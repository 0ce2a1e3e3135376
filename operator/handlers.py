"""kopf handlers for ragindex.dev/v1alpha1 RagIndexes: validate, render, apply, prune, status.

Handlers are registered on a registry by `register(options)` rather than at import, so one
process (or one test) can run an operator with explicit options and nothing global. The flow
of one reconcile (create/update/resume):

1. validate the spec with `RagIndexSpec` (the same model as the CRD); invalid -> `Degraded`
   with pydantic's message and nothing applied, so a bad edit never breaks what serves;
2. cluster runtime: render; refuse (Reconciled=False, nothing applied) when the API server
   lacks the CRD of a kind to apply (`CRDMissing`, e.g. an HTTPRoute without the Gateway
   API), a model cannot load in the pods (`ModelUnavailable`: not packaged, its claim or
   token Secret missing), a Secret named in the spec lacks the consent label
   (`SecretRefused`) or a desired object's name is held by an object this RagIndex does not
   own (`NameConflict`); else server-side apply and prune;
   local runtime: PUT the Serve config to the local Ray dashboard;
3. patch status (observedGeneration, conditions, endpoint, activeGeneration).

Each reconcile is counted and timed, and every watch event updates the phase and condition
gauges (metrics.py).

A timer follows readiness (RayService or Serve app status) and, in the cluster runtime, the
new generation's build (its app's build report): `promotion.decide_promotion` says whether to
promote, and this module applies it (the Elasticsearch read alias, then the Service, then
`activeGeneration`) and prunes retired generations. Deletion in the cluster runtime is the garbage
collector's job (owner references); the local runtime removes its Serve app on delete.
"""

from __future__ import annotations

import logging
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import httpx
import kopf
from lightkube import AsyncClient
from lightkube.config.kubeconfig import KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import PersistentVolumeClaim, Secret

from ragindex.config import RagIndexSpec, parse_spec
from ragindex.errors import InvalidInput
from ragindex.generations import index_generation, lexical_alias, lexical_index_name
from ragindex.operator import apply, local_runtime
from ragindex.operator.backend_access import (
    render_elasticsearch_roles_secret,
    render_elasticsearch_user_secret,
)
from ragindex.operator.crd import GROUP, PLURAL, VERSION
from ragindex.operator.generation_io import read_build_report, switch_read_alias
from ragindex.operator.metrics import OperatorMetrics, Result
from ragindex.operator.model_sources import claim_names, token_secrets, unavailable_models
from ragindex.operator.objects import (
    CA_KEY,
    RenderOptions,
    build_report_url,
    cluster_endpoint,
    elasticsearch_ca_secret,
    elasticsearch_url,
    elasticsearch_user_secret,
    managed_crds,
    managed_elasticsearch,
    missing_crds,
    ray_service_name,
    validate_name,
)
from ragindex.operator.promotion import Observed, decide_promotion
from ragindex.operator.render import named_secrets, render
from ragindex.operator.status import (
    RECONCILED,
    Verdict,
    desired_status,
    find_condition,
    ray_service_verdict,
    rfc3339,
    status_patch,
)

Runtime = Literal["cluster", "local"]
APPLY_RETRY_S = 5.0


class Refused(Exception):
    """The spec is valid but the cluster holds something that must not be touched."""

    def __init__(self, reason: str, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.reason = reason


def _default_local_root() -> str:
    cache = os.environ.get("RAGINDEX_CACHE") or str(Path.home() / ".cache" / "ragindex")
    return str(Path(cache) / "local")


@dataclass(frozen=True)
class OperatorOptions:
    """How this operator process runs: runtime, where things go and how often to poll."""

    runtime: Runtime = "cluster"
    render: RenderOptions = field(default_factory=RenderOptions)
    ray_dashboard: str = "http://127.0.0.1:8265"
    serve_host: str = "127.0.0.1"
    serve_port: int = 8000
    local_data_root: str = field(default_factory=_default_local_root)
    poll_interval_s: float = 10.0
    # A refusal (NameConflict, SecretRefused) waits on a person: retried this slowly.
    refused_retry_s: float = 30.0
    kubeconfig: str | None = None
    # (index, namespace, generation) -> URL of that generation's build report.
    report_url: Callable[[str, str, str], str] = build_report_url


def validate_spec(name: str, raw: Any, runtime: Runtime) -> RagIndexSpec:
    """The spec as the model, or InvalidInput with the message a human needs to fix it."""
    validate_name(name)
    spec = parse_spec(dict(raw or {}), "invalid spec")
    if runtime == "local" and managed_elasticsearch(spec):
        raise InvalidInput(
            "a managed Elasticsearch needs the cluster runtime: set lexical.elasticsearchUrl"
            " or lexical.backend 'embedded' for the local runtime"
        )
    if runtime == "local" and spec.log.mode == "managed":
        raise InvalidInput(
            "a managed Kafka log needs the cluster runtime: set log.mode 'embedded' or"
            " 'external' for the local runtime"
        )
    if runtime == "cluster":
        # A dry render (pure): whatever render refuses (e.g. storageSize) is refused here,
        # before anything is applied.
        render(name, "default", spec)
    return spec


def _now() -> str:
    return rfc3339(datetime.now(UTC))


def _namespaced(namespace: str | None) -> str:
    """RagIndex is a namespaced kind; kopf types the namespace as optional for cluster kinds."""
    if not namespace:
        raise kopf.PermanentError("RagIndex objects are namespaced; got one without a namespace")
    return namespace


def _write_status(patch: kopf.Patch, current: Any, desired: dict[str, Any]) -> None:
    for key, value in status_patch(current, desired).items():
        patch.status[key] = value


def _check_crds(objects: list[dict[str, Any]], installed: set[str]) -> None:
    """Refuse (CRDMissing) objects of a kind the API server does not serve, before applying
    any: e.g. an HTTPRoute where the Gateway API is not installed."""
    missing = missing_crds(objects, installed)
    if missing:
        raise Refused("CRDMissing", missing)


class RagIndexOperator:
    """The handlers with their clients; one instance per operator process."""

    def __init__(self, options: OperatorOptions, metrics: OperatorMetrics) -> None:
        self.options = options
        self.metrics = metrics
        self._kube: AsyncClient | None = None
        self._serve: local_runtime.ServeRestClient | None = None

    @property
    def kube(self) -> AsyncClient:
        if self._kube is None:
            raise RuntimeError("the operator has not started: no Kubernetes client")
        return self._kube

    @property
    def serve(self) -> local_runtime.ServeRestClient:
        if self._serve is None:
            raise RuntimeError("the local runtime has not started: no Serve REST client")
        return self._serve

    async def startup(self, settings: kopf.OperatorSettings, **_: Any) -> None:
        """Clients live in kopf's event loop; kopf's own finalizer only where deletion needs it."""
        settings.persistence.finalizer = f"{GROUP}/operator"
        settings.posting.level = logging.WARNING  # k8s events for warnings and errors only
        config = KubeConfig.from_file(self.options.kubeconfig) if self.options.kubeconfig else None
        self._kube = AsyncClient(config=config, field_manager=apply.FIELD_MANAGER)
        if self.options.runtime == "local":
            self._serve = local_runtime.ServeRestClient(self.options.ray_dashboard)

    async def cleanup(self, **_: Any) -> None:
        if self._kube is not None:
            await self._kube.close()
        if self._serve is not None:
            await self._serve.aclose()

    async def reconcile(self, **kwargs: Any) -> None:
        """One reconcile, counted by how it ended and timed (metrics.py)."""
        started = time.monotonic()
        result: Result = "temporary_error"  # anything raised is retried by kopf
        try:
            result = await self._reconcile(**kwargs)
        finally:
            self.metrics.reconciled(result, time.monotonic() - started)

    async def _reconcile(
        self,
        *,
        name: str,
        namespace: str | None,
        uid: str,
        spec: Any,
        meta: Any,
        status: Any,
        patch: kopf.Patch,
        logger: Any,
        **_: Any,
    ) -> Result:
        namespace = _namespaced(namespace)
        generation = int(meta.get("generation") or 0)
        try:
            parsed = validate_spec(name, spec, self.options.runtime)
        except InvalidInput as e:
            logger.warning(f"RagIndex {namespace}/{name} not applied: {e}")
            verdict = Verdict(False, "InvalidSpec", str(e))
            _write_status(
                patch,
                status,
                desired_status(
                    status, observed_generation=generation, now=_now(), reconcile=verdict
                ),
            )
            return "permanent_error"
        try:
            if self.options.runtime == "local":
                desired = await self._reconcile_local(namespace, name, parsed, status, generation)
            else:
                desired = await self._reconcile_cluster(
                    namespace, name, uid, parsed, status, generation
                )
        except Refused as e:
            logger.warning(f"RagIndex {namespace}/{name} not applied: {e}")
            verdict = Verdict(False, e.reason, str(e))
            _write_status(
                patch,
                status,
                desired_status(
                    status, observed_generation=generation, now=_now(), reconcile=verdict
                ),
            )
            raise kopf.TemporaryError(f"{e.reason}: {e}", delay=self.options.refused_retry_s) from e
        except (ApiError, RuntimeError, OSError, httpx.HTTPError) as e:
            verdict = Verdict(False, "ApplyFailed", str(e))
            _write_status(
                patch,
                status,
                desired_status(
                    status, observed_generation=generation, now=_now(), reconcile=verdict
                ),
            )
            raise kopf.TemporaryError(f"apply failed: {e}", delay=APPLY_RETRY_S) from e
        _write_status(patch, status, desired)
        return "ok"

    async def _reconcile_cluster(
        self,
        namespace: str,
        name: str,
        uid: str,
        spec: RagIndexSpec,
        status: Any,
        generation: int,
    ) -> dict[str, Any]:
        active = (status or {}).get("activeGeneration")
        objects = render(
            name, namespace, spec, uid=uid, active_generation=active, options=self.options.render
        )
        # Every managed custom kind's CRD, looked up once for the check and the prune.
        installed = await apply.installed_crds(self.kube, managed_crds())
        _check_crds(objects, installed)
        await self._check_models(namespace, spec)
        refused = await apply.refused_secrets(self.kube, namespace, name, named_secrets(spec))
        if refused:
            raise Refused("SecretRefused", refused)
        conflicts = await apply.name_conflicts(self.kube, objects, uid)
        _, foreign = await apply.ensure_report_token(self.kube, namespace, name, uid)
        if conflicts or foreign:
            raise Refused("NameConflict", [*conflicts, *([foreign] if foreign else [])])
        await self._ensure_elasticsearch_user(namespace, name, uid, spec)
        await apply.apply_objects(self.kube, objects)
        self.metrics.applied(objects)
        # Generations in status (serving, building, retained for rollback) keep their objects
        # until a promotion decision retires them.
        kept = [e.get("id") for e in (status or {}).get("generations") or []]
        pruned = await apply.prune(
            self.kube,
            namespace,
            name,
            uid,
            objects,
            keep_generations=(active, index_generation(spec), *kept),
            installed=installed,
        )
        self.metrics.pruned(pruned)
        return await self._cluster_serving(namespace, name, uid, spec, status, generation, True)

    async def _ensure_elasticsearch_user(
        self, namespace: str, name: str, uid: str, spec: RagIndexSpec
    ) -> None:
        """A managed Elasticsearch's scoped role and the pods' user (a random password, made
        once and never replaced), owned by the RagIndex, before the Elasticsearch naming them;
        NameConflict when a Secret of either name is not ours."""
        if not managed_elasticsearch(spec):
            return
        generation = index_generation(spec)
        password = secrets.token_urlsafe(24)
        wanted = [
            render_elasticsearch_roles_secret(name, namespace, spec, generation, uid),
            render_elasticsearch_user_secret(name, namespace, password, generation, uid),
        ]
        foreign = [why for s in wanted if (why := await apply.ensure_secret(self.kube, s, uid))]
        if foreign:
            raise Refused("NameConflict", foreign)

    async def _check_models(self, namespace: str, spec: RagIndexSpec) -> None:
        """Refuse (ModelUnavailable) a model the pods could not load, before applying."""
        claims = await apply.existing_names(
            self.kube, PersistentVolumeClaim, namespace, claim_names(spec)
        )
        secrets = await apply.existing_names(self.kube, Secret, namespace, token_secrets(spec))
        unavailable = unavailable_models(spec, claims, secrets)
        if unavailable:
            raise Refused("ModelUnavailable", unavailable)

    async def _cluster_serving(
        self,
        namespace: str,
        name: str,
        uid: str,
        spec: RagIndexSpec,
        status: Any,
        generation: int,
        reconciled: bool,
    ) -> dict[str, Any]:
        """Status after observing the target generation; applies a promotion and retirements."""
        active = (status or {}).get("activeGeneration")
        target = index_generation(spec)
        rs_name = ray_service_name(name, target)
        ready = ray_service_verdict(
            await apply.read_ray_service(self.kube, namespace, rs_name), rs_name
        )
        report = None
        if ready.ok and active not in (None, target):
            token, _ = await apply.ensure_report_token(self.kube, namespace, name, uid)
            if token is not None:  # else the next reconcile refuses, saying why
                url = self.options.report_url(name, namespace, target)
                report = await read_build_report(url, token)
        moment = datetime.now(UTC)
        action = decide_promotion(
            status,
            Observed(
                target=target,
                target_ready=ready,
                report=report,
                now=rfc3339(moment),
                moment=moment,
                window_s=spec.generations.rollback_window_hours * 3600,
            ),
        )
        if action.kind == "promote" and active not in (None, target):
            # The read alias first: the old generation's pods then read the complete new
            # index for the moment until the Service selects the new generation's pods.
            await self._switch_read_alias(namespace, name, spec, target)
            objects = render(
                name,
                namespace,
                spec,
                uid=uid,
                active_generation=target,
                options=self.options.render,
            )
            # With the owner reference: an apply without it would drop it from the Service.
            service = [o for o in objects if o["kind"] == "Service"]
            await apply.apply_objects(self.kube, service)
            self.metrics.applied(service)
        if action.retire:
            objects = render(
                name,
                namespace,
                spec,
                uid=uid,
                active_generation=action.active,
                options=self.options.render,
            )
            kept = (action.active, target, *(e["id"] for e in action.generations))
            pruned = await apply.prune(
                self.kube, namespace, name, uid, objects, keep_generations=kept
            )
            self.metrics.pruned(pruned)
        return desired_status(
            status,
            observed_generation=generation,
            now=rfc3339(moment),
            reconcile=Verdict(True, "Applied", f"generation {target} applied")
            if reconciled
            else None,
            serving=action.ready,
            endpoint=cluster_endpoint(name, namespace),
            active_generation=action.active,
            generations=action.generations,
        )

    async def _switch_read_alias(
        self, namespace: str, name: str, spec: RagIndexSpec, generation: str
    ) -> None:
        """Move the BM25 read alias to the generation's index (Elasticsearch backends only)."""
        url = elasticsearch_url(spec, name, namespace)
        if url is None:
            return
        alias = lexical_alias(spec, namespace, name)
        login = await self._elasticsearch_login(namespace, name, spec)
        await switch_read_alias(url, alias, lexical_index_name(alias, generation), **login)

    async def _elasticsearch_login(
        self, namespace: str, name: str, spec: RagIndexSpec
    ) -> dict[str, Any]:
        """The credentials and CA the pods use, read from the same Secrets: the scoped user and
        ECK's CA of a managed Elasticsearch, the spec's Secrets of an external one."""
        lexical = spec.lexical

        async def read(secret: str, key: str) -> str:
            return await apply.secret_value(self.kube, namespace, secret, key)

        if managed_elasticsearch(spec):
            user = elasticsearch_user_secret(name)
            return {
                "auth": (await read(user, "username"), await read(user, "password")),
                "ca_pem": await read(elasticsearch_ca_secret(name), CA_KEY),
            }
        login: dict[str, Any] = {}
        if secret := lexical.elasticsearch_credentials_secret:
            login["auth"] = (await read(secret, "username"), await read(secret, "password"))
        if secret := lexical.elasticsearch_api_key_secret:
            login["api_key"] = await read(secret, "api-key")
        if secret := lexical.elasticsearch_ca_secret:
            login["ca_pem"] = await read(secret, CA_KEY)
        return login

    def _local_data_dir(self, namespace: str, name: str, generation: str) -> str:
        return str(Path(self.options.local_data_root) / namespace / name / generation)

    async def _reconcile_local(
        self, namespace: str, name: str, spec: RagIndexSpec, status: Any, generation: int
    ) -> dict[str, Any]:
        target = index_generation(spec)
        active = (status or {}).get("activeGeneration")
        if active not in (None, target):
            # One Serve app, redeployed in place: its new replicas would answer from an empty
            # generation while it backfills. Refuse, and keep the serving one untouched.
            raise Refused(
                "GenerationChangeUnsupported",
                [
                    f"the spec moves generation {active} to {target} (embedder, dense layout"
                    " or chunking changed), which the local runtime cannot backfill beside the"
                    " serving one: revert those fields, rebuild on one machine with"
                    " `ragindex reindex`, or use the cluster runtime"
                ],
            )
        config = local_runtime.render_local(
            namespace,
            name,
            spec,
            data_dir=self._local_data_dir(namespace, name, target),
            host=self.options.serve_host,
            port=self.options.serve_port,
        )
        await self.serve.deploy(config)
        return await self._local_serving(namespace, name, spec, status, generation, True)

    async def _local_serving(
        self,
        namespace: str,
        name: str,
        spec: RagIndexSpec,
        status: Any,
        generation: int,
        reconciled: bool,
    ) -> dict[str, Any]:
        # Serve's own rolling update keeps old replicas until new ones are healthy, so the
        # local runtime redeploys one application in place for changes inside a generation;
        # the generation names its data (a generation change is refused, see above).
        target = index_generation(spec)
        app = local_runtime.app_name(namespace, name)
        serving = local_runtime.serve_app_verdict(await self.serve.details(), app)
        return desired_status(
            status,
            observed_generation=generation,
            now=_now(),
            reconcile=Verdict(True, "Applied", f"generation {target} deployed")
            if reconciled
            else None,
            serving=serving,
            endpoint=local_runtime.local_endpoint(
                self.options.serve_host, self.options.serve_port, namespace, name
            ),
            active_generation=target if serving.ok else None,
        )

    async def check_ready(
        self,
        *,
        name: str,
        namespace: str | None,
        uid: str,
        spec: Any,
        meta: Any,
        status: Any,
        patch: kopf.Patch,
        **_: Any,
    ) -> None:
        """Timer: follow readiness of the applied spec; a spec not (yet) applied is skipped."""
        namespace = _namespaced(namespace)
        generation = int(meta.get("generation") or 0)
        reconciled = find_condition((status or {}).get("conditions") or [], RECONCILED)
        if (
            reconciled is None
            or reconciled.get("status") != "True"
            or (status or {}).get("observedGeneration") != generation
        ):
            return
        parsed = validate_spec(name, spec, self.options.runtime)
        if self.options.runtime == "local":
            desired = await self._local_serving(namespace, name, parsed, status, generation, False)
        else:
            desired = await self._cluster_serving(
                namespace, name, uid, parsed, status, generation, False
            )
        _write_status(patch, status, desired)

    async def observe(
        self, *, type: str | None, name: str, namespace: str | None, status: Any, **_: Any
    ) -> None:
        """Every watch event: the RagIndex's status as stored, for the phase and condition
        gauges (DELETED: it is gone). Async, so it runs in kopf's loop, never in a thread."""
        self.metrics.observe(
            _namespaced(namespace), name, None if type == "DELETED" else dict(status or {})
        )

    async def delete_local(self, *, name: str, namespace: str | None, **_: Any) -> None:
        """Local runtime: there is no garbage collector for Serve apps, so remove ours."""
        await self.serve.remove(local_runtime.app_name(_namespaced(namespace), name))


def _login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


def register(
    options: OperatorOptions,
    registry: kopf.OperatorRegistry | None = None,
    metrics: OperatorMetrics | None = None,
) -> kopf.OperatorRegistry:
    """Register the RagIndex handlers, bound to `options`, on a (new) registry; they record
    into `metrics` (a fresh, unserved set when None)."""
    reg = registry if registry is not None else kopf.OperatorRegistry()
    op = RagIndexOperator(options, metrics if metrics is not None else OperatorMetrics())
    # A fresh registry has no login handler: in-cluster service account first, else kubeconfig.
    kopf.on.login(registry=reg)(_login)
    kopf.on.startup(registry=reg)(op.startup)
    kopf.on.cleanup(registry=reg)(op.cleanup)
    for on in (kopf.on.create, kopf.on.update, kopf.on.resume):
        on(GROUP, VERSION, PLURAL, registry=reg, id="reconcile", backoff=APPLY_RETRY_S)(
            op.reconcile
        )
    kopf.on.event(GROUP, VERSION, PLURAL, registry=reg, id="observe")(op.observe)
    kopf.timer(
        GROUP,
        VERSION,
        PLURAL,
        registry=reg,
        id="ready",
        interval=options.poll_interval_s,
        initial_delay=options.poll_interval_s,
    )(op.check_ready)
    if options.runtime == "local":
        # A failed removal (the dashboard busy) retries soon, not after kopf's default 60 s.
        kopf.on.delete(
            GROUP, VERSION, PLURAL, registry=reg, id="delete-serve-app", backoff=APPLY_RETRY_S
        )(op.delete_local)
    return reg
