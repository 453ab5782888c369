"""The toy comparison's table: the cost line under it."""

from graft_jax.experiments import toy_report


def _evals(avg):
  return {n: {"average": avg, "pass1": {"add": avg}} for n in ("a", "b")}


def test_results_table_cost_line():
  results = {"names": ["a", "b"], "groups": ["add"], "eval_k": 2, "initial": _evals(0.1),
             "runs": {"grpo": {"evals": _evals(0.2)},  # a run older than the cost fields
                      "graft": {"evals": _evals(0.3),
                                "cost": {"device_s": 1234.4, "update_flops": 5.0e12}}}}
  text = toy_report.results_table(results)
  assert text.splitlines()[-1] == ("cost from step 1 on, both models (step 0 compiles): "
                                   "grpo —; graft 1234 device-s, 5.00e+12 update FLOPs")
