"""One rank of a tensor-parallel forward pass (run by mlx.launch): the checkpoint's attention heads and MLP
columns split across the ranks with mlx.distributed (mlx-lm's shard()), rank 0 writing the logits."""

import sys
from pathlib import Path

from server import blas

blas.activate()  # before the first import of mlx

import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402

from server.models.loader import load_checkpoint  # noqa: E402


def main(model_dir: str, out: str) -> None:
    group = mx.distributed.init(backend="ring", strict=True)
    model = load_checkpoint(Path(model_dir), transpose=False).model
    model.shard(group)
    tokens = mx.array([[504, 3458, 282, 4649, 314, 7042, 30, 198] * 4])
    logits = model(tokens)[0].astype(mx.float32)
    mx.eval(logits)
    if group.rank() == 0:
        np.save(out, np.array(logits))
    print(f"rank {group.rank()} of {group.size()}: done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
