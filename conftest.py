"""Shared pytest fixtures: the reference binary, the model twins, and running servers (session-scoped)."""

from __future__ import annotations

import pytest

from server import blas

blas.activate()  # before any test imports mlx: the reference BLAS would make every model test crawl


@pytest.fixture(scope="session")
def reference_binary():
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


def _serve(proc):
    proc.start()
    try:
        yield proc
    finally:
        proc.cleanup()


COMMON_ARGS = ["--alias", "smollm2-135m-instruct"]


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
    from oracle.processes import mlxcel_server

    yield from _serve(mlxcel_server(twin_f32.mlx_model, COMMON_ARGS))


@pytest.fixture(scope="session")
def reference_f32(reference_binary, twin_f32):
    from oracle.processes import F32_NUMERICS, reference_server

    yield from _serve(reference_server(reference_binary, twin_f32.gguf, [*COMMON_ARGS, *F32_NUMERICS]))
