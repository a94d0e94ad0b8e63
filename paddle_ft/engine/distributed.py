"""The few collective operations training needs, as no-ops in a single process."""
from __future__ import annotations

import contextlib
import io
import os
import re
import sys
from dataclasses import dataclass

# init_parallel_env writes this block to stderr whenever a Paddle flag differs from its default, and one always
# does (FLAGS_enable_pir_in_executor, which Paddle sets itself): a block on every launch that asks nothing of anyone
_FLAGS_BANNER = re.compile(r"=+ Modified FLAGS detected =+\n(?:FLAGS\(.*\)\n)*=+\n")


@dataclass(frozen=True)
class Distributed:
    rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        """Rank 0 alone writes logs, checkpoints, the best model and results."""
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world_size > 1

    def barrier(self) -> None:
        if self.active:
            import paddle.distributed as dist

            dist.barrier()

    def shutdown(self) -> None:
        """Leave the group together: a rank that exits while another still tears down its gloo
        connections can make that one abort (exit code -6) after a run that succeeded."""
        if self.active:
            import paddle.distributed as dist

            dist.barrier()
            dist.destroy_process_group()

    def step_totals(self, loss, stop: bool) -> tuple[float, bool]:
        """(a training step's loss, a scalar tensor, summed over the ranks; whether any rank was asked to stop), in
        one collective and one host read: the loss is not read on its own first."""
        if not self.active:
            return float(loss), stop
        import paddle
        import paddle.distributed as dist

        tensor = paddle.concat([loss.astype("float64").reshape([1]), paddle.to_tensor([float(stop)], dtype="float64")])
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        total, stops = tensor.numpy().tolist()
        return total, stops > 0

    def average_gradients(self, parameters) -> None:
        """Every parameter's gradient averaged over the ranks, in buckets (Paddle's fused all-reduce, as
        PaddleNLP's Trainer calls it after accumulating under no_sync)."""
        if not self.active:
            return
        from paddle.distributed.fleet.utils.hybrid_parallel_util import fused_allreduce_gradients

        fused_allreduce_gradients(list(parameters), None)

    def gather(self, obj) -> list:
        """`obj` from every rank, in rank order (picklable objects)."""
        if not self.active:
            return [obj]
        import paddle.distributed as dist

        gathered: list = []
        dist.all_gather_object(gathered, obj)
        return gathered


def from_environment() -> Distributed:
    """Rank and world size as `paddle.distributed.launch` sets them; joins the group when there are
    several processes. Called once, at the command-line edge."""
    world_size = int(os.environ.get("PADDLE_TRAINERS_NUM", "1"))
    if world_size <= 1:
        return Distributed()
    import paddle.distributed as dist

    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            dist.init_parallel_env()
    finally:  # anything else it wrote (a warning, an error's context) still shows
        sys.stderr.write(_FLAGS_BANNER.sub("", captured.getvalue()))
    return Distributed(dist.get_rank(), dist.get_world_size())
