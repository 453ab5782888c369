"""A stop signal that reaches one process of a ``jax.distributed`` run stops every process
after the same step (the preemption sync point of ``graft_jax.preemption``)."""

import json

from tests.distributed import procs


def test_a_signal_to_one_process_stops_both_after_the_same_step(tmp_path):
  port = procs.free_port()
  ps = [procs.spawn("tests.distributed.stop_child", [i, port, tmp_path, 3],
                    tmp_path / f"p{i}.log") for i in range(2)]
  codes = procs.finish(ps, timeout=240)
  assert codes == [0, 0], procs.tail(tmp_path / "p0.log") + procs.tail(tmp_path / "p1.log")
  got = [json.loads((tmp_path / f"{i}.json").read_text()) for i in range(2)]
  assert got == [{"stopped_before": 4, "agreed": 15, "own": 0},
                 {"stopped_before": 4, "agreed": 15, "own": 15}]
