"""Shared pytest fixtures: the reference binary, the model twins, and running servers (session-scoped)."""

from __future__ import annotations

import pytest

from server import blas

blas.activate()  # before any test imports mlx: the reference BLAS would make every model test crawl


@pytest.fixture(autouse=True, scope="module")
def _hand_back_mlx_memory():
    """After each module, what its models and engines left in MLX's buffer cache goes back to the system: the
    suite's one process otherwise keeps every module's peak, and the conformance servers start after them."""
    yield
    import sys

    if "mlx.core" in sys.modules:
        from server.backends.memory import hand_back

        hand_back()


def require(present: bool, why: str) -> None:
    """A prerequisite of a test (a binary, the reference sources, the live reference): missing, the test skips on
    a developer's machine and fails in CI (CI=true), where every prerequisite is provided and a skip would pass
    a suite that never ran."""
    import os

    if present:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"missing prerequisite in CI: {why}", pytrace=False)
    pytest.skip(why)


def oracle_offline() -> bool:
    """MLXCEL_ORACLE_OFFLINE=1: the reference binary is absent; recorded transcripts stand in for it."""
    from oracle import live

    return live.offline()


def reference_live(key: str, recorded: bool = True) -> bool:
    """Whether the case (or suite) under `key` meets the live reference on this run (oracle/live.py)."""
    from oracle import live

    return live.live(key, recorded)


def pytest_collection_modifyitems(config, items):
    """The rotation (oracle/rotation.py): in CI, the slow suites' tests of this landing's third; the test functions
    that lost some are listed beside the evidence for the manifest's gate."""
    from oracle import rotation
    from oracle.evidence import evidence_dir

    turn = rotation.landing()
    keep, rotated = rotation.select([item.nodeid for item in items], turn)
    if turn is None:
        return
    dropped = [item for item, k in zip(items, keep, strict=True) if not k]
    items[:] = [item for item, k in zip(items, keep, strict=True) if k]
    config.hook.pytest_deselected(items=dropped)
    rotation.write_rotated(rotated, evidence_dir())
    config._mlxcel_rotation = (turn, len(dropped))


def pytest_collection_finish(session):
    """How many server states (own-server pairs) the selected corpus cases need: shown as [pair i/n]."""
    from oracle.corpus import server_states

    cases = [
        item.callspec.params["case"]
        for item in session.items
        if item.get_closest_marker("own_server") and hasattr(item, "callspec") and "case" in item.callspec.params
    ]
    session.config._mlxcel_pairs = len(server_states(cases))


def pytest_report_header(config):
    if any("conformance" in str(a) for a in config.args) or not config.args:
        from oracle import live

        try:
            return live.describe()
        except Exception as exc:  # the header never stops a run; the cases say what is wrong
            return f"reference: {exc}"
    return None


@pytest.fixture(scope="session")
def reference_binary():
    require(not oracle_offline(), "needs the live reference binary (MLXCEL_ORACLE_OFFLINE=1)")
    from oracle.reference import build_reference

    return build_reference()


@pytest.fixture(scope="session")
def twin_q4_1():
    from fixtures.twins import twin

    return twin("q4_1")


@pytest.fixture(scope="session")
def twin_f32():
    from fixtures.twins import twin

    return twin("f32")


@pytest.fixture(scope="session")
def twin_f32_minilm():
    from fixtures.twins import twin

    return twin("f32_minilm")


@pytest.fixture(scope="session")
def twin_f32_rerank():
    from fixtures.twins import twin

    return twin("f32_rerank")


@pytest.fixture(scope="session")
def twin_f32_fim():
    from fixtures.twins import twin

    return twin("f32_fim")


def _serve(proc):
    proc.start()
    try:
        yield proc
    finally:
        proc.cleanup()


from oracle.processes import COMMON_ARGS, shared_args  # noqa: E402  (after the BLAS interposition above)

COMMON_ARGS = [*COMMON_ARGS, *shared_args()]  # the shared pairs: a defined starting state per case


@pytest.fixture(scope="session")
def mlxcel_q4_1(twin_q4_1):
    from oracle.processes import mlxcel_server

    yield from _serve(mlxcel_server(twin_q4_1.mlx_model, COMMON_ARGS))


@pytest.fixture(scope="session")
def reference_q4_1(reference_binary, twin_q4_1):
    from oracle.processes import reference_server

    yield from _serve(reference_server(reference_binary, twin_q4_1.gguf, COMMON_ARGS))


@pytest.fixture(scope="session")
def mlxcel_f32(twin_f32):
    from oracle.processes import F32_NUMERICS, mlxcel_server

    yield from _serve(mlxcel_server(twin_f32.mlx_model, [*COMMON_ARGS, *F32_NUMERICS]))


@pytest.fixture(scope="session")
def reference_f32(reference_binary, twin_f32):
    from oracle.processes import F32_NUMERICS, reference_server

    yield from _serve(reference_server(reference_binary, twin_f32.gguf, [*COMMON_ARGS, *F32_NUMERICS]))


