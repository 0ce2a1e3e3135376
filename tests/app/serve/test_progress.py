"""The Router's cache of the view replicas Serve runs (no Serve: the controller is faked)."""

from __future__ import annotations

from ragindex.app.serve.progress import Running, RunningReplicasCache


class Controller:
    """Answers `running_replicas` from a table the test changes, counting the asks."""

    def __init__(self) -> None:
        self.running: Running = {"Shard0": {"a"}}
        self.asks = 0

    def __call__(self, app: str, views: list[str]) -> Running:
        self.asks += 1
        return {v: set(self.running.get(v, set())) for v in views}


def test_the_running_list_is_asked_again_only_once_it_is_too_old() -> None:
    now = [100.0]
    controller = Controller()
    cache = RunningReplicasCache(1.0, controller, lambda: now[0])
    assert cache.get("app", ["Shard0"]) == {"Shard0": {"a"}}
    controller.running = {"Shard0": {"a", "b"}}  # a replica starts
    now[0] += 0.9
    assert cache.get("app", ["Shard0"]) == {"Shard0": {"a"}} and controller.asks == 1
    now[0] += 0.2
    assert cache.get("app", ["Shard0"]) == {"Shard0": {"a", "b"}} and controller.asks == 2


def test_other_deployments_or_another_app_are_asked_at_once() -> None:
    controller = Controller()
    cache = RunningReplicasCache(1.0, controller, lambda: 0.0)
    cache.get("app", ["Shard0"])
    assert cache.get("app", ["Shard0", "Lexical"]) == {"Shard0": {"a"}, "Lexical": set()}
    cache.get("other", ["Shard0", "Lexical"])
    assert controller.asks == 3
