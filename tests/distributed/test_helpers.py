"""``graft_jax.distributed`` across two real CPU processes joined by ``jax.distributed``: rewards
verified where the text is and gathered, host rows into and out of a mesh spanning processes."""

import json

import numpy as np

from graft_jax import distributed
from tests.distributed import procs


def test_share_splits_contiguously_and_covers_everything():
  for num in range(0, 12):
    for count in (1, 2, 3, 5):
      parts = [distributed.share(num, i, count) for i in range(count)]
      assert [p.start for p in parts] == [0] + [p.stop for p in parts[:-1]]
      assert parts[-1].stop == num
      sizes = [p.stop - p.start for p in parts]
      assert max(sizes) - min(sizes) <= 1


def test_single_process_leaves_the_reward_alone():
  fn = lambda texts, golds: ([1.0] * len(texts), None)
  assert distributed.shared_reward(fn) is fn
  assert distributed.is_writer()


def test_two_processes(tmp_path):
  port, out = procs.free_port(), tmp_path / "report.json"
  ps = [procs.spawn("tests.distributed.helpers_child", [i, port, out], tmp_path / f"p{i}.log")
        for i in range(2)]
  codes = procs.finish(ps, timeout=240)
  assert codes == [0, 0], procs.tail(tmp_path / "p0.log") + procs.tail(tmp_path / "p1.log")
  got = json.loads(out.read_text())
  assert got["process"] == 0 and got["writer"]
  # Process 0 verified the first 4 of the 7 responses (texts "0","1","2","0"), no more.
  assert got["seen"] == ["0", "1", "2", "0"]
  assert got["rewards"] == [0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0]
  assert got["stats"] == {"total": 7, "seconds": 1.0}  # summed over both processes
  assert not got["fully_addressable"]
  assert got["local_rows"] == [0, 2]  # data 2 x fsdp 2 over 8 rows: process 0 holds rows 0-3
  assert got["back_equal"] and got["row_sums_equal"]
  assert got["weights_equal"]  # weight sync from a model split across both processes
  assert got["pushed_alike"]  # a GPU push's buckets from both processes: each tensor once
  np.testing.assert_array_equal(got["gathered"], [[0, 0], [0, 0], [0, 0], [1, 1], [1, 1]])