@pytest.fixture
def live_reference_q4_1(request):
    """The reference on the Q4_1 twin, or None where its recorded answers stand in (offline, or the test's
    module is outside this run's live share)."""
    return request.getfixturevalue("reference_q4_1") if reference_live(request.module.__name__) else None


@pytest.fixture
def live_reference_f32(request):
    return request.getfixturevalue("reference_f32") if reference_live(request.module.__name__) else None


def _announce_pair(config, started: int, twin_kind: str, args: tuple[str, ...], with_reference: bool) -> None:
    """Which server state the cases now running need, among how many (past pytest's capture)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    flags = " ".join(args)
    total = getattr(config, "_mlxcel_pairs", 0)
    with config.pluginmanager.get_plugin("capturemanager").global_and_fixture_disabled():
        reporter.write_line(
            f"[pair {started}/{total}{'' if with_reference else ', recorded reference'}] {twin_kind}: "
            f"{flags[:90] + '...' if len(flags) > 90 else flags}"
        )


class _CorpusPairs:
    """Servers for corpus cases with flags of their own: one fresh pair per (twin, flags), started on first use.

    Only the current group's pair stays up (the corpus is ordered by group), and the next group's pair is
    launched while this one boots and serves its cases: a pair's start is ~2 s of one core (imports and loading),
    most corpus states hold one short case, and the machine has a second core. A pair per group at once would not
    fit in memory."""

    def __init__(self, request):
        self.request = request
        self.key: tuple | None = None
        self.urls: tuple | None = None
        self.procs: list = []
        self.started = 0
        self.reapers: list = []
        self.ahead: dict = {}  # a state's key -> its pair, launched and not yet waited for

    def _stop(self) -> None:  # the next pair starts while this one shuts down
        from oracle.processes import stop_in_background

        self.reapers.append(stop_in_background(self.procs))
        self.key, self.urls, self.procs = None, None, []

    def _launch(self, twin_kind: str, args: tuple[str, ...], with_reference: bool, store: bool) -> tuple:
        from oracle.processes import ROUTER, server_pair

        if twin_kind != ROUTER:
            self.request.getfixturevalue(f"twin_{twin_kind}")  # built once per session
        binary = self.request.getfixturevalue("reference_binary") if with_reference else None
        ref, mine = server_pair(twin_kind, args, binary, with_reference=with_reference, store=store)
        both = [mine] if ref is None else [mine, ref]
        for p in both:
            p.launch()
        return mine, ref, both

    def _launch_ahead(self, following: tuple | None, now: tuple) -> None:
        if following is None:
            return
        twin_kind, args, with_reference, state, store = following
        key = (state or (twin_kind, args), with_reference)
        if key != now and key not in self.ahead:
            self.ahead[key] = self._launch(twin_kind, args, with_reference, store)

    def get(
        self,
        twin_kind: str,
        args: tuple[str, ...],
        with_reference: bool = True,
        state: str | None = None,
        store: bool = False,
        following: tuple | None = None,
    ):
        """(mlxcel url, reference url or None without the reference: oracle/live.py decides per state); `state`
        (oracle.corpus.server_states) tells apart two pairs of the same flags (a fresh case's own); `following`:
        the next case's (twin, args, with_reference, state, store), launched ahead."""
        from oracle.processes import start_together

        key = (state or (twin_kind, args), with_reference)
        if self.key != key:
            self._stop()
            mine, ref, both = self.ahead.pop(key, None) or self._launch(twin_kind, args, with_reference, store)
            self.started += 1
            _announce_pair(self.request.config, self.started, twin_kind, args, with_reference)
            self.procs.extend(both)
            self._launch_ahead(following, key)
            start_together(*both)  # side by side: the pair is up in the time of the slower one (launched)
            self.key = key
            self.urls = (mine.base_url, ref.base_url if ref is not None else None)
        return self.urls

    def close(self) -> None:
        from oracle.processes import stop_in_background

        self._stop()
        for _, _, both in self.ahead.values():  # launched for a case that did not run (deselected, a failure)
            self.reapers.append(stop_in_background(both))
        for reaper in self.reapers:
            reaper.join()


@pytest.fixture(scope="session")
def corpus_servers(request):
    """_CorpusPairs.get: the server pair of a corpus case's own state."""
    pairs = _CorpusPairs(request)
    yield pairs.get
    pairs.close()


def pytest_terminal_summary(terminalreporter):
    """The reliability suites' figures (tests/reliability/figures.py), printed and written to a JSON file."""
    from tests.reliability import figures

    rotation = getattr(terminalreporter.config, "_mlxcel_rotation", None)
    if rotation is not None:
        from fixtures.families import ROTATION

        terminalreporter.write_line(
            f"rotation: turn {rotation[0]} of {ROTATION}: {rotation[1]} tests of the rotating suites left to the "
            "other landings (oracle/rotation.py)"
        )
    path = figures.write()
    if path is not None:
        terminalreporter.section("reliability figures")
        for line in figures.lines():
            terminalreporter.write_line(line)
        terminalreporter.write_line(f"(written to {path})")
