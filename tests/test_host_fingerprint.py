"""The host fingerprint: the first processor of /proc/cpuinfo text, jaxlib, XLA_FLAGS."""

from graft_jax import host_fingerprint

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 207
model name\t: Intel(R) Xeon(R) Processor
stepping\t: 2

processor\t: 1
vendor_id\t: GenuineIntel
model\t\t: 999
"""


def test_fingerprint_reads_the_first_processor(monkeypatch):
  monkeypatch.delenv("XLA_FLAGS", raising=False)
  got = host_fingerprint.fingerprint(CPUINFO)
  assert got["cpu"] == "GenuineIntel / Intel(R) Xeon(R) Processor / 6 / 207 / 2"
  assert got["xla_flags"] == ""
  monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_max_isa=AVX2")
  assert host_fingerprint.fingerprint(CPUINFO)["xla_flags"] == "--xla_cpu_max_isa=AVX2"
